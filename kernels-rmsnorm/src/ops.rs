//! Launching RMSNorm: the device source, the [`Tunable`] implementations the runtime
//! compiles, launches and tunes, and the ops engines call (safe ones on cudarc
//! buffers, raw ones on device pointers).
//!
//! Every op validates shapes, lengths, strides, `eps`, aliasing and alignment before
//! anything is launched and returns an error naming the bad argument.

use std::marker::PhantomData;
use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use kernels_core::{
    alloc_random, check_disjoint, check_eps, AlignClass, BufferRole, DeviceInfo, Element, Error, Kernel,
    KernelArgs, KernelSource, LaunchDims, RawStream, Result, Rows, Runtime, Tunable, TunableDyn, TuneBuffer,
    Variant,
};
use tuned::{DType, Resolved};

use crate::{space, FusedAddRmsNorm, RmsNorm, RmsNormConfig, RmsNormKey};

/// The device source: the shared prelude followed by `cuda/rmsnorm.cu`.
pub static SOURCE: KernelSource = KernelSource::new(
    "rmsnorm",
    concat!(
        include_str!("../../kernels-core/cuda/prelude.cuh"),
        include_str!("../cuda/rmsnorm.cu")
    ),
    crate::SOURCE_FINGERPRINT,
);

/// One RMSNorm call, as device addresses: `out` is `y` for [`RmsNorm`] and
/// `residual` for [`FusedAddRmsNorm`]. Build it with [`NormProblem::rmsnorm`],
/// [`NormProblem::fused_add_rmsnorm`] or their raw forms, which validate everything.
#[derive(Clone, Copy, Debug)]
pub struct NormProblem<'a> {
    key: RmsNormKey,
    rows: u64,
    x: u64,
    x_stride: u64,
    w: u64,
    out: u64,
    out_stride: u64,
    eps: f32,
    _buffers: PhantomData<&'a mut [u8]>,
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
            dtype,
            ("x", x, x_len, x_rows),
            (weight, weight_len),
            ("y", y, y_len, y_rows),
            eps,
        )?;
        check_disjoint(
            ("x", x_rows.byte_range(x, dtype)),
            ("y", y_rows.byte_range(y, dtype)),
        )?;
        check_disjoint(
            (
                "weight",
                Rows::contiguous(1, x_rows.cols).byte_range(weight, dtype),
            ),
            ("y", y_rows.byte_range(y, dtype)),
        )?;
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
            dtype,
            ("x", x, x_len, x_rows),
            (weight, weight_len),
            ("residual", residual, residual_len, residual_rows),
            eps,
        )?;
        check_disjoint(
            ("x", x_rows.byte_range(x, dtype)),
            ("residual", residual_rows.byte_range(residual, dtype)),
        )?;
        let w = Rows::contiguous(1, x_rows.cols).byte_range(weight, dtype);
        check_disjoint(("x", x_rows.byte_range(x, dtype)), ("weight", w))?;
        check_disjoint(
            ("residual", residual_rows.byte_range(residual, dtype)),
            ("weight", w),
        )?;
        Ok(p)
    }

    /// `y = rmsnorm(x) * weight` on cudarc buffers.
    pub fn rmsnorm<T: Element>(
        stream: &CudaStream,
        x: &'a CudaView<'_, T>,
        x_rows: Rows,
        weight: &'a CudaView<'_, T>,
        y: &'a mut CudaViewMut<'_, T>,
        y_rows: Rows,
        eps: f32,
    ) -> Result<NormProblem<'a>> {
        let y_len = y.len();
        let (xp, _gx) = x.device_ptr(stream);
        let (wp, _gw) = weight.device_ptr(stream);
        let (yp, _gy) = y.device_ptr_mut(stream);
        // Safe: the borrows keep the buffers alive for 'a and Rust forbids them aliasing.
        unsafe {
            Self::rmsnorm_raw(
                T::DTYPE,
                xp,
                x.len(),
                x_rows,
                wp,
                weight.len(),
                yp,
                y_len,
                y_rows,
                eps,
            )
        }
    }

    /// `residual += x; x = rmsnorm(residual) * weight`, in place, on cudarc buffers.
    #[allow(clippy::too_many_arguments)]
    pub fn fused_add_rmsnorm<T: Element>(
        stream: &CudaStream,
        x: &'a mut CudaViewMut<'_, T>,
        x_rows: Rows,
        residual: &'a mut CudaViewMut<'_, T>,
        residual_rows: Rows,
        weight: &'a CudaView<'_, T>,
        eps: f32,
    ) -> Result<NormProblem<'a>> {
        let (x_len, r_len, w_len) = (x.len(), residual.len(), weight.len());
        let (xp, _gx) = x.device_ptr_mut(stream);
        let (rp, _gr) = residual.device_ptr_mut(stream);
        let (wp, _gw) = weight.device_ptr(stream);
        // Safe: the borrows keep the buffers alive for 'a and Rust forbids them aliasing.
        unsafe {
            Self::fused_add_rmsnorm_raw(
                T::DTYPE,
                xp,
                x_len,
                x_rows,
                rp,
                r_len,
                residual_rows,
                wp,
                w_len,
                eps,
            )
        }
    }

    fn checked(
        dtype: DType,
        (xn, x, x_len, x_rows): (&str, u64, usize, Rows),
        (w, w_len): (u64, usize),
        (on, out, out_len, out_rows): (&str, u64, usize, Rows),
        eps: f32,
    ) -> Result<NormProblem<'a>> {
        x_rows.check(xn, x_len)?;
        out_rows.check(on, out_len)?;
        if (out_rows.rows, out_rows.cols) != (x_rows.rows, x_rows.cols) {
            return Err(Error::invalid(
                on,
                format!(
                    "is [{}, {}] but `{xn}` is [{}, {}]",
                    out_rows.rows, out_rows.cols, x_rows.rows, x_rows.cols
                ),
            ));
        }
        if w_len != x_rows.cols {
            return Err(Error::invalid(
                "weight",
                format!("has {w_len} elements, cols is {}", x_rows.cols),
            ));
        }
        check_eps(eps)?;
        for (name, p) in [(xn, x), ("weight", w), (on, out)] {
            if p == 0 {
                return Err(Error::invalid(name, "is a null device pointer"));
            }
            if p % dtype.size() as u64 != 0 {
                return Err(Error::invalid(
                    name,
                    format!("address {p:#x} is not aligned to its {dtype} elements"),
                ));
            }
        }
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
            _buffers: PhantomData,
        })
    }

    pub fn key(&self) -> RmsNormKey {
        self.key
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    fn span_bytes(&self, stride: u64) -> usize {
        Rows::strided(self.rows as usize, self.key.cols as usize, stride as usize).span_bytes(self.key.dtype)
    }

    fn alignment(&self) -> AlignClass {
        let s = self.key.dtype.size() as u64;
        AlignClass::of([self.x, self.w, self.out, self.x_stride * s, self.out_stride * s])
    }
}

/// Buffers the tuner allocates for a problem of its own.
pub struct NormBuffers {
    key: RmsNormKey,
    rows: u64,
    x: CudaSlice<u8>,
    w: CudaSlice<u8>,
    out: CudaSlice<u8>,
    stream: Arc<CudaStream>,
}

impl NormBuffers {
    fn alloc(stream: &Arc<CudaStream>, key: &RmsNormKey, rows: u64) -> Result<NormBuffers> {
        let n = rows as usize * key.cols as usize;
        Ok(NormBuffers {
            key: *key,
            rows,
            x: alloc_random(stream, key.dtype, n, 1, 2.0, 0.0)?,
            w: alloc_random(stream, key.dtype, key.cols as usize, 2, 0.5, 1.0)?,
            out: alloc_random(stream, key.dtype, n, 3, 2.0, 0.0)?,
            stream: stream.clone(),
        })
    }

    fn problem(&mut self) -> NormProblem<'_> {
        let (x, _) = self.x.device_ptr(&self.stream);
        let (w, _) = self.w.device_ptr(&self.stream);
        let (out, _) = self.out.device_ptr(&self.stream);
        let cols = self.key.cols as u64;
        NormProblem {
            key: self.key,
            rows: self.rows,
            x,
            x_stride: cols,
            w,
            out,
            out_stride: cols,
            eps: 1e-6,
            _buffers: PhantomData,
        }
    }
}

/// The config with its vector narrowed to what the buffers' alignment allows.
fn fit(key: &RmsNormKey, mut c: RmsNormConfig, align: AlignClass) -> RmsNormConfig {
    let size = key.dtype.size() as u32;
    while c.vec > 1 && (c.vec * size > align.bytes() || !key.cols.is_multiple_of(c.vec)) {
        c.vec /= 2;
    }
    c
}

fn variant(entry: &str, key: &RmsNormKey, c: &RmsNormConfig) -> Variant {
    Variant::new(entry)
        .define("DTYPE", kernels_core::dtype_define(key.dtype))
        .define("COLS", key.cols)
        .define("THREADS", c.threads)
        .define("VEC", c.vec)
        .define("ROWS", c.rows)
}

/// The two entry points' parameter orders (cuda/rmsnorm.cu's ABI).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// `(x, x_stride, w, y, y_stride, rows, eps)`
    RmsNorm,
    /// `(x, x_stride, residual, r_stride, w, rows, eps)`
    FusedAdd,
}

fn launch(
    entry: Entry,
    kernel: &Kernel,
    stream: &CudaStream,
    c: &RmsNormConfig,
    p: &NormProblem<'_>,
) -> Result<()> {
    if fit(&p.key, *c, p.alignment()) != *c {
        return Err(Error::invalid(
            "x",
            format!(
                "buffers aligned to {} do not allow {}-element vectors",
                p.alignment(),
                c.vec
            ),
        ));
    }
    let blocks = p.rows.div_ceil(c.rows as u64);
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
    let dims = LaunchDims::linear(blocks as u32, c.block_threads());
    // Safe: the arguments follow cuda/rmsnorm.cu's ABI and the problem was validated
    // against the buffers' lengths when it was built.
    unsafe { kernel.launch_raw(RawStream::of(stream), dims, &args) }
}

macro_rules! tunable {
    ($ty:ident, $abi:expr, $entry:literal, $out:literal, $out_role:expr, $x_role:expr, $dyn:ident) => {
        // Safety: `buffers` lists x, weight and the output with their full spans, and
        // `launch` passes exactly those to the kernel, which stays within them.
        unsafe impl Tunable for $ty {
            type Problem<'a> = NormProblem<'a>;
            type Owned = NormBuffers;
            const SOURCE: &'static KernelSource = &SOURCE;

            fn search_space(device: &DeviceInfo, key: &RmsNormKey, _batch: u64) -> Vec<RmsNormConfig> {
                space::search_space(device.tuning_target(), key)
            }

            fn variant(_: &DeviceInfo, key: &RmsNormKey, c: &RmsNormConfig) -> Variant {
                variant($entry, key, c)
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

            fn launch(
                kernel: &Kernel,
                stream: &Arc<CudaStream>,
                c: &RmsNormConfig,
                p: &NormProblem<'_>,
            ) -> Result<()> {
                launch($abi, kernel, stream, c, p)
            }

            fn alloc_problem(stream: &Arc<CudaStream>, key: &RmsNormKey, batch: u64) -> Result<NormBuffers> {
                NormBuffers::alloc(stream, key, batch)
            }

            fn borrow_problem(owned: &mut NormBuffers) -> NormProblem<'_> {
                owned.problem()
            }
        }

        #[doc = concat!("The `kernels tune` view of [`", stringify!($ty), "`].")]
        pub static $dyn: TunableDyn<$ty> = TunableDyn::new();
    };
}

tunable!(
    RmsNorm,
    Entry::RmsNorm,
    "rmsnorm_kernel",
    "y",
    BufferRole::Write,
    BufferRole::Read,
    RMSNORM_TUNABLE
);
tunable!(
    FusedAddRmsNorm,
    Entry::FusedAdd,
    "fused_add_rmsnorm_kernel",
    "residual",
    BufferRole::Restore,
    BufferRole::Restore,
    FUSED_ADD_RMSNORM_TUNABLE
);

/// `y = x / rms(x) * weight` per row, with the config the runtime's policy resolves.
/// Returns that config and where it came from.
///
/// ```no_run
/// # use kernels_core::{Runtime, Rows, cudarc::driver::CudaSlice};
/// # fn f(rt: &Runtime, stream: &std::sync::Arc<kernels_core::cudarc::driver::CudaStream>,
/// #      x: &CudaSlice<half::bf16>, w: &CudaSlice<half::bf16>, y: &mut CudaSlice<half::bf16>) -> kernels_core::Result<()> {
/// let shape = Rows::contiguous(16, 4096);
/// let used = kernels_rmsnorm::ops::rmsnorm(rt, stream, &x.as_view(), shape, &w.as_view(), &mut y.as_view_mut(), shape, 1e-6)?;
/// println!("{:?} from {}", used.config, used.source);
/// # Ok(()) }
/// ```
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm<T: Element>(
    rt: &Runtime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    weight: &CudaView<'_, T>,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    eps: f32,
) -> Result<Resolved<RmsNormConfig>> {
    let p = NormProblem::rmsnorm(stream, x, x_rows, weight, y, y_rows, eps)?;
    Ok(rt.run::<RmsNorm>(stream, &p)?.resolved)
}

/// `residual += x; x = rmsnorm(residual) * weight`, in place (SGLang's and vLLM's
/// `fused_add_rmsnorm`), with the config the runtime's policy resolves.
#[allow(clippy::too_many_arguments)]
pub fn fused_add_rmsnorm<T: Element>(
    rt: &Runtime,
    stream: &Arc<CudaStream>,
    x: &mut CudaViewMut<'_, T>,
    x_rows: Rows,
    residual: &mut CudaViewMut<'_, T>,
    residual_rows: Rows,
    weight: &CudaView<'_, T>,
    eps: f32,
) -> Result<Resolved<RmsNormConfig>> {
    let p = NormProblem::fused_add_rmsnorm(stream, x, x_rows, residual, residual_rows, weight, eps)?;
    Ok(rt.run::<FusedAddRmsNorm>(stream, &p)?.resolved)
}

#[cfg(test)]
mod tests {
    //! Argument checks run before anything touches a device, so they are tested here
    //! with made-up (never dereferenced) device addresses.
    use super::*;

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
        };
        assert_eq!(fit(&key, c, AlignClass::A16).vec, 8);
        assert_eq!(fit(&key, c, AlignClass::A4).vec, 2);
        assert_eq!(fit(&key, c, AlignClass::A2).vec, 1);
        // An odd row length never takes a vector wider than 1.
        assert_eq!(
            fit(
                &RmsNormKey {
                    dtype: DType::Bf16,
                    cols: 97
                },
                c,
                AlignClass::A16
            )
            .vec,
            1
        );
    }
}
