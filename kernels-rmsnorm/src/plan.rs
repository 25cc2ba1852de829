//! Backend-neutral launches of RMSNorm and fused residual-add RMSNorm: the problem as
//! device addresses ([`NormProblem`], validated when built), the config fitted to its
//! alignment, and its launch (dimensions and arguments, [`kernels_core::PlannedKernel`];
//! with the variant, a [`kernels_core::LaunchPlan`]) that both the CUDA ops
//! (`crate::ops`) and the HIP ops (`crate::hip`, feature `rocm`) launch.

use std::marker::PhantomData;

use kernels_core::kernel_crate::{check_device_ptrs, check_row_operands};
use kernels_core::launch::decode;
use kernels_core::{
    cache::AlignClass, check_disjoint, check_eps, BufferRole, DeviceInfo, Error, Expected, KernelArgs,
    KernelSource, LaunchDims, PlannedKernel, Result, Rows, TuneBuffer, Variant,
};
use tuned::DType;

use crate::{space, FusedAddRmsNorm, RmsNorm, RmsNormConfig, RmsNormKey};

/// The device source: `cuda/rmsnorm.cu`, compiled after the shared prelude.
pub static SOURCE: KernelSource = KernelSource::new(
    "rmsnorm",
    include_str!("../cuda/rmsnorm.cu"),
    crate::SOURCE_FINGERPRINT,
)
.with_preamble(&[kernels_core::PRELUDE])
.with_files(crate::SOURCE_FILES)
.programmatic_launch();

/// One RMSNorm call, as device addresses: `out` is `y` for [`RmsNorm`] and
/// `residual` for [`FusedAddRmsNorm`]. Build it with [`NormProblem::rmsnorm_raw`] or
/// [`NormProblem::fused_add_rmsnorm_raw`], which validate everything; the safe ops on
/// cudarc buffers (module `cuda`) build it for the caller.
#[derive(Clone, Copy, Debug)]
pub struct NormProblem<'a> {
    pub(crate) key: RmsNormKey,
    pub(crate) rows: u64,
    pub(crate) x: u64,
    pub(crate) x_stride: u64,
    pub(crate) w: u64,
    pub(crate) out: u64,
    pub(crate) out_stride: u64,
    pub(crate) eps: f32,
    /// The entry point the constructor checked the buffers' access for (the plain
    /// kernel only reads `x`; the fused one writes `x` and takes `out` as the
    /// residual); `None` for the tuners' own problems, whose buffers both may write.
    pub(crate) entry: Option<Entry>,
    pub(crate) _buffers: PhantomData<&'a mut [u8]>,
}

impl<'a> NormProblem<'a> {
    /// `y = rmsnorm(x) * weight` over device addresses.
    ///
    /// # Safety
    /// `x`, `weight` and `y` must be device allocations of the runtime's context holding
    /// `x_len`, `cols` and `y_len` elements of `dtype`, valid for `'a`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rmsnorm_raw(
        dtype: DType,
        x: u64,
        x_len: usize,
        x_rows: Rows,
        weight: u64,
        weight_len: usize,
        y: u64,
        y_len: usize,
        y_rows: Rows,
        eps: f32,
    ) -> Result<NormProblem<'a>> {
        let p = Self::checked(
            Entry::RmsNorm,
            dtype,
            ("x", x, x_len, x_rows),
            (weight, weight_len),
            ("y", y, y_len, y_rows),
            eps,
        )?;
        // x and weight are only read: they may overlap each other.
        let w = Rows::contiguous(1, x_rows.cols).byte_range(weight, dtype);
        check_writes_disjoint(&[
            ("x", x_rows.byte_range(x, dtype), false),
            ("weight", w, false),
            ("y", y_rows.byte_range(y, dtype), true),
        ])?;
        Ok(p)
    }

    /// `residual += x; x = rmsnorm(residual) * weight`, in place, over device addresses.
    ///
    /// # Safety
    /// As [`NormProblem::rmsnorm_raw`], with `x` and `residual` writable.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn fused_add_rmsnorm_raw(
        dtype: DType,
        x: u64,
        x_len: usize,
        x_rows: Rows,
        residual: u64,
        residual_len: usize,
        residual_rows: Rows,
        weight: u64,
        weight_len: usize,
        eps: f32,
    ) -> Result<NormProblem<'a>> {
        let p = Self::checked(
            Entry::FusedAdd,
            dtype,
            ("x", x, x_len, x_rows),
            (weight, weight_len),
            ("residual", residual, residual_len, residual_rows),
            eps,
        )?;
        let w = Rows::contiguous(1, x_rows.cols).byte_range(weight, dtype);
        check_writes_disjoint(&[
            ("x", x_rows.byte_range(x, dtype), true),
            ("residual", residual_rows.byte_range(residual, dtype), true),
            ("weight", w, false),
        ])?;
        Ok(p)
    }

    fn checked(
        entry: Entry,
        dtype: DType,
        (xn, x, x_len, x_rows): (&str, u64, usize, Rows),
        (w, w_len): (u64, usize),
        (on, out, out_len, out_rows): (&str, u64, usize, Rows),
        eps: f32,
    ) -> Result<NormProblem<'a>> {
        check_row_operands((xn, x_rows, x_len), (on, out_rows, out_len))?;
        if w_len != x_rows.cols {
            return Err(Error::invalid(
                "weight",
                format!("has {w_len} elements, cols is {}", x_rows.cols),
            ));
        }
        check_eps(eps)?;
        check_device_ptrs(dtype, &[(xn, x), ("weight", w), (on, out)])?;
        Ok(NormProblem {
            key: RmsNormKey {
                dtype,
                cols: x_rows.cols as u32,
            },
            rows: x_rows.rows as u64,
            x,
            x_stride: x_rows.stride as u64,
            w,
            out,
            out_stride: out_rows.stride as u64,
            eps,
            entry: Some(entry),
            _buffers: PhantomData,
        })
    }

    /// The problem the tuners of both backends time on buffers of their own:
    /// contiguous `[rows, key.cols]` operands at `x` and `out`, a weight row at `w`,
    /// eps 1e-6.
    pub(crate) fn tuning(key: RmsNormKey, rows: u64, x: u64, w: u64, out: u64) -> NormProblem<'a> {
        let cols = key.cols as u64;
        NormProblem {
            key,
            rows,
            x,
            x_stride: cols,
            w,
            out,
            out_stride: cols,
            eps: 1e-6,
            entry: None,
            _buffers: PhantomData,
        }
    }

    /// The static key: dtype and row length (hidden size).
    pub fn key(&self) -> RmsNormKey {
        self.key
    }

    /// The batch: rows (tokens).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub(crate) fn span_bytes(&self, stride: u64) -> usize {
        Rows::strided(self.rows as usize, self.key.cols as usize, stride as usize).span_bytes(self.key.dtype)
    }

    /// How far apart, in alignment, the rows of `x` and of the output (`y`, or the
    /// residual) are: the class of the differences of their addresses and of their
    /// byte strides. The kernel splits each row at its own first aligned vector
    /// (cuda/rmsnorm.cu), so where both rows split alike (buffers allocated alike with
    /// equal strides: A16 at any hidden size or offset) any vector runs. The weight
    /// does not count: the kernel reads it by vectors where it lines up with the row
    /// and by elements where not.
    pub(crate) fn alignment(&self) -> AlignClass {
        let s = self.key.dtype.size() as u64;
        AlignClass::of([
            self.x.wrapping_sub(self.out),
            self.x_stride.wrapping_sub(self.out_stride).wrapping_mul(s),
        ])
    }
}

/// Checks operands given as `(name, byte range, written by the kernel)`: every pair
/// of which the kernel writes at least one must be disjoint, checked in the order
/// given; the first overlap is an error naming the later operand ([`check_disjoint`]).
fn check_writes_disjoint(operands: &[(&str, (u64, u64), bool)]) -> Result<()> {
    for (i, &(a, a_bytes, a_written)) in operands.iter().enumerate() {
        for &(b, b_bytes, b_written) in &operands[i + 1..] {
            if a_written || b_written {
                check_disjoint((a, a_bytes), (b, b_bytes))?;
            }
        }
    }
    Ok(())
}

/// The config with its vector narrowed to what the relative alignment of `x` and the
/// output allows (`NormProblem::alignment`; odd hidden sizes and offset views keep
/// the vector). A cluster config whose row no longer fits in registers at the narrower
/// vector takes one block per row instead (which streams a long row), and a late
/// residual store (which needs the row in registers) becomes an early one.
pub(crate) fn fit(key: &RmsNormKey, mut c: RmsNormConfig, align: AlignClass) -> RmsNormConfig {
    let size = key.dtype.size() as u32;
    while c.vec > 1 && c.vec * size > align.bytes() {
        c.vec /= 2;
    }
    if c.iters(key.cols) as i64 > crate::schema::MAX_ITERS {
        c.splits = 1;
        c.late = 0;
    }
    c
}

fn variant(entry: &str, key: &RmsNormKey, c: &RmsNormConfig) -> Variant {
    let v = Variant::new(entry)
        .define("DTYPE", kernels_core::dtype_define(key.dtype))
        .define("COLS", key.cols)
        .define("THREADS", c.threads)
        .define("VEC", c.vec)
        .define("ROWS", c.rows);
    // SPLITS is 1 and LATE 0 when not defined, so configs without them keep their
    // variants.
    let v = if c.splits > 1 {
        v.define("SPLITS", c.splits)
    } else {
        v
    };
    let v = if c.late > 0 { v.define("LATE", 1) } else { v };
    // The device code does not read OCC: it gives a capped config its own function, so
    // the carveout its launch sets on that function never reaches an uncapped launch.
    if c.occ > 0 {
        v.define("OCC", c.occ)
    } else {
        v
    }
}

/// Hopper's shared memory carveout below the full 228 KiB, and the percentage of 228
/// KiB the driver rounds up to it.
const OCC_CARVEOUT_BYTES: u32 = 196 << 10;
const OCC_CARVEOUT_PERCENT: u8 = 85;
/// Shared memory the system reserves per block (sm_80 and newer), and the granule
/// shared memory is allocated in.
const SMEM_RESERVED_PER_BLOCK: u32 = 1 << 10;
const SMEM_GRANULE: u32 = 128;

/// The dynamic shared memory that lets at most `c.occ` blocks of `c` reside on an SM
/// under the 196 KiB carveout, and no more than that even under the full 228 KiB (each
/// block then takes more than 228 KiB / (occ + 1)). The kernel does not touch it. An
/// error naming `occ` on a device without Hopper's carveouts.
pub(crate) fn occ_smem(info: &DeviceInfo, c: &RmsNormConfig) -> Result<u32> {
    if info.amd_arch.is_some() || info.compute_capability.0 != 9 || info.smem_per_sm < 228 << 10 {
        return Err(Error::invalid(
            "occ",
            format!(
                "a cap of {} blocks per SM needs Hopper's 196 KiB shared memory carveout, which {} does not have",
                c.occ, info.name
            ),
        ));
    }
    // cuda/rmsnorm.cu's static shared memory: one float per warp of each row.
    let static_bytes = (c.rows as u64 * c.threads as u64 / 32 * 4).next_multiple_of(SMEM_GRANULE as u64);
    let usable = (OCC_CARVEOUT_BYTES / c.occ.max(1)).checked_sub(SMEM_RESERVED_PER_BLOCK);
    usable
        .and_then(|u| u64::from(u / SMEM_GRANULE * SMEM_GRANULE).checked_sub(static_bytes))
        .and_then(|pad| u32::try_from(pad).ok())
        .ok_or_else(|| {
            Error::invalid(
                "occ",
                format!(
                    "{} blocks of {} threads cannot share an SM's 196 KiB of shared memory",
                    c.occ,
                    c.block_threads()
                ),
            )
        })
}

/// The two entry points' parameter orders (cuda/rmsnorm.cu's ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `(x, x_stride, w, y, y_stride, rows, eps)`
    RmsNorm,
    /// `(x, x_stride, residual, r_stride, w, rows, eps)`
    FusedAdd,
}

impl Entry {
    /// The kernel function's name in cuda/rmsnorm.cu.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Entry::RmsNorm => "rmsnorm_kernel",
            Entry::FusedAdd => "fused_add_rmsnorm_kernel",
        }
    }

    /// The op's name and the constructor whose checks its problems need.
    fn op(self) -> (&'static str, &'static str) {
        match self {
            Entry::RmsNorm => ("rmsnorm", "NormProblem::rmsnorm or rmsnorm_raw"),
            Entry::FusedAdd => (
                "fused_add_rmsnorm",
                "NormProblem::fused_add_rmsnorm or fused_add_rmsnorm_raw",
            ),
        }
    }
}

/// The launch of `c` on `p` through `entry`: one block per `c.rows` rows, or a
/// cluster of `c.splits` blocks per row (with the
/// shared memory and carveout of its blocks-per-SM cap, if any), and cuda/rmsnorm.cu's
/// arguments in `entry`'s order. A problem built for the other entry point is an error
/// naming `problem`; a config whose vector the relative alignment of x and the output
/// does not allow (`NormProblem::alignment`) is an error naming `x`; so are more than 2^31 - 1 blocks (`rows`) and a cap on a device
/// without Hopper's carveouts (`occ`).
pub(crate) fn launch_args(
    entry: Entry,
    info: &DeviceInfo,
    c: &RmsNormConfig,
    p: &NormProblem<'_>,
) -> Result<(LaunchDims, KernelArgs)> {
    // A problem checked for the other op: the plain one lets x alias the weight and
    // borrows x read-only, which the fused kernel writes; the fused one's output is the
    // residual, which the plain kernel would overwrite with y.
    if let Some(built) = p.entry.filter(|&b| b != entry) {
        let ((built_op, _), (op, needs)) = (built.op(), entry.op());
        return Err(Error::invalid(
            "problem",
            format!("was built for {built_op}; {op} takes one from {needs}"),
        ));
    }
    if fit(&p.key, *c, p.alignment()) != *c {
        return Err(Error::invalid(
            "x",
            format!(
                "rows of x and the output {} apart in alignment do not allow {}-element vectors",
                p.alignment(),
                c.vec
            ),
        ));
    }
    let blocks = p.rows.div_ceil(c.rows as u64) * c.splits as u64;
    if blocks > i32::MAX as u64 {
        return Err(Error::invalid(
            "rows",
            format!("{} rows need more than 2^31 - 1 blocks", p.rows),
        ));
    }
    let mut args = KernelArgs::new();
    args.ptr(p.x).i64(p.x_stride as i64);
    match entry {
        Entry::RmsNorm => args.ptr(p.w).ptr(p.out).i64(p.out_stride as i64),
        Entry::FusedAdd => args.ptr(p.out).i64(p.out_stride as i64).ptr(p.w),
    };
    args.i64(p.rows as i64).f32(p.eps);
    // Clusters are compiled in (__cluster_dims__); the launch checks the grid and the
    // device against them and allows 16-block clusters on the function.
    let dims = LaunchDims::linear(blocks as u32, c.block_threads()).with_cluster(c.splits);
    if c.occ == 0 {
        return Ok((dims, args));
    }
    let smem = occ_smem(info, c)?;
    Ok((dims.with_smem(smem).with_carveout(OCC_CARVEOUT_PERCENT), args))
}

macro_rules! planned {
    ($ty:ident, $abi:expr, $out:literal, $out_role:expr, $x_role:expr) => {
        // Safety: `buffers` lists x, weight and the output with their full spans, and
        // `launch_args` passes exactly those to the kernel, which stays within them.
        unsafe impl PlannedKernel for $ty {
            type Problem<'a> = NormProblem<'a>;
            const SOURCE: &'static KernelSource = &SOURCE;

            fn search_space(device: &DeviceInfo, key: &RmsNormKey, batch: u64) -> Vec<RmsNormConfig> {
                space::tuning_space(device.tuning_target(), key, batch, $abi == Entry::FusedAdd)
            }

            fn variant(_: &DeviceInfo, key: &RmsNormKey, c: &RmsNormConfig) -> Variant {
                variant($abi.name(), key, c)
            }

            fn problem_shape(p: &NormProblem<'_>) -> (RmsNormKey, u64) {
                (p.key, p.rows)
            }

            fn buffers(p: &NormProblem<'_>) -> Vec<TuneBuffer> {
                vec![
                    TuneBuffer {
                        name: "x",
                        ptr: p.x,
                        bytes: p.span_bytes(p.x_stride),
                        role: $x_role,
                    },
                    TuneBuffer {
                        name: "weight",
                        ptr: p.w,
                        bytes: p.key.cols as usize * p.key.dtype.size(),
                        role: BufferRole::Read,
                    },
                    TuneBuffer {
                        name: $out,
                        ptr: p.out,
                        bytes: p.span_bytes(p.out_stride),
                        role: $out_role,
                    },
                ]
            }

            fn alignment(p: &NormProblem<'_>) -> AlignClass {
                p.alignment()
            }

            fn fit_alignment(
                _: &DeviceInfo,
                key: &RmsNormKey,
                c: RmsNormConfig,
                align: AlignClass,
            ) -> RmsNormConfig {
                fit(key, c, align)
            }

            fn launch_args(
                info: &DeviceInfo,
                c: &RmsNormConfig,
                p: &NormProblem<'_>,
            ) -> Result<(LaunchDims, KernelArgs)> {
                launch_args($abi, info, c, p)
            }

            fn reference(p: &NormProblem<'_>, before: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
                Some(reference_of($abi, p, before))
            }

            fn check_outputs(
                p: &NormProblem<'_>,
                before: &[Vec<u8>],
                got: &[Vec<u8>],
                expected: Expected<'_>,
            ) -> std::result::Result<(), String> {
                check_outputs($abi, p, before, got, expected)
            }
        }
    };
}

/// The rows of `x` and of the output (`y`, or the fused kernel's residual).
fn layouts(p: &NormProblem<'_>) -> (Rows, Rows) {
    let (rows, cols) = (p.rows as usize, p.key.cols as usize);
    (
        Rows::strided(rows, cols, p.x_stride as usize),
        Rows::strided(rows, cols, p.out_stride as usize),
    )
}

/// Every buffer of `p` (x, weight, output) after one run of `entry` on `before` (its
/// buffers' bytes), by the CPU reference.
fn reference_of(entry: Entry, p: &NormProblem<'_>, before: &[Vec<u8>]) -> Vec<Vec<f32>> {
    let dtype = p.key.dtype;
    let (xr, or) = layouts(p);
    let [x, w, out] = [0, 1, 2].map(|i| decode(dtype, &before[i]));
    match entry {
        Entry::RmsNorm => {
            let mut y = out;
            crate::reference::rmsnorm(&x, xr.stride, &w, &mut y, or.stride, xr.rows, p.eps);
            vec![x, w, y]
        }
        Entry::FusedAdd => {
            let (mut x, mut r) = (x, out);
            crate::reference::fused_add_rmsnorm(
                &mut x, xr.stride, &mut r, or.stride, &w, xr.rows, p.eps, dtype,
            );
            vec![x, w, r]
        }
    }
}

/// A run of `entry` on `p` against the expected buffers: the normalised output (`y`,
/// or the fused kernel's `x`) by [`crate::reference::check`], the fused kernel's stored
/// residual exactly (one rounding of `x + residual`, the same in every run and in the
/// reference).
fn check_outputs(
    entry: Entry,
    p: &NormProblem<'_>,
    _before: &[Vec<u8>],
    got: &[Vec<u8>],
    expected: Expected<'_>,
) -> std::result::Result<(), String> {
    let dtype = p.key.dtype;
    let (xr, or) = layouts(p);
    if got.len() != 3 {
        return Err(format!("{} buffers, want x, weight and the output", got.len()));
    }
    let want: Vec<Vec<f32>> = match expected {
        Expected::Run(w) => w.iter().map(|b| decode(dtype, b)).collect(),
        Expected::Reference(w) => w.to_vec(),
    };
    let runs = match expected {
        Expected::Run(_) => 2,
        Expected::Reference(_) => 1,
    };
    let got: Vec<Vec<f32>> = got.iter().map(|b| decode(dtype, b)).collect();
    let what = format!("{} {dtype} [{}, {}]", entry.op().0, xr.rows, xr.cols);
    match entry {
        Entry::RmsNorm => crate::reference::check(&format!("{what} y"), dtype, &got[2], &want[2], or, runs),
        Entry::FusedAdd => {
            crate::reference::check(&format!("{what} x"), dtype, &got[0], &want[0], xr, runs)?;
            match got[2]
                .iter()
                .zip(&want[2])
                .position(|(g, w)| g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()))
            {
                None => Ok(()),
                Some(i) => Err(format!(
                    "{what} residual: element {i} is {}, want {} (the stored sum is exact)",
                    got[2][i], want[2][i]
                )),
            }
        }
    }
}

planned!(RmsNorm, Entry::RmsNorm, "y", BufferRole::Write, BufferRole::Read);
planned!(
    FusedAddRmsNorm,
    Entry::FusedAdd,
    "residual",
    BufferRole::Restore,
    BufferRole::Restore
);

#[cfg(test)]
mod tests {
    //! Argument checks run before anything touches a device, so they are tested here
    //! with made-up (never dereferenced) device addresses.
    use super::*;

    /// SOURCE is marked for programmatic dependent launch: both entry points hand over
    /// to `rmsnorm_rows` at once, which waits for the previous grid before it touches
    /// global memory.
    #[test]
    fn every_entry_point_waits_before_touching_memory() {
        use kernels_core::testing::{entry_bodies, function_body, waits_before_memory};
        assert!(SOURCE.pdl);
        let src = include_str!("../cuda/rmsnorm.cu");
        let rows = function_body(src, "void rmsnorm_rows(").expect("rmsnorm_rows");
        assert_eq!(waits_before_memory(rows), Ok(()));
        let bodies = entry_bodies(src);
        assert_eq!(bodies.len(), 2, "rmsnorm_kernel and fused_add_rmsnorm_kernel");
        for b in bodies {
            let inner = b.trim_start_matches('{').trim_end_matches('}').trim();
            assert!(
                inner.starts_with("rmsnorm_rows<") && inner.matches(';').count() == 1,
                "{b}"
            );
        }
    }

    const X: u64 = 0x7f00_0000_0000;
    const W: u64 = 0x7f10_0000_0000;
    const Y: u64 = 0x7f20_0000_0000;

    fn bad_arg(r: Result<NormProblem<'static>>) -> String {
        match r {
            Err(Error::InvalidArgument { name, .. }) => name,
            Err(e) => panic!("not an argument error: {e}"),
            Ok(_) => panic!("bad input was accepted"),
        }
    }

    fn rms(
        x: u64,
        x_len: usize,
        rows: Rows,
        w_len: usize,
        y: u64,
        y_rows: Rows,
        eps: f32,
    ) -> Result<NormProblem<'static>> {
        let y_len = y_rows.span().unwrap_or(0);
        unsafe { NormProblem::rmsnorm_raw(DType::Bf16, x, x_len, rows, W, w_len, y, y_len, y_rows, eps) }
    }

    #[test]
    fn good_problems_pass() {
        let s = Rows::contiguous(7, 4096);
        let p = rms(X, 7 * 4096, s, 4096, Y, s, 1e-6).unwrap();
        assert_eq!((p.key().cols, p.rows()), (4096, 7));
        let strided = Rows::strided(3, 97, 104);
        assert!(rms(X, strided.span().unwrap(), strided, 97, Y, strided, 1e-5).is_ok());
    }

    #[test]
    fn each_bad_argument_is_named() {
        let s = Rows::contiguous(4, 64);
        assert_eq!(bad_arg(rms(X, 4 * 64, s, 64, Y, s, 0.0)), "eps");
        assert_eq!(bad_arg(rms(X, 4 * 64, s, 64, Y, s, f32::NAN)), "eps");
        assert_eq!(bad_arg(rms(X, 4 * 64, s, 63, Y, s, 1e-6)), "weight");
        assert_eq!(bad_arg(rms(X, 4 * 64 - 1, s, 64, Y, s, 1e-6)), "x");
        assert_eq!(
            bad_arg(rms(X, 0, Rows::contiguous(0, 64), 64, Y, s, 1e-6)),
            "rows"
        );
        assert_eq!(
            bad_arg(rms(X, 4 * 64, Rows::contiguous(4, 0), 0, Y, s, 1e-6)),
            "cols"
        );
        assert_eq!(
            bad_arg(rms(X, 4 * 64, s, 64, Y, Rows::contiguous(5, 64), 1e-6)),
            "y"
        );
        assert_eq!(
            bad_arg(rms(X, 4 * 64, Rows::strided(4, 64, 32), 64, Y, s, 1e-6)),
            "x_stride"
        );
        assert_eq!(bad_arg(rms(0, 4 * 64, s, 64, Y, s, 1e-6)), "x");
        assert_eq!(
            bad_arg(rms(X + 1, 4 * 64, s, 64, Y, s, 1e-6)),
            "x",
            "odd address for 2-byte elements"
        );
        // y overlapping x, and the fused kernel's x overlapping residual.
        assert_eq!(bad_arg(rms(X, 4 * 64, s, 64, X + 64, s, 1e-6)), "y");
        let fused =
            unsafe { NormProblem::fused_add_rmsnorm_raw(DType::Bf16, X, 256, s, X + 2, 256, s, W, 64, 1e-6) };
        assert_eq!(bad_arg(fused), "residual");
    }

    /// Only operands the kernel writes must not overlap another: rmsnorm's y, the fused
    /// kernel's x and residual; the error names the later of the two in argument order.
    #[test]
    fn overlaps_with_a_written_operand_name_the_later_one() {
        let s = Rows::contiguous(4, 64);
        let bytes = 4 * 64 * 2;
        // rmsnorm: x and weight may share memory; y may overlap neither.
        assert!(unsafe { NormProblem::rmsnorm_raw(DType::Bf16, X, 256, s, X, 64, Y, 256, s, 1e-6) }.is_ok());
        let w_in_y = unsafe { NormProblem::rmsnorm_raw(DType::Bf16, X, 256, s, Y + 8, 64, Y, 256, s, 1e-6) };
        assert_eq!(bad_arg(w_in_y), "y");
        let fused = |x: u64, r: u64, w: u64| unsafe {
            NormProblem::fused_add_rmsnorm_raw(DType::Bf16, x, 256, s, r, 256, s, w, 64, 1e-6)
        };
        assert!(fused(X, Y, W).is_ok());
        assert_eq!(bad_arg(fused(X, X + bytes - 2, W)), "residual");
        assert_eq!(bad_arg(fused(X, Y, X + 8)), "weight");
        assert_eq!(bad_arg(fused(X, Y, Y + bytes - 2)), "weight");
    }

    #[test]
    fn alignment_narrows_the_vector() {
        let key = RmsNormKey {
            dtype: DType::Bf16,
            cols: 4096,
        };
        let c = RmsNormConfig {
            threads: 256,
            vec: 8,
            rows: 1,
            occ: 0,
            splits: 1,
            late: 0,
        };
        assert_eq!(fit(&key, c, AlignClass::A16).vec, 8);
        assert_eq!(fit(&key, c, AlignClass::A4).vec, 2);
        assert_eq!(fit(&key, c, AlignClass::A2).vec, 1);
        // An odd row length keeps its vector: the kernel reads head and tail by elements.
        let odd = RmsNormKey {
            dtype: DType::Bf16,
            cols: 97,
        };
        assert_eq!(fit(&odd, c, AlignClass::A16).vec, 8);
    }

    /// The class a launch is fitted to is the relative alignment of x's rows and the
    /// output's: what engines pass (contiguous `[tokens, hidden]` buffers of an odd
    /// hidden size, views at the same element offset, an aligned or misaligned weight)
    /// keeps 16-byte vectors; only x and output rows misaligned differently narrow them.
    #[test]
    fn only_differently_misaligned_rows_narrow_the_vector() {
        let class = |x: u64, xr: Rows, w: u64, y: u64, yr: Rows| {
            let span = |r: Rows| r.span().unwrap();
            let p = unsafe {
                NormProblem::rmsnorm_raw(DType::Bf16, x, span(xr), xr, w, xr.cols, y, span(yr), yr, 1e-6)
            }
            .unwrap();
            p.alignment()
        };
        let odd = Rows::contiguous(7, 4097);
        assert_eq!(class(X, odd, W, Y, odd), AlignClass::A16);
        assert_eq!(class(X + 2, odd, W + 6, Y + 2, odd), AlignClass::A16);
        assert_eq!(class(X + 2, odd, W, Y, odd), AlignClass::A2);
        assert_eq!(class(X + 4, odd, W, Y, odd), AlignClass::A4);
        let padded = Rows::strided(7, 4097, 4099);
        assert_eq!(class(X, padded, W, Y, padded), AlignClass::A16);
        assert_eq!(class(X, padded, W, Y, odd), AlignClass::A4);
        // The fused problem pairs x with the residual.
        let f = unsafe {
            NormProblem::fused_add_rmsnorm_raw(
                DType::Bf16,
                X + 2,
                7 * 4097,
                odd,
                Y + 2,
                7 * 4097,
                odd,
                W,
                4097,
                1e-6,
            )
        }
        .unwrap();
        assert_eq!(f.alignment(), AlignClass::A16);
        let key = f.key();
        // A default with 16-byte vectors (at 64 rows; fewer take 4-byte accesses).
        let c = crate::analytic_default_fused(tuned::Target::Sm90, &key, 64);
        assert_eq!(c.vec, 8);
        let info = DeviceInfo::nominal(tuned::Target::Sm90).unwrap();
        assert!(<FusedAddRmsNorm as PlannedKernel>::plan(&info, &c, &f).is_ok());
    }

    #[test]
    fn each_entry_gets_its_argument_order() {
        let s = Rows::strided(5, 4096, 4160);
        let o = Rows::contiguous(5, 4096);
        let p = rms(X, s.span().unwrap(), s, 4096, Y, o, 1e-5).unwrap();
        let c = RmsNormConfig {
            threads: 256,
            vec: 8,
            rows: 2,
            occ: 0,
            splits: 1,
            late: 0,
        };
        let info = DeviceInfo::nominal(tuned::Target::Sm90).unwrap();
        let plan = <RmsNorm as PlannedKernel>::plan(&info, &c, &p).unwrap();
        let eps = 1e-5f32.to_bits() as u64;
        // (x, x_stride, w, y, y_stride, rows, eps)
        assert_eq!(plan.args.slots(), &[X, 4160, W, Y, 4096, 5, eps]);
        assert_eq!(plan.dims, LaunchDims::linear(3, 512));
        assert_eq!(plan.variant.entry(), "rmsnorm_kernel");
        let f = unsafe {
            NormProblem::fused_add_rmsnorm_raw(
                DType::Bf16,
                X,
                s.span().unwrap(),
                s,
                Y,
                5 * 4096,
                o,
                W,
                4096,
                1e-5,
            )
        }
        .unwrap();
        let plan = <FusedAddRmsNorm as PlannedKernel>::plan(&info, &c, &f).unwrap();
        // (x, x_stride, residual, r_stride, w, rows, eps)
        assert_eq!(plan.args.slots(), &[X, 4160, Y, 4096, W, 5, eps]);
        assert_eq!(plan.variant.entry(), "fused_add_rmsnorm_kernel");
    }

    /// A cluster config launches `splits` blocks per row as clusters of `splits` with
    /// SPLITS defined; buffers too misaligned for its vector fall back to one block per
    /// row where the row would no longer fit in registers.
    #[test]
    fn cluster_configs_launch_splits_blocks_per_row() {
        let rows = Rows::contiguous(5, 8192);
        let p = rms(X, rows.span().unwrap(), rows, 8192, Y, rows, 1e-5).unwrap();
        let c = RmsNormConfig {
            threads: 128,
            vec: 8,
            rows: 1,
            occ: 0,
            splits: 8,
            late: 0,
        };
        let info = DeviceInfo::nominal(tuned::Target::Sm90).unwrap();
        let plan = <RmsNorm as PlannedKernel>::plan(&info, &c, &p).unwrap();
        assert_eq!(plan.dims, LaunchDims::linear(40, 128).with_cluster(8));
        let defines = format!("{:?}", plan.variant);
        assert!(defines.contains("SPLITS"), "{defines}");
        let plain = RmsNormConfig { splits: 1, ..c };
        let defines = format!(
            "{:?}",
            <RmsNorm as PlannedKernel>::plan(&info, &plain, &p)
                .unwrap()
                .variant
        );
        assert!(!defines.contains("SPLITS"), "{defines}");
        let key = p.key();
        // 4-byte alignment: vectors of 2, 8192 / (8 * 128 * 2) = 4 per thread, still a cluster.
        assert_eq!(fit(&key, c, AlignClass::A4), RmsNormConfig { vec: 2, ..c });
        // 2-byte alignment: vectors of 1 need 8 per thread, still fine; at 16 blocks of
        // 32 threads of 8-wide vectors (2 per thread), vectors of 1 would need 16.
        assert_eq!(fit(&key, c, AlignClass::A2), RmsNormConfig { vec: 1, ..c });
        let narrow = RmsNormConfig {
            threads: 32,
            splits: 8,
            ..c
        };
        assert_eq!(
            fit(&key, narrow, AlignClass::A2),
            RmsNormConfig {
                vec: 1,
                splits: 1,
                ..narrow
            }
        );
        // The launch check passes it on Hopper and refuses it by name before.
        assert!(plan.dims.validate(&info).is_ok());
        let a100 = DeviceInfo::nominal(tuned::Target::Sm80).unwrap();
        let e = plan.dims.validate(&a100).unwrap_err();
        assert!(e.to_string().contains("cluster"), "{e}");
    }

    /// A problem serves only the op it was built (and its aliasing checked) for: the
    /// fused kernel on a plain problem would write the read-only x (which may even
    /// alias the weight), the plain kernel on a fused problem would overwrite the
    /// residual with y. Both are errors naming `problem`, before any launch.
    #[test]
    fn a_problem_serves_only_the_op_it_was_built_for() {
        let s = Rows::contiguous(5, 4096);
        let c = RmsNormConfig {
            threads: 256,
            vec: 8,
            rows: 1,
            occ: 0,
            splits: 1,
            late: 0,
        };
        let info = DeviceInfo::nominal(tuned::Target::Sm90).unwrap();
        // x and weight overlap: allowed for the plain op, which only reads both.
        let plain = rms(X, s.span().unwrap(), s, 4096, Y, s, 1e-5).unwrap();
        let plain_aliased =
            unsafe { NormProblem::rmsnorm_raw(DType::Bf16, X, 5 * 4096, s, X, 4096, Y, 5 * 4096, s, 1e-5) }
                .unwrap();
        for p in [&plain, &plain_aliased] {
            let e = <FusedAddRmsNorm as PlannedKernel>::plan(&info, &c, p).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument { name, .. } if name == "problem"),
                "{e}"
            );
            assert!(e.to_string().contains("built for rmsnorm"), "{e}");
        }
        let fused = unsafe {
            NormProblem::fused_add_rmsnorm_raw(DType::Bf16, X, 5 * 4096, s, Y, 5 * 4096, s, W, 4096, 1e-5)
        }
        .unwrap();
        let e = <RmsNorm as PlannedKernel>::plan(&info, &c, &fused).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { name, .. } if name == "problem"),
            "{e}"
        );
        assert!(e.to_string().contains("built for fused_add_rmsnorm"), "{e}");
        // Each op still plans its own problems.
        assert!(<RmsNorm as PlannedKernel>::plan(&info, &c, &plain_aliased).is_ok());
        assert!(<FusedAddRmsNorm as PlannedKernel>::plan(&info, &c, &fused).is_ok());
    }

    /// A blocks-per-SM cap launches with the shared memory that leaves exactly that
    /// many blocks resident under the 196 KiB carveout (and fewer than one more under
    /// the full 228 KiB), with the carveout asked for, from its own variant; devices
    /// without Hopper's carveouts refuse it, naming `occ`.
    #[test]
    fn a_blocks_per_sm_cap_pads_shared_memory_and_sets_the_carveout() {
        let s = Rows::contiguous(32768, 4096);
        let p = rms(X, 32768 * 4096, s, 4096, Y, s, 1e-6).unwrap();
        let h200 = DeviceInfo::nominal(tuned::Target::Sm90).unwrap();
        // What an SM holds for one block: the dynamic and static bytes in 128-byte
        // granules, plus the 1 KiB the system reserves.
        let per_block =
            |smem: u32, c: &RmsNormConfig| (smem + c.rows * c.threads / 32 * 4).next_multiple_of(128) + 1024;
        for (threads, rows, occ) in [
            (128, 1, 6),
            (256, 1, 6),
            (256, 1, 3),
            (512, 1, 3),
            (128, 2, 3),
            (64, 2, 6),
        ] {
            let c = RmsNormConfig {
                threads,
                vec: 8,
                rows,
                occ,
                splits: 1,
                late: 0,
            };
            let plan = <RmsNorm as PlannedKernel>::plan(&h200, &c, &p).unwrap();
            let b = per_block(plan.dims.smem_bytes, &c);
            assert_eq!((196 << 10) / b, occ, "{c:?}: {b} bytes per block");
            assert!((228 << 10) / b <= occ, "{c:?}: one more fits the full carveout");
            assert_eq!(plan.dims.carveout, Some(85));
            assert_eq!(plan.dims.block.0, threads * rows);
            let uncapped = RmsNormConfig { occ: 0, ..c };
            let plain = <RmsNorm as PlannedKernel>::plan(&h200, &uncapped, &p).unwrap();
            assert_eq!((plain.dims.smem_bytes, plain.dims.carveout), (0, None));
            assert_ne!(plan.variant, plain.variant);
            assert!(plan.variant.to_string().contains("OCC"), "{}", plan.variant);
        }
        let c = RmsNormConfig {
            threads: 256,
            vec: 8,
            rows: 1,
            occ: 6,
            splits: 1,
            late: 0,
        };
        let a100 = DeviceInfo::nominal(tuned::Target::Sm80).unwrap();
        let e = <RmsNorm as PlannedKernel>::plan(&a100, &c, &p).unwrap_err();
        assert!(
            e.to_string().contains("occ") && e.to_string().contains("196 KiB"),
            "{e}"
        );
        // A cap no SM can hold (a caller's own config) is an error, not a panic.
        for occ in [197, 1000, u32::MAX] {
            let e = <RmsNorm as PlannedKernel>::plan(&h200, &RmsNormConfig { occ, ..c }, &p).unwrap_err();
            assert!(e.to_string().contains("occ"), "{e}");
        }
    }

    /// The CUDA ops and the HIP ops launch `PlannedKernel::plan`: for every config of
    /// the gfx942 space the plan is the same on an NVIDIA and an AMD device, and its
    /// variant is the one the runtime compiles for the config.
    #[test]
    fn cuda_and_hip_get_the_same_plan_for_the_same_config() {
        let key = RmsNormKey {
            dtype: DType::Bf16,
            cols: 4096,
        };
        let s = Rows::contiguous(16, 4096);
        let p = rms(X, 16 * 4096, s, 4096, Y, s, 1e-6).unwrap();
        let f = unsafe {
            NormProblem::fused_add_rmsnorm_raw(DType::Bf16, X, 16 * 4096, s, Y, 16 * 4096, s, W, 4096, 1e-6)
        }
        .unwrap();
        let nvidia = DeviceInfo::nominal(tuned::Target::Sm90).unwrap();
        let amd = DeviceInfo {
            warp_size: 64,
            amd_arch: Some("gfx942".into()),
            ..nvidia.clone()
        };
        let space = space::search_space(tuned::Target::Gfx942, &key, true);
        assert!(!space.is_empty());
        for c in &space {
            for (plan, p) in [
                (<RmsNorm as PlannedKernel>::plan as fn(&_, &_, &_) -> _, &p),
                (<FusedAddRmsNorm as PlannedKernel>::plan, &f),
            ] {
                assert_eq!(plan(&nvidia, c, p).unwrap(), plan(&amd, c, p).unwrap(), "{c:?}");
            }
            let on_hip = <RmsNorm as PlannedKernel>::plan(&amd, c, &p).unwrap();
            assert_eq!(on_hip.variant, <RmsNorm as PlannedKernel>::variant(&amd, &key, c));
        }
    }
}
