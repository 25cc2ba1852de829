//! RMSNorm and fused residual-add RMSNorm on an AMD GPU (feature `rocm`) against the
//! CPU reference, and tuning on AMD end to end: a search over the device's space on
//! the in-place fused kernel (its buffers must hold one plain run's result after it),
//! then `tune_table` writing a gfx table with provenance, as
//! `kernels tune --backend hip` does.
//!
//! Without an AMD GPU each test prints `SKIPPED ...` to stderr; with
//! `KERNELS_REQUIRE_GPU=1` that is a failure instead.

use kernels_core::testing::hip::{runtime, Buf};
use kernels_core::testing::{assert_rows as compare, skip_or_fail, stored};
use kernels_core::{
    backend::hip::HipCompiler,
    cache::AlignClass,
    launch::pseudo_random,
    tune::{tune_table, TableJob, TuneOptions},
    DeviceInfo, DiskCache, DynTunable, Error, Hip, HipRuntime, ImageKind, PlannedKernel, Rows, Variant,
};
use kernels_rmsnorm::ops::{self as norm_hip, FUSED_ADD_RMSNORM_TUNABLE as FUSED_ADD_RMSNORM_HIP_TUNABLE};
use kernels_rmsnorm::plan::{NormProblem, SOURCE};
use kernels_rmsnorm::{reference, space, FusedAddRmsNorm, RmsNorm, RmsNormKey};
use tuned::{resolve_serve, DType, Resolved, Source, StaticKey, TunedKernel};

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kernels-rmsnorm-hip-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The problem of `y = rmsnorm(x) * weight` (eps 1e-6) over buffers of this device.
fn rmsnorm_problem<'a>(dtype: DType, x: &'a Buf, w: &'a Buf, y: &'a Buf, shape: Rows) -> NormProblem<'a> {
    // SAFETY: live allocations of this device with the lengths given.
    unsafe {
        NormProblem::rmsnorm_raw(
            dtype,
            x.ptr(),
            x.len(),
            shape,
            w.ptr(),
            w.len(),
            y.ptr(),
            y.len(),
            shape,
            1e-6,
        )
    }
    .expect("valid problem")
}

/// The problem of `residual += x; x = rmsnorm(residual) * weight` (eps 1e-6), in
/// place over buffers of this device.
fn fused_problem<'a>(dtype: DType, x: &'a Buf, res: &'a Buf, w: &'a Buf, shape: Rows) -> NormProblem<'a> {
    // SAFETY: live allocations of this device with the lengths given.
    unsafe {
        NormProblem::fused_add_rmsnorm_raw(
            dtype,
            x.ptr(),
            x.len(),
            shape,
            res.ptr(),
            res.len(),
            shape,
            w.ptr(),
            w.len(),
            1e-6,
        )
    }
    .expect("valid problem")
}

/// The resolution `serve` gives on this device: the gfx table, else the default.
fn serve<K: TunedKernel<Key = RmsNormKey>>(
    rt: &HipRuntime,
    key: &RmsNormKey,
    rows: u64,
) -> Resolved<K::Config> {
    let limits = rt.info();
    match limits.target() {
        Some(t) => resolve_serve::<K>(t, key, rows),
        None => Resolved {
            config: K::analytic_default(limits.tuning_target(), key, rows),
            source: Source::Default,
        },
    }
}

/// The variant of `K`'s analytic default for bf16 rows of 4096 on `target`'s nominal
/// device, as the crate derives it.
fn default_variant<K: PlannedKernel<Key = RmsNormKey> + TunedKernel<Key = RmsNormKey>>(
    target: tuned::Target,
) -> Variant {
    let key = RmsNormKey {
        dtype: DType::Bf16,
        cols: 4096,
    };
    let info = DeviceInfo::nominal(target).expect("a nominal AMD device");
    <K as PlannedKernel>::variant(
        &info,
        &key,
        &<K as TunedKernel>::analytic_default(target, &key, 1),
    )
}

/// Both entry points of the device source (after the prelude) compile with hipRTC for
/// gfx90a and gfx942, no GPU needed: code objects holding their symbol. An arch this
/// hipRTC cannot target, or a HIP 5 hipRTC (the prelude is written for the clang of
/// ROCm 6 and later), is reported as skipped; any other compile error fails.
#[test]
fn hiprtc_compiles_both_entry_points() {
    let test = "hiprtc_compiles_both_entry_points";
    let c = match HipCompiler::detect() {
        Ok(c) => c,
        Err(e) => return skip_or_fail(test, &format!("hipRTC could not be loaded ({e})")),
    };
    let mut compiled = 0;
    for target in [tuned::Target::Gfx90a, tuned::Target::Gfx942] {
        for variant in [
            default_variant::<RmsNorm>(target),
            default_variant::<FusedAddRmsNorm>(target),
        ] {
            let what = format!("{test} [{}] {variant}", target.name());
            match c.compile(&SOURCE, &variant, target.name()) {
                Ok(image) => {
                    assert_eq!(image.kind, ImageKind::CodeObject);
                    assert_eq!(&image.bytes[..4], b"\x7fELF", "{what}: not an ELF code object");
                    let entry = variant.entry().as_bytes();
                    assert!(
                        image.bytes.windows(entry.len()).any(|w| w == entry),
                        "{what}: the code object has no symbol `{}`",
                        variant.entry()
                    );
                    compiled += 1;
                }
                Err(Error::HipCompile { log, .. }) if log.contains("does not know") => {
                    skip_or_fail(&what, &format!("this hipRTC cannot target it: {log}"));
                }
                Err(Error::HipCompile { log, .. }) if c.hip_version().0 < 6 => {
                    let first_error = log.lines().find(|l| l.contains("error")).unwrap_or(&log);
                    skip_or_fail(
                        &what,
                        &format!(
                            "the prelude does not compile with this HIP 5 hipRTC ({}): {first_error}",
                            c.id()
                        ),
                    );
                }
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }
    if compiled == 0 {
        skip_or_fail(test, "hipRTC loaded but compiled no variant here (see above)");
    }
}

/// Both entry points load on an AMD GPU as modules of the `rmsnorm` source.
#[test]
fn both_entry_points_load_on_the_device() {
    let Some((rt, stream)) = runtime("both_entry_points_load_on_the_device", DiskCache::disabled()) else {
        return;
    };
    let target = rt.info().tuning_target();
    for variant in [
        default_variant::<RmsNorm>(target),
        default_variant::<FusedAddRmsNorm>(target),
    ] {
        let k = rt.kernel(&stream, &SOURCE, &variant).unwrap();
        assert_eq!(kernels_core::LoadedKernel::name(&*k), "rmsnorm", "{variant}");
    }
}

#[test]
fn ops_match_the_reference_and_resolve_like_cuda() {
    let Some((rt, stream)) = runtime(
        "ops_match_the_reference_and_resolve_like_cuda",
        DiskCache::from_env(),
    ) else {
        return;
    };
    for (dtype, rows, cols, stride, offset) in [
        (DType::Bf16, 1, 64, 64, 0),
        (DType::Bf16, 7, 4096, 4096, 0),
        (DType::Bf16, 3, 97, 104, 1),
        (DType::F16, 5, 8192, 8200, 0),
        (DType::F32, 4, 5120, 5120, 2),
        (DType::Bf16, 2, 16384, 16384, 0),
    ] {
        let shape = Rows::strided(rows, cols, stride);
        let n = shape.span().unwrap();
        let what = format!("{dtype} [{rows}, {cols}] stride {stride} offset {offset}");
        let key = RmsNormKey {
            dtype,
            cols: cols as u32,
        };
        let x_host = stored(dtype, &pseudo_random(n, 5, 3.0, 0.0));
        let w_host = stored(dtype, &pseudo_random(cols, 6, 0.5, 1.0));
        let r_host = stored(dtype, &pseudo_random(n, 8, 2.0, 0.0));
        let poison = vec![9.5f32; n];
        let (x, w) = (
            Buf::new(&rt, dtype, &x_host, offset),
            Buf::new(&rt, dtype, &w_host, offset),
        );

        // rmsnorm
        let y = Buf::new(&rt, dtype, &poison, offset);
        let p = rmsnorm_problem(dtype, &x, &w, &y, shape);
        let used = norm_hip::rmsnorm(&rt, &stream, &p).unwrap_or_else(|e| panic!("rmsnorm {what}: {e}"));
        stream.synchronize().unwrap();
        let mut want = poison.clone();
        reference::rmsnorm(&x_host, stride, &w_host, &mut want, stride, rows, 1e-6);
        reference::check(&format!("rmsnorm {what}"), dtype, &y.read(), &want, shape, 1)
            .unwrap_or_else(|e| panic!("{e}"));
        let expected = serve::<RmsNorm>(&rt, &key, rows as u64);
        assert_eq!(used.source, expected.source, "rmsnorm {what}");
        if offset == 0 && stride % 8 == 0 {
            assert_eq!(used.config, expected.config, "rmsnorm {what}");
        }

        // fused_add_rmsnorm, in place on x and residual.
        let (xf, res) = (
            Buf::new(&rt, dtype, &x_host, offset),
            Buf::new(&rt, dtype, &r_host, offset),
        );
        let p = fused_problem(dtype, &xf, &res, &w, shape);
        let used =
            norm_hip::fused_add_rmsnorm(&rt, &stream, &p).unwrap_or_else(|e| panic!("fused {what}: {e}"));
        stream.synchronize().unwrap();
        let (mut want_x, mut want_r) = (x_host.clone(), r_host.clone());
        reference::fused_add_rmsnorm(
            &mut want_x,
            stride,
            &mut want_r,
            stride,
            &w_host,
            rows,
            1e-6,
            dtype,
        );
        compare(
            &format!("fused residual {what}"),
            &res.read(),
            &want_r,
            shape,
            (0.0, 0.0),
        );
        reference::check(&format!("fused x {what}"), dtype, &xf.read(), &want_x, shape, 1)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            used.source,
            serve::<FusedAddRmsNorm>(&rt, &key, rows as u64).source,
            "fused {what}"
        );
    }
}

#[test]
fn every_config_of_the_device_space_matches_the_reference() {
    let Some((rt, stream)) = runtime(
        "every_config_of_the_device_space_matches_the_reference",
        DiskCache::from_env(),
    ) else {
        return;
    };
    let (dtype, shape) = (DType::Bf16, Rows::contiguous(9, 4096));
    let key = RmsNormKey { dtype, cols: 4096 };
    let x_host = stored(dtype, &pseudo_random(9 * 4096, 2, 3.0, 0.0));
    let w_host = stored(dtype, &pseudo_random(4096, 4, 0.5, 1.0));
    let (x, w) = (Buf::new(&rt, dtype, &x_host, 0), Buf::new(&rt, dtype, &w_host, 0));
    let mut want = vec![0.0f32; 9 * 4096];
    reference::rmsnorm(&x_host, 4096, &w_host, &mut want, 4096, 9, 1e-6);
    let configs = space::search_space(rt.info().tuning_target(), &key, false);
    assert!(!configs.is_empty());
    for c in configs {
        let y = Buf::new(&rt, dtype, &vec![0.0; 9 * 4096], 0);
        let p = rmsnorm_problem(dtype, &x, &w, &y, shape);
        rt.launch_config::<RmsNorm>(&stream, &c, &p)
            .unwrap_or_else(|e| panic!("{c:?}: {e}"));
        stream.synchronize().unwrap();
        reference::check(&format!("{c:?}"), dtype, &y.read(), &want, shape, 1)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// A search on the in-place fused kernel: every candidate runs many times on the same
/// x and residual, so without the restore the residual would hold dozens of
/// additions. After the search both hold exactly one plain run's result.
#[test]
fn tuning_restores_in_place_buffers_and_writes_a_gfx_table() {
    let cache_dir = temp_dir("cache");
    let Some((rt, stream)) = runtime(
        "tuning_restores_in_place_buffers_and_writes_a_gfx_table",
        DiskCache::at(cache_dir.clone()),
    ) else {
        return;
    };
    let (dtype, rows, cols) = (DType::Bf16, 16usize, 2048usize);
    let shape = Rows::contiguous(rows, cols);
    let x_host = stored(dtype, &pseudo_random(rows * cols, 21, 2.0, 0.0));
    let r_host = stored(dtype, &pseudo_random(rows * cols, 22, 2.0, 0.0));
    let w_host = stored(dtype, &pseudo_random(cols, 23, 0.5, 1.0));
    let (x, res, w) = (
        Buf::new(&rt, dtype, &x_host, 0),
        Buf::new(&rt, dtype, &r_host, 0),
        Buf::new(&rt, dtype, &w_host, 0),
    );
    let p = fused_problem(dtype, &x, &res, &w, shape);
    let mut opts = TuneOptions::default();
    opts.timing.reps = 10;
    opts.max_candidates = 6;
    let report = rt.tune::<FusedAddRmsNorm>(&stream, &p, &opts);
    assert_eq!(report.failure, None);
    assert_eq!(report.final_run, Ok(()));
    assert!(
        report.chosen_index.is_some() && report.default_us().is_some(),
        "{report:?}"
    );
    assert!(report.candidates.len() <= 6);
    let key = RmsNormKey {
        dtype,
        cols: cols as u32,
    };
    assert_eq!(
        report.candidates[0].config,
        FusedAddRmsNorm::analytic_default(rt.info().tuning_target(), &key, rows as u64),
        "the analytic default is the first candidate"
    );
    let (mut want_x, mut want_r) = (x_host.clone(), r_host.clone());
    reference::fused_add_rmsnorm(&mut want_x, cols, &mut want_r, cols, &w_host, rows, 1e-6, dtype);
    compare("residual after tuning", &res.read(), &want_r, shape, (0.0, 0.0));
    reference::check("x after tuning", dtype, &x.read(), &want_x, shape, 1).unwrap_or_else(|e| panic!("{e}"));
    let record = rt.record_of::<FusedAddRmsNorm>(&report).unwrap();
    assert_eq!(record.device, rt.device().info().name);
    assert!(record.compiler.starts_with("hiprtc"), "{}", record.compiler);

    // Graph timing is CUDA's: a graph-timed search is refused, the buffers untouched.
    let mut graph = opts.clone();
    graph.timing.method = kernels_core::tune::TimingMethod::Graph;
    let refused = rt.tune::<FusedAddRmsNorm>(&stream, &p, &graph);
    assert!(
        refused.failure.as_deref().is_some_and(|f| f.contains("graph")) && refused.candidates.is_empty(),
        "{refused:?}"
    );
    compare(
        "residual after a refused search",
        &res.read(),
        &want_r,
        shape,
        (0.0, 0.0),
    );

    // The table `kernels tune --backend hip` writes, for one shape.
    let Some(target) = rt.info().target() else {
        eprintln!(
            "SKIPPED the table half of this test: arch {} has no table target",
            rt.arch()
        );
        return;
    };
    let tables = temp_dir("tables");
    let k: &dyn DynTunable<Hip> = &FUSED_ADD_RMSNORM_HIP_TUNABLE;
    let static_key = StaticKey::parse(k.schema(), "dtype=bf16,cols=2048").unwrap();
    let shapes = vec![(static_key, 8u64)];
    let compiler = rt.compiler().id();
    let job = TableJob {
        schema: k.schema(),
        target,
        source_fingerprint: k.source_fingerprint(),
        device: &rt.device().info().name,
        compiler: &compiler,
        tables_dir: &tables,
        retune: false,
        timing: kernels_core::tune::TimingMethod::Single,
        deadline: None,
        carried: None,
    };
    let key_for = |key: &StaticKey, batch: u64| {
        rt.tuning_key(
            k.schema().kernel,
            k.source_fingerprint(),
            key.as_str(),
            batch,
            AlignClass::A16,
            &k.candidates(rt.info(), key, batch),
        )
    };
    let out = tune_table(
        &job,
        &shapes,
        rt.cache(),
        &key_for,
        &mut |key, batch| k.search(&rt, &stream, key, batch, &opts),
        &mut |_| {},
    )
    .unwrap();
    assert!(out.failed.is_empty(), "{:?}", out.failed);
    assert!(out.written, "nothing written");
    let file = tuned::TableFile::read(&out.path, Some(k.schema())).unwrap();
    assert_eq!(
        out.path,
        tables
            .join("fused_add_rmsnorm")
            .join(format!("{}.json", target.name()))
    );
    assert_eq!(file.header.target, target);
    assert_eq!(file.header.device, rt.device().info().name);
    assert_eq!(file.header.compiler, compiler);
    assert_eq!(
        file.header.source_fingerprint,
        kernels_rmsnorm::SOURCE_FINGERPRINT
    );
    assert_eq!(file.entries.len(), 1);
    assert_eq!(file.entries[0].batch, 8);
    let _ = std::fs::remove_dir_all(&tables);
    let _ = std::fs::remove_dir_all(&cache_dir);
}
