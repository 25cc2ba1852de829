//! Resolving and launching a kernel family on AMD: the policy walk of the CUDA runtime
//! (memo -> baked table of the device's gfx target -> analytic default under `serve`;
//! memo -> tuning cache -> search -> analytic default under `online`), the same
//! [`tuned::Source`] reporting, and launches of the backend-neutral [`crate::LaunchPlan`]
//! on a [`HipStream`].

use std::sync::Arc;

use tuned::{resolve_serve, Resolved, Source};

use super::tuner::HipTunable;
use super::{HipKernel, HipRuntime, HipStream};
use crate::counters::bump;
use crate::precompile::{check_batch, check_config};
use crate::search::canonical_key;
use crate::{resolve_in_order, AlignClass, CacheKey, Error, PlannedKernel, ResolutionSteps, Result, Section};

/// A resolved config with its loaded HIP kernel: what a HIP op launches.
#[derive(Clone, Debug)]
pub struct HipPrepared<C> {
    /// The config and where it came from.
    pub resolved: Resolved<C>,
    pub kernel: Arc<HipKernel>,
    /// Set when the online policy searched and failed, so the analytic default is used.
    pub search_failure: Option<String>,
}

impl HipRuntime {
    /// The online tuning cache key of a problem on this device
    /// ([`super::hip_tuning_key`]); `candidates` is the search's
    /// [`crate::candidates_digest`].
    pub fn tuning_key(
        &self,
        kernel: &str,
        fingerprint: &str,
        static_key: &str,
        batch: u64,
        alignment: AlignClass,
        candidates: &str,
    ) -> CacheKey {
        super::hip_tuning_key(
            self.compiler(),
            self.device().info(),
            kernel,
            fingerprint,
            static_key,
            batch,
            alignment,
            candidates,
        )
    }

    /// The [`crate::candidates_digest`] of a search for `key` at `batch` on this
    /// device (its launch limits).
    pub fn candidates_digest<K: crate::PlannedKernel>(&self, key: &K::Key, batch: u64) -> String {
        crate::candidates_digest::<K>(&self.limits, key, batch)
    }

    /// Resolves the config of `K` for `key` and `batch` under the runtime's policy and
    /// loads its kernel, assuming 16-byte-aligned buffers; memo hits touch neither
    /// compiler nor disk. Call it for every shape before capturing a graph: a launch
    /// that would have to compile while the stream captures is an error.
    pub fn resolve<K: HipTunable>(
        &self,
        stream: &HipStream,
        key: &K::Key,
        batch: u64,
    ) -> Result<HipPrepared<K::Config>> {
        check_batch::<K>(key, batch)?;
        let mkey = (key.clone(), batch, AlignClass::A16);
        self.typed
            .get_or_resolve::<K, _>(mkey, &self.counters.memo_hits, || {
                self.resolve_and_load::<K>(stream, key, batch, AlignClass::A16)
            })
    }

    /// Runs `K` on `problem` on `stream` with the config the policy resolves (fitted to
    /// the problem's alignment), and says which config and where it came from. Under
    /// the online policy a first call searches on a problem the kernel allocates (the
    /// caller's buffers are not touched by the search), then runs the winner once.
    pub fn run<K: HipTunable>(
        &self,
        stream: &HipStream,
        problem: &K::Problem<'_>,
    ) -> Result<HipPrepared<K::Config>> {
        let (key, batch) = K::problem_shape(problem);
        check_batch::<K>(&key, batch)?;
        let align = K::alignment(problem);
        let mkey = (key.clone(), batch, align);
        let p = self
            .typed
            .get_or_resolve::<K, _>(mkey, &self.counters.memo_hits, || {
                self.resolve_and_load::<K>(stream, &key, batch, align)
            })?;
        launch::<K>(&p.kernel, stream, &p.resolved.config, problem)?;
        Ok(p)
    }

    /// Launches `problem` with an explicit `config`, bypassing resolution (tests, A/B
    /// runs); its variant is compiled on first use. A config the kernel does not
    /// accept for this problem on this device is an error naming `config`.
    pub fn launch_config<K: PlannedKernel>(
        &self,
        stream: &HipStream,
        config: &K::Config,
        problem: &K::Problem<'_>,
    ) -> Result<()> {
        let (key, batch) = K::problem_shape(problem);
        let info = &self.limits;
        check_config::<K>(info, &key, batch, config)?;
        let variant = K::variant(info, &key, config);
        self.refuse_if_capturing(stream, K::SOURCE, &variant)?;
        let kernel = self.kernel(K::SOURCE, &variant)?;
        launch::<K>(&kernel, stream, config, problem)
    }

    /// While `stream` captures a graph, a variant not loaded yet is an error: loading
    /// it would compile (or read the disk) inside the capture.
    fn refuse_if_capturing(
        &self,
        stream: &HipStream,
        source: &crate::KernelSource,
        variant: &crate::Variant,
    ) -> Result<()> {
        if self.is_loaded(source, variant) {
            return Ok(());
        }
        if stream.is_capturing()? {
            return Err(capturing(format!(
                "kernel `{}` variant [{variant}] is not loaded yet",
                source.name
            )));
        }
        Ok(())
    }

    /// A memo miss of [`HipRuntime::resolve`] and [`HipRuntime::run`]: refuses while
    /// `stream` captures a graph, resolves under the policy and loads the kernel.
    fn resolve_and_load<K: HipTunable>(
        &self,
        stream: &HipStream,
        key: &K::Key,
        batch: u64,
        align: AlignClass,
    ) -> Result<HipPrepared<K::Config>> {
        if stream.is_capturing()? {
            return Err(capturing(format!(
                "kernel `{}` is not resolved for {key:?} batch {batch} yet",
                K::SCHEMA.kernel
            )));
        }
        let mut steps = Steps::<K> {
            rt: self,
            stream,
            key,
            batch,
            align,
            tuning_key: std::cell::OnceCell::new(),
        };
        let mut outcome = resolve_in_order(self.policy, &mut steps);
        outcome.resolved.config = K::fit_alignment(&self.limits, key, outcome.resolved.config, align);
        let variant = K::variant(&self.limits, key, &outcome.resolved.config);
        let kernel = self.kernel(K::SOURCE, &variant)?;
        Ok(HipPrepared {
            resolved: outcome.resolved,
            kernel,
            search_failure: outcome.failure,
        })
    }
}

/// The error of a launch that would compile while `stream` captures a graph.
fn capturing(what: String) -> Error {
    Error::invalid(
        "stream",
        format!("is capturing a HIP graph and {what}; resolve it before capture (HipRuntime::resolve)"),
    )
}

/// Launches `config` on `problem` on `stream` ([`PlannedKernel::launch_args`]).
fn launch<K: PlannedKernel>(
    kernel: &HipKernel,
    stream: &HipStream,
    config: &K::Config,
    problem: &K::Problem<'_>,
) -> Result<()> {
    let (dims, args) = K::launch_args(kernel.info(), config, problem)?;
    // SAFETY: the arguments follow the kernel's ABI and stay within the problem's
    // buffers (PlannedKernel contract); the problem was validated when it was built.
    unsafe { kernel.launch(stream, dims, &args) }
}

/// The HIP runtime's answers to a policy's steps for one (key, batch, alignment).
struct Steps<'r, K: HipTunable> {
    rt: &'r HipRuntime,
    stream: &'r HipStream,
    key: &'r K::Key,
    batch: u64,
    align: AlignClass,
    /// The tuning cache key, built on first use (shared by the disk lookup and the
    /// store after a search).
    tuning_key: std::cell::OnceCell<CacheKey>,
}

impl<K: HipTunable> Steps<'_, K> {
    fn tuning_key(&self) -> &CacheKey {
        self.tuning_key.get_or_init(|| {
            self.rt.tuning_key(
                K::SCHEMA.kernel,
                K::SOURCE.fingerprint,
                &canonical_key::<K>(self.key),
                self.batch,
                self.align,
                &self.rt.candidates_digest::<K>(self.key, self.batch),
            )
        })
    }
}

impl<K: HipTunable> ResolutionSteps<K::Config> for Steps<'_, K> {
    fn memo(&mut self) -> Option<Resolved<K::Config>> {
        // The runtime checks its memo before walking the policy.
        None
    }

    fn table(&mut self) -> Option<Resolved<K::Config>> {
        let target = self.rt.limits.target()?;
        let r = resolve_serve::<K>(target, self.key, self.batch);
        (r.source != Source::Default).then_some(r)
    }

    fn disk_cache(&mut self) -> Option<K::Config> {
        crate::cached_config::<K>(
            self.rt.cache(),
            self.tuning_key(),
            self.rt.limits.tuning_target(),
            self.key,
            self.batch,
            &self.rt.counters.corrupt_files,
        )
    }

    fn search(&mut self) -> std::result::Result<K::Config, String> {
        bump(&self.rt.counters.searches);
        let mut owned =
            K::alloc_hip_problem(self.rt.device(), self.key, self.batch).map_err(|e| e.to_string())?;
        let problem = K::borrow_hip_problem(&mut owned);
        let report = self.rt.tune::<K>(self.stream, &problem, &self.rt.tune_options);
        let record = self.rt.record_of::<K>(&report).map_err(|e| e.to_string())?;
        // As on CUDA: a winner whose final run failed is neither cached nor served.
        if let Err(e) = &report.final_run {
            return Err(format!("the chosen config's final run failed: {e}"));
        }
        self.rt.counters.note_cache_write(self.rt.cache().store(
            Section::Tuning,
            self.tuning_key(),
            "tune",
            record.to_json().as_bytes(),
        ));
        Ok(report.chosen)
    }

    fn analytic_default(&mut self) -> K::Config {
        K::analytic_default(self.rt.limits.tuning_target(), self.key, self.batch)
    }

    fn remember(&mut self, _resolved: &Resolved<K::Config>) {
        // The runtime memoizes once the kernel is loaded.
    }
}
