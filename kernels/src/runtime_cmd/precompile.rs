//! `kernels precompile`: compile a kernel's shapes into the module cache.

#[cfg(not(feature = "cuda"))]
use std::path::PathBuf;

#[cfg(feature = "cuda")]
pub use cuda::precompile;

#[cfg(not(feature = "cuda"))]
use super::common::CmdResult;

#[cfg(not(feature = "cuda"))]
pub fn precompile(_: String, _: PathBuf, _: usize) -> CmdResult {
    Err("precompile: this binary was built without the `cuda` feature".into())
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::process::ExitCode;

    use crate::runtime_cmd::common::cuda::{find, open};
    use crate::runtime_cmd::common::{read_shapes, CmdResult};

    /// `kernels precompile KERNEL --shapes FILE`: resolves each shape under the policy
    /// (`KERNELS_TUNING`) and compiles the variants in parallel into the module cache.
    pub fn precompile(kernel: String, shapes: std::path::PathBuf, device: usize) -> CmdResult {
        let k = find(&kernel)?;
        let shapes = read_shapes(k.schema(), &shapes)?;
        let rt = or_fail!("precompile", open(device));
        let stream = or_fail!("precompile", rt.device().new_stream());
        let t = std::time::Instant::now();
        let results = k.precompile(&rt, &stream, &shapes);
        let secs = t.elapsed().as_secs_f64();
        let mut failed = 0;
        let mut sources = std::collections::BTreeMap::<&str, usize>::new();
        for ((key, batch), r) in shapes.iter().zip(&results) {
            match r {
                Ok(source) => *sources.entry(source.name()).or_default() += 1,
                Err(e) => {
                    failed += 1;
                    println!("failed: [{key}] batch {batch}: {e}");
                }
            }
        }
        let s = rt.stats();
        let by_source: Vec<String> = sources.iter().map(|(k, n)| format!("{n} {k}")).collect();
        println!(
            "{} shape(s) of {kernel} in {secs:.2} s: configs from [{}]; {} search(es); {} module(s) compiled, {} from the cache, {failed} failed (policy {})",
            shapes.len(),
            by_source.join(", "),
            s.searches,
            s.compiled,
            s.disk_hits,
            rt.policy()
        );
        Ok(if failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    }
}
