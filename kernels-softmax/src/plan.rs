//! Backend-neutral launches of softmax and log-softmax: the problem as device
//! addresses ([`SoftmaxProblem`], validated when built), the config fitted to its
//! alignment, and its launch (dimensions and arguments, [`kernels_core::PlannedKernel`];
//! with the variant, a [`kernels_core::LaunchPlan`]) that both the CUDA ops
//! (`crate::ops`) and the HIP ops (`crate::hip`, feature `rocm`) launch.

use std::marker::PhantomData;

use kernels_core::kernel_crate::{check_device_ptrs, check_row_operands};
use kernels_core::launch::decode;
use kernels_core::{
    cache::AlignClass, check_disjoint, BufferRole, DeviceInfo, Error, Expected, KernelArgs, KernelSource,
    LaunchDims, PlannedKernel, Result, Rows, TuneBuffer, Variant,
};
use tuned::{DType, Target};

use crate::{space, LogSoftmax, Softmax, SoftmaxConfig, SoftmaxKey, Strategy};

/// The device source: `cuda/softmax.cu`, compiled after the shared prelude.
pub static SOURCE: KernelSource = KernelSource::new(
    "softmax",
    include_str!("../cuda/softmax.cu"),
    crate::SOURCE_FINGERPRINT,
)
.with_preamble(&[kernels_core::PRELUDE])
.with_files(crate::SOURCE_FILES)
.programmatic_launch();

/// One softmax call, as device addresses. `y` may be `x` itself (in place, with equal
/// strides). Build it with [`SoftmaxProblem::raw`] (validated); the safe ops in `cuda` build it from cudarc views.
#[derive(Clone, Copy, Debug)]
pub struct SoftmaxProblem<'a> {
    pub(crate) key: SoftmaxKey,
    pub(crate) rows: u64,
    pub(crate) x: u64,
    pub(crate) x_stride: u64,
    pub(crate) y: u64,
    pub(crate) y_stride: u64,
    pub(crate) scale: f32,
    pub(crate) _buffers: PhantomData<&'a mut [u8]>,
}

impl<'a> SoftmaxProblem<'a> {
    /// `y = softmax(x * scale)` per row over device addresses.
    ///
    /// # Safety
    /// `x` and `y` must be device allocations of the runtime's context holding `x_len`
    /// and `y_len` elements of `dtype`, valid for `'a`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn raw(
        dtype: DType,
        x: u64,
        x_len: usize,
        x_rows: Rows,
        y: u64,
        y_len: usize,
        y_rows: Rows,
        scale: f32,
    ) -> Result<SoftmaxProblem<'a>> {
        check_row_operands(("x", x_rows, x_len), ("y", y_rows, y_len))?;
        if !scale.is_finite() {
            return Err(Error::invalid("scale", format!("must be finite, got {scale}")));
        }
        check_device_ptrs(dtype, &[("x", x), ("y", y)])?;
        // In place is fine (each row is read before it is written); partial overlap is not.
        if !(x == y && x_rows.stride == y_rows.stride) {
            check_disjoint(
                ("x", x_rows.byte_range(x, dtype)),
                ("y", y_rows.byte_range(y, dtype)),
            )?;
        }
        Ok(SoftmaxProblem {
            key: SoftmaxKey {
                dtype,
                cols: x_rows.cols as u32,
            },
            rows: x_rows.rows as u64,
            x,
            x_stride: x_rows.stride as u64,
            y,
            y_stride: y_rows.stride as u64,
            scale,
            _buffers: PhantomData,
        })
    }
}

impl<'a> SoftmaxProblem<'a> {
    /// The problem the tuners of both backends time on buffers of their own:
    /// contiguous `[rows, key.cols]` operands at `x` and `y`, scale 1.
    pub(crate) fn tuning(key: SoftmaxKey, rows: u64, x: u64, y: u64) -> SoftmaxProblem<'a> {
        let cols = key.cols as u64;
        SoftmaxProblem {
            key,
            rows,
            x,
            x_stride: cols,
            y,
            y_stride: cols,
            scale: 1.0,
            _buffers: PhantomData,
        }
    }
}

impl SoftmaxProblem<'_> {
    /// The static key: dtype and row length.
    pub fn key(&self) -> SoftmaxKey {
        self.key
    }

    /// The batch: rows.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub(crate) fn span_bytes(&self, stride: u64) -> usize {
        Rows::strided(self.rows as usize, self.key.cols as usize, stride as usize).span_bytes(self.key.dtype)
    }

    /// How far apart, in alignment, `x`'s rows and `y`'s are: the class of the
    /// differences of their addresses and of their byte strides. The kernel splits each
    /// row at its own first aligned vector (cuda/softmax.cu), so where x and y rows
    /// split alike (A16: in place, or buffers allocated alike with equal strides,
    /// whatever the column count or offset) any vector runs; only rows of x and y
    /// misaligned differently narrow it.
    pub(crate) fn alignment(&self) -> AlignClass {
        let s = self.key.dtype.size() as u64;
        AlignClass::of([
            self.x.wrapping_sub(self.y),
            self.x_stride.wrapping_sub(self.y_stride).wrapping_mul(s),
        ])
    }
}

/// The config with its vector narrowed to what the relative alignment of `x` and `y`
/// allows (`SoftmaxProblem::alignment`; odd column counts and offset views keep
/// the vector). A narrower vector needs more vectors per thread, so a register
/// strategy that no longer fits drops `keep` (more vectors, more kept values), then
/// moves to `online`, which takes any length.
pub(crate) fn fit(
    target: Target,
    key: &SoftmaxKey,
    mut c: SoftmaxConfig,
    align: AlignClass,
) -> SoftmaxConfig {
    let size = key.dtype.size() as u32;
    let before = c.vec;
    while c.vec > 1 && c.vec * size > align.bytes() {
        c.vec /= 2;
    }
    if c.vec != before && c.keep && !space::fits(target, key, &c) {
        c.keep = false;
    }
    if c.vec != before && !space::fits(target, key, &c) {
        c = SoftmaxConfig {
            strategy: Strategy::Online,
            threads: c.threads.max(target.warp_size()),
            vec: c.vec,
            rows: 1,
            splits: 1,
            keep: false,
        };
        if !space::fits(target, key, &c) {
            // Rows this short fit one warp's registers whatever the vector.
            c = SoftmaxConfig {
                strategy: Strategy::Row,
                threads: target.warp_size(),
                vec: c.vec,
                rows: 1,
                splits: 1,
                keep: false,
            };
        }
    }
    c
}

/// Largest stage that prefetches the next wave's row: above it a wave of stages and its
/// own traffic no longer fit the 60 MiB L2 together, and the prefetch costs more than it
/// saves (H200 figures in docs/results/softmax.md, section 3).
pub const PREFETCH_MAX_STAGE: u64 = 128 << 10;

/// Rows of one wave for the staged kernel's L2 prefetch of the next wave's row
/// (`PREFETCH_ROWS` in cuda/softmax.cu): on Hopper, for a staged config whose stage
/// takes more than half an SM's shared memory (so exactly one block per SM) and at
/// most [`PREFETCH_MAX_STAGE`], the SMs over the blocks per row; 0 (no prefetch)
/// otherwise.
pub fn prefetch_rows(device: &DeviceInfo, key: &SoftmaxKey, c: &SoftmaxConfig) -> u32 {
    let target = device.tuning_target();
    let stage = c.smem_bytes(target, key);
    let one_per_sm = 2 * stage > device.smem_per_sm as u64;
    if c.strategy == Strategy::Staged && target == Target::Sm90 && one_per_sm && stage <= PREFETCH_MAX_STAGE {
        device.sm_count / c.splits.max(1)
    } else {
        0
    }
}

pub(crate) fn variant(
    target: Target,
    key: &SoftmaxKey,
    c: &SoftmaxConfig,
    log: bool,
    prefetch: u32,
) -> Variant {
    let strategy = match c.strategy {
        Strategy::Row => 0,
        Strategy::Online => 1,
        Strategy::Cluster => 2,
        Strategy::Staged => 3,
    };
    let v = Variant::new("softmax_kernel")
        .define("DTYPE", kernels_core::dtype_define(key.dtype))
        .define("COLS", key.cols)
        .define("THREADS", c.threads)
        .define("VEC", c.vec)
        .define("ROWS", c.rows)
        .define("STRATEGY", strategy)
        .define("SPLITS", c.splits)
        .define("LOG_SOFTMAX", u32::from(log))
        .define("KEEP", u32::from(c.keep));
    match c.strategy {
        Strategy::Staged => v
            .define("STAGE_VECS", c.stage_vectors(target, key))
            .define("PREFETCH_ROWS", prefetch),
        _ => v,
    }
}

/// The launch of `c` on `p` on `device` (softmax and log-softmax alike): one block
/// per row group (`row`), per row (`online`) or per row slice (`cluster`, `staged`,
/// whose stage takes dynamic shared memory), and cuda/softmax.cu's arguments
/// `(x, y, rows, x_stride, y_stride, scale)`. A config whose vector the relative
/// alignment of x and y does not allow (`SoftmaxProblem::alignment`) is an error
/// naming `x`; so are more than 2^31 - 1 blocks (`rows`).
pub fn launch_args(
    device: &DeviceInfo,
    c: &SoftmaxConfig,
    p: &SoftmaxProblem<'_>,
) -> Result<(LaunchDims, KernelArgs)> {
    let align = p.alignment();
    if c.vec * p.key.dtype.size() as u32 > align.bytes() {
        return Err(Error::invalid(
            "x",
            format!(
                "x and y rows {align} apart in alignment do not allow {}-element vectors",
                c.vec
            ),
        ));
    }
    let (blocks, threads) = match c.strategy {
        Strategy::Row => (p.rows.div_ceil(c.rows as u64), c.block_threads()),
        Strategy::Online => (p.rows, c.threads),
        Strategy::Cluster | Strategy::Staged => (p.rows.saturating_mul(c.splits as u64), c.threads),
    };
    if blocks > i32::MAX as u64 {
        return Err(Error::invalid(
            "rows",
            format!("{} rows need more than 2^31 - 1 blocks", p.rows),
        ));
    }
    let target = device.tuning_target();
    // At most the staged limit (space::fits); the launch checks it against the device.
    let smem = u32::try_from(c.smem_bytes(target, &p.key))
        .map_err(|_| Error::invalid("config", "staged slice exceeds shared memory"))?;
    let mut args = KernelArgs::new();
    args.ptr(p.x)
        .ptr(p.y)
        .i64(p.rows as i64)
        .i64(p.x_stride as i64)
        .i64(p.y_stride as i64)
        .f32(p.scale);
    // Clusters are compiled in (__cluster_dims__); the launch checks the grid against
    // them and allows 16-block clusters on the function.
    let cluster = match c.strategy {
        Strategy::Cluster | Strategy::Staged => c.splits.max(1),
        Strategy::Row | Strategy::Online => 1,
    };
    Ok((
        LaunchDims::linear(blocks as u32, threads)
            .with_smem(smem)
            .with_cluster(cluster),
        args,
    ))
}

macro_rules! planned {
    ($ty:ident, $log:literal) => {
        // Safety: `buffers` lists x and y with their full spans, and `launch_args` passes
        // exactly those to the kernel, which stays within them.
        unsafe impl PlannedKernel for $ty {
            type Problem<'a> = SoftmaxProblem<'a>;
            const SOURCE: &'static KernelSource = &SOURCE;

            fn search_space(device: &DeviceInfo, key: &SoftmaxKey, _batch: u64) -> Vec<SoftmaxConfig> {
                space::search_space(device.tuning_target(), key)
            }

            fn variant(device: &DeviceInfo, key: &SoftmaxKey, c: &SoftmaxConfig) -> Variant {
                variant(
                    device.tuning_target(),
                    key,
                    c,
                    $log,
                    prefetch_rows(device, key, c),
                )
            }

            fn problem_shape(p: &SoftmaxProblem<'_>) -> (SoftmaxKey, u64) {
                (p.key, p.rows)
            }

            fn buffers(p: &SoftmaxProblem<'_>) -> Vec<TuneBuffer> {
                if p.x == p.y {
                    // In place: every run must start from the caller's input.
                    return vec![TuneBuffer {
                        name: "x",
                        ptr: p.x,
                        bytes: p.span_bytes(p.x_stride),
                        role: BufferRole::Restore,
                    }];
                }
                vec![
                    TuneBuffer {
                        name: "x",
                        ptr: p.x,
                        bytes: p.span_bytes(p.x_stride),
                        role: BufferRole::Read,
                    },
                    TuneBuffer {
                        name: "y",
                        ptr: p.y,
                        bytes: p.span_bytes(p.y_stride),
                        role: BufferRole::Write,
                    },
                ]
            }

            fn alignment(p: &SoftmaxProblem<'_>) -> AlignClass {
                p.alignment()
            }

            fn fit_alignment(
                device: &DeviceInfo,
                key: &SoftmaxKey,
                c: SoftmaxConfig,
                align: AlignClass,
            ) -> SoftmaxConfig {
                fit(device.tuning_target(), key, c, align)
            }

            fn launch_args(
                device: &DeviceInfo,
                c: &SoftmaxConfig,
                p: &SoftmaxProblem<'_>,
            ) -> Result<(LaunchDims, KernelArgs)> {
                launch_args(device, c, p)
            }

            fn reference(p: &SoftmaxProblem<'_>, before: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
                Some(reference_of(p, $log, before))
            }

            fn check_outputs(
                p: &SoftmaxProblem<'_>,
                before: &[Vec<u8>],
                got: &[Vec<u8>],
                expected: Expected<'_>,
            ) -> std::result::Result<(), String> {
                check_outputs(p, $log, before, got, expected)
            }
        }
    };
}

/// The input rows and output rows of a problem.
fn layouts(p: &SoftmaxProblem<'_>) -> (Rows, Rows) {
    let (rows, cols) = (p.rows as usize, p.key.cols as usize);
    (
        Rows::strided(rows, cols, p.x_stride as usize),
        Rows::strided(rows, cols, p.y_stride as usize),
    )
}

/// Every buffer of `p` after one run on `before` (its buffers' bytes), by the CPU
/// reference: `x` as it was, `y` (or `x`, in place) its softmax.
fn reference_of(p: &SoftmaxProblem<'_>, log: bool, before: &[Vec<u8>]) -> Vec<Vec<f32>> {
    let dtype = p.key.dtype;
    let (xr, yr) = layouts(p);
    let x = decode(dtype, &before[0]);
    let mut y = decode(dtype, before.last().expect("x and y"));
    let f = if log {
        crate::reference::log_softmax
    } else {
        crate::reference::softmax
    };
    f(&x, xr.stride, &mut y, yr.stride, xr.rows, xr.cols, p.scale);
    if before.len() == 1 {
        vec![y]
    } else {
        vec![x, y]
    }
}

/// The output of a run of `p` (the last buffer: `y`, or `x` in place) against the
/// expected one, by [`crate::reference::check`].
fn check_outputs(
    p: &SoftmaxProblem<'_>,
    log: bool,
    before: &[Vec<u8>],
    got: &[Vec<u8>],
    expected: Expected<'_>,
) -> std::result::Result<(), String> {
    let dtype = p.key.dtype;
    let (xr, yr) = layouts(p);
    let x = decode(dtype, &before[0]);
    let got = decode(dtype, got.last().ok_or("no output buffer")?);
    let (want, runs) = match expected {
        Expected::Run(w) => (decode(dtype, w.last().ok_or("no output buffer")?), 2),
        Expected::Reference(w) => (w.last().ok_or("no output buffer")?.clone(), 1),
    };
    let what = format!(
        "{} {dtype} [{}, {}]",
        if log { "log_softmax" } else { "softmax" },
        xr.rows,
        xr.cols
    );
    crate::reference::check(&what, dtype, log, &x, xr, p.scale, &got, &want, yr, runs)
}

planned!(Softmax, false);
planned!(LogSoftmax, true);

#[cfg(test)]
mod tests {
    //! Argument checks run before anything touches a device, so they are tested here
    //! with made-up (never dereferenced) device addresses.
    use super::*;

    /// SOURCE is marked for programmatic dependent launch: every entry point (one per
    /// strategy) must wait for the previous grid before it touches global memory.
    #[test]
    fn every_entry_point_waits_before_touching_memory() {
        use kernels_core::testing::{entry_bodies, waits_before_memory};
        assert!(SOURCE.pdl);
        let bodies = entry_bodies(include_str!("../cuda/softmax.cu"));
        assert_eq!(bodies.len(), 4, "row, online, cluster and staged");
        for (i, b) in bodies.iter().enumerate() {
            assert_eq!(waits_before_memory(b), Ok(()), "entry point {i}");
        }
    }

    const X: u64 = 0x7f00_0000_0000;
    const Y: u64 = 0x7f20_0000_0000;

    fn raw(x: u64, x_len: usize, xr: Rows, y: u64, yr: Rows, scale: f32) -> Result<SoftmaxProblem<'static>> {
        let y_len = yr.span().unwrap_or(0);
        unsafe { SoftmaxProblem::raw(DType::F32, x, x_len, xr, y, y_len, yr, scale) }
    }

    fn bad_arg(r: Result<SoftmaxProblem<'static>>) -> String {
        match r {
            Err(Error::InvalidArgument { name, .. }) => name,
            Err(e) => panic!("not an argument error: {e}"),
            Ok(_) => panic!("bad input was accepted"),
        }
    }

    #[test]
    fn in_place_is_allowed_partial_overlap_is_not() {
        let s = Rows::contiguous(8, 1000);
        assert!(
            raw(X, 8000, s, X, s, 1.0).is_ok(),
            "y == x with equal strides is in place"
        );
        assert_eq!(bad_arg(raw(X, 8000, s, X + 4, s, 1.0)), "y");
        assert_eq!(
            bad_arg(raw(X, 8000, s, X, Rows::strided(8, 1000, 1004), 1.0)),
            "y"
        );
    }

    #[test]
    fn each_bad_argument_is_named() {
        let s = Rows::contiguous(8, 1000);
        assert!(raw(X, 8000, s, Y, s, 0.5).is_ok());
        assert_eq!(bad_arg(raw(X, 8000, s, Y, s, f32::INFINITY)), "scale");
        assert_eq!(bad_arg(raw(X, 7999, s, Y, s, 1.0)), "x");
        assert_eq!(bad_arg(raw(X, 8000, s, Y, Rows::contiguous(8, 999), 1.0)), "y");
        assert_eq!(
            bad_arg(raw(X + 2, 8000, s, Y, s, 1.0)),
            "x",
            "2-byte offset for 4-byte elements"
        );
        assert_eq!(bad_arg(raw(X, 0, Rows::contiguous(0, 1000), Y, s, 1.0)), "rows");
    }

    #[test]
    fn alignment_narrows_the_vector_and_keeps_the_config_valid() {
        let key = SoftmaxKey {
            dtype: DType::Bf16,
            cols: 128256,
        };
        // A cluster config holding its row slice in registers at 8-wide vectors.
        let c = SoftmaxConfig {
            strategy: Strategy::Cluster,
            threads: 256,
            vec: 8,
            rows: 1,
            splits: 8,
            keep: false,
        };
        assert!(space::fits(Target::Sm90, &key, &c));
        for align in [AlignClass::A16, AlignClass::A8, AlignClass::A4, AlignClass::A2] {
            let f = fit(Target::Sm90, &key, c, align);
            assert!(f.vec * 2 <= align.bytes(), "{align}: {f:?}");
            assert!(
                space::fits(Target::Sm90, &key, &f),
                "{align}: {f:?} must still fit"
            );
        }
    }

    /// The class a launch is fitted to is the relative alignment of x's rows and y's:
    /// what engines pass (contiguous `[rows, vocab]` buffers of an odd vocabulary, views
    /// at the same element offset, in place) keeps 16-byte vectors, and so does `fit`;
    /// only x and y rows misaligned differently narrow them.
    #[test]
    fn only_differently_misaligned_rows_narrow_the_vector() {
        let class = |x: u64, xr: Rows, y: u64, yr: Rows| {
            let span = |r: Rows| r.span().unwrap();
            unsafe { SoftmaxProblem::raw(DType::Bf16, x, span(xr), xr, y, span(yr), yr, 1.0) }
                .unwrap()
                .alignment()
        };
        let odd = Rows::contiguous(7, 50257);
        assert_eq!(class(X, odd, Y, odd), AlignClass::A16);
        assert_eq!(class(X + 2, odd, Y + 2, odd), AlignClass::A16);
        assert_eq!(class(X + 6, odd, X + 6, odd), AlignClass::A16, "in place");
        assert_eq!(class(X + 2, odd, Y, odd), AlignClass::A2);
        assert_eq!(class(X + 8, odd, Y, odd), AlignClass::A8);
        let padded = Rows::strided(7, 50257, 50259);
        assert_eq!(class(X, padded, Y, padded), AlignClass::A16);
        assert_eq!(class(X, padded, Y, odd), AlignClass::A4);

        let key = SoftmaxKey {
            dtype: DType::Bf16,
            cols: 50257,
        };
        let h200 = DeviceInfo::nominal(Target::Sm90).unwrap();
        for rows in [1, 8, 64, 1024, 8192] {
            let c = crate::analytic_default(Target::Sm90, &key, rows);
            assert_eq!(fit(Target::Sm90, &key, c, AlignClass::A16), c, "{rows} rows");
            let s = Rows::contiguous(rows as usize, 50257);
            let n = s.span().unwrap();
            let p = unsafe { SoftmaxProblem::raw(DType::Bf16, X + 2, n, s, Y + 2, n, s, 1.0) }.unwrap();
            assert!(<Softmax as PlannedKernel>::plan(&h200, &c, &p).is_ok(), "{c}");
        }
    }

    /// Register strategies size a thread's storage for the row's most aligned vectors,
    /// `cols / vec` (a row with a head has one fewer where vec divides cols): `iters`
    /// covers them, as the device code's ITERS does, and a row's edge elements (head
    /// and tail, fewer than 2 * vec) take at most one per thread of a warp.
    #[test]
    fn iters_cover_every_split_of_a_row() {
        for cols in [1u32, 3, 7, 8, 9, 97, 4096, 4097, 50257, 151655] {
            for vec in [1u32, 2, 4, 8] {
                let most = cols / vec;
                for head in 0..vec.min(cols + 1) {
                    let nvec = (cols - head) / vec;
                    let edges = cols - nvec * vec;
                    assert!(nvec <= most && edges < 2 * vec && 2 * (vec - 1) <= 32);
                }
                for (strategy, threads, splits) in [
                    (Strategy::Row, 32, 1),
                    (Strategy::Row, 256, 1),
                    (Strategy::Cluster, 128, 8),
                ] {
                    let c = SoftmaxConfig {
                        strategy,
                        threads,
                        vec,
                        rows: 1,
                        splits,
                        keep: false,
                    };
                    let i = c.iters(cols);
                    assert!(i >= 1 && i * threads * splits >= most, "{cols} {c:?}");
                    assert!(
                        (i - 1) * threads * splits < most.max(1),
                        "{cols} {c:?}: no spare vector"
                    );
                }
            }
        }
    }

    /// An AMD device as the HIP path describes it (`HipDeviceInfo::launch_limits`).
    fn gfx942() -> DeviceInfo {
        DeviceInfo {
            name: "AMD Instinct MI300X".into(),
            warp_size: 64,
            max_smem_per_block_optin: 64 << 10,
            amd_arch: Some("gfx942".into()),
            ..DeviceInfo::nominal(Target::Sm90).unwrap()
        }
    }

    #[test]
    fn the_plan_carries_the_kernel_abi() {
        let s = Rows::strided(8, 4096, 4104);
        let p = raw(X, s.span().unwrap(), s, Y, Rows::contiguous(8, 4096), 0.5).unwrap();
        let c = SoftmaxConfig {
            strategy: Strategy::Row,
            threads: 256,
            vec: 4,
            rows: 2,
            splits: 1,
            keep: false,
        };
        let plan = <Softmax as PlannedKernel>::plan(&gfx942(), &c, &p).unwrap();
        // (x, y, rows, x_stride, y_stride, scale), one slot each.
        assert_eq!(plan.args.slots(), &[X, Y, 8, 4104, 4096, 0.5f32.to_bits() as u64]);
        assert_eq!(plan.dims, LaunchDims::linear(4, 512));
        let log = <LogSoftmax as PlannedKernel>::plan(&gfx942(), &c, &p).unwrap();
        assert_eq!(log.args, plan.args);
        assert_ne!(log.variant, plan.variant, "log-softmax compiles its own variant");
    }

    /// The tuning cache keys a result by a digest of the variants its search compiles,
    /// so host-side define changes (here the prefetch span, from the SM count) and other
    /// searches (log-softmax, another key) never share a stored result.
    #[test]
    fn the_candidates_digest_follows_the_variants_a_search_compiles() {
        use kernels_core::launch::candidates_digest;
        let h200 = DeviceInfo::nominal(Target::Sm90).unwrap();
        let key = SoftmaxKey {
            dtype: DType::Bf16,
            cols: 65536,
        };
        let d = candidates_digest::<Softmax>(&h200, &key, 4096);
        assert!(
            d.starts_with("fnv1a64:") && d.len() == "fnv1a64:".len() + 16,
            "{d}"
        );
        assert_eq!(d, candidates_digest::<Softmax>(&h200, &key, 4096));
        assert_ne!(d, candidates_digest::<LogSoftmax>(&h200, &key, 4096));
        let other = SoftmaxKey { cols: 65544, ..key };
        assert_ne!(d, candidates_digest::<Softmax>(&h200, &other, 4096));
        // Staged 128 KiB stages prefetch one wave (SMs / blocks per row) ahead: a part
        // with fewer SMs compiles other PREFETCH_ROWS defines, so another digest.
        let mut h100 = h200.clone();
        h100.sm_count = 114;
        assert_ne!(d, candidates_digest::<Softmax>(&h100, &key, 4096));
    }

    /// Cluster configs launch `splits` blocks per row as clusters of `splits`, which the
    /// launch checks (and allows above 8); the other strategies launch no cluster.
    #[test]
    fn cluster_configs_launch_clusters_of_their_splits() {
        let h200 = DeviceInfo::nominal(Target::Sm90).unwrap();
        let s = Rows::contiguous(3, 128256);
        let p = unsafe {
            SoftmaxProblem::raw(DType::Bf16, X, s.span().unwrap(), s, Y, s.span().unwrap(), s, 1.0)
        }
        .unwrap();
        let mut c = SoftmaxConfig {
            strategy: Strategy::Cluster,
            threads: 128,
            vec: 8,
            rows: 1,
            splits: 16,
            keep: false,
        };
        let plan = <Softmax as PlannedKernel>::plan(&h200, &c, &p).unwrap();
        assert_eq!(plan.dims, LaunchDims::linear(48, 128).with_cluster(16));
        assert!(plan.dims.validate(&h200).is_ok());
        c.strategy = Strategy::Staged;
        c.splits = 2;
        c.threads = 512;
        let plan = <Softmax as PlannedKernel>::plan(&h200, &c, &p).unwrap();
        assert_eq!((plan.dims.grid.0, plan.dims.cluster), (6, 2));
        c.splits = 1;
        let plan = <Softmax as PlannedKernel>::plan(&h200, &c, &p).unwrap();
        assert_eq!(plan.dims.cluster, 1);
    }

    /// The CUDA ops and the HIP ops launch `PlannedKernel::plan`; for a config both
    /// kinds of device run, the plan (variant, dims, dynamic shared memory, argument
    /// bytes) does not depend on the backend, and its variant is the one the runtime
    /// compiles for the config.
    #[test]
    fn cuda_and_hip_get_the_same_plan_for_the_same_config() {
        let key = SoftmaxKey {
            dtype: DType::Bf16,
            cols: 32000,
        };
        let s = Rows::contiguous(64, 32000);
        let p = unsafe { SoftmaxProblem::raw(DType::Bf16, X, 64 * 32000, s, Y, 64 * 32000, s, 1.0) }.unwrap();
        let (nvidia, amd) = (DeviceInfo::nominal(Target::Sm90).unwrap(), gfx942());
        let space = space::search_space(Target::Gfx942, &key);
        assert!(space.len() > 5, "{}", space.len());
        for c in &space {
            let on_cuda = <Softmax as PlannedKernel>::plan(&nvidia, c, &p).unwrap();
            let on_hip = <Softmax as PlannedKernel>::plan(&amd, c, &p).unwrap();
            assert_eq!(on_cuda, on_hip, "{c:?}");
            assert_eq!(on_hip.variant, <Softmax as PlannedKernel>::variant(&amd, &key, c));
        }
        // A staged config takes shared memory by the device's target (none on AMD,
        // where the space has no staged configs).
        let staged = space::search_space(Target::Sm90, &key)
            .into_iter()
            .find(|c| c.strategy == Strategy::Staged)
            .unwrap();
        let plan = <Softmax as PlannedKernel>::plan(&nvidia, &staged, &p).unwrap();
        assert_eq!(plan.dims.smem_bytes as u64, staged.smem_bytes(Target::Sm90, &key));
        assert!(plan.dims.smem_bytes > 0);
    }

    #[test]
    fn the_staged_prefetch_spans_one_wave_where_one_block_fills_an_sm() {
        let h200 = DeviceInfo::nominal(Target::Sm90).unwrap();
        let a100 = DeviceInfo::nominal(Target::Sm80).unwrap();
        let staged = |threads, splits| SoftmaxConfig {
            strategy: Strategy::Staged,
            threads,
            vec: 8,
            rows: 1,
            splits,
            keep: false,
        };
        let key = |cols| SoftmaxKey {
            dtype: DType::Bf16,
            cols,
        };
        // A 128 KiB stage (65536 columns; 128256 split over 2 blocks) fills an SM: one
        // wave is one row per SM, or per cluster of 2.
        assert_eq!(prefetch_rows(&h200, &key(65536), &staged(512, 1)), h200.sm_count);
        assert_eq!(
            prefetch_rows(&h200, &key(128256), &staged(512, 2)),
            h200.sm_count / 2
        );
        let v = <Softmax as PlannedKernel>::variant(&h200, &key(65536), &staged(512, 1));
        let want = ("PREFETCH_ROWS".to_string(), h200.sm_count.to_string());
        assert!(v.defines().contains(&want), "{v:?}");
        // Larger stages (a whole vocabulary row, or 148 KiB halves) do not prefetch; a
        // 64 KiB stage shares the SM; nor on A100 (no bulk prefetch), nor for other
        // strategies.
        let vocab = key(128256);
        assert_eq!(prefetch_rows(&h200, &vocab, &staged(1024, 1)), 0);
        assert_eq!(prefetch_rows(&h200, &key(151936), &staged(512, 2)), 0);
        assert_eq!(prefetch_rows(&h200, &key(32768), &staged(512, 1)), 0);
        assert_eq!(prefetch_rows(&a100, &vocab, &staged(1024, 1)), 0);
        let online = SoftmaxConfig {
            strategy: Strategy::Online,
            ..staged(1024, 1)
        };
        assert_eq!(prefetch_rows(&h200, &vocab, &online), 0);
    }

    #[test]
    fn a_vector_the_buffers_do_not_allow_is_refused_naming_x() {
        let s = Rows::contiguous(4, 4096);
        let p = unsafe { SoftmaxProblem::raw(DType::Bf16, X + 4, 4 * 4096, s, Y, 4 * 4096, s, 1.0) }.unwrap();
        let c = SoftmaxConfig {
            strategy: Strategy::Row,
            threads: 256,
            vec: 8,
            rows: 1,
            splits: 1,
            keep: false,
        };
        match <Softmax as PlannedKernel>::plan(&gfx942(), &c, &p) {
            Err(Error::InvalidArgument { name, .. }) => assert_eq!(name, "x"),
            other => panic!("expected an error naming x, got {other:?}"),
        }
    }
}
