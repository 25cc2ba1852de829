//! Launching softmax and log-softmax: the device source, the [`Tunable`]
//! implementations the runtime compiles, launches and tunes, and the ops engines call
//! (safe ones on cudarc buffers, raw ones on device pointers).
//!
//! Every op validates shapes, lengths, strides, `scale`, aliasing and alignment
//! before anything is launched and returns an error naming the bad argument.

use std::marker::PhantomData;
use std::sync::Arc;

use kernels_core::cudarc::driver::{CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use kernels_core::{
    alloc_random, check_disjoint, AlignClass, BufferRole, DeviceInfo, Element, Error, Kernel, KernelArgs,
    KernelSource, LaunchDims, RawStream, Result, Rows, Runtime, Tunable, TunableDyn, TuneBuffer, Variant,
};
use tuned::{DType, Resolved, Target};

use crate::{space, LogSoftmax, Softmax, SoftmaxConfig, SoftmaxKey, Strategy};

/// The device source: the shared prelude followed by `cuda/softmax.cu`.
pub static SOURCE: KernelSource = KernelSource::new(
    "softmax",
    concat!(
        include_str!("../../kernels-core/cuda/prelude.cuh"),
        include_str!("../cuda/softmax.cu")
    ),
    crate::SOURCE_FINGERPRINT,
);

/// One softmax call, as device addresses. `y` may be `x` itself (in place, with equal
/// strides). Build it with [`SoftmaxProblem::new`] or [`SoftmaxProblem::raw`].
#[derive(Clone, Copy, Debug)]
pub struct SoftmaxProblem<'a> {
    key: SoftmaxKey,
    rows: u64,
    x: u64,
    x_stride: u64,
    y: u64,
    y_stride: u64,
    scale: f32,
    _buffers: PhantomData<&'a mut [u8]>,
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
        x_rows.check("x", x_len)?;
        y_rows.check("y", y_len)?;
        if (y_rows.rows, y_rows.cols) != (x_rows.rows, x_rows.cols) {
            return Err(Error::invalid(
                "y",
                format!(
                    "is [{}, {}] but `x` is [{}, {}]",
                    y_rows.rows, y_rows.cols, x_rows.rows, x_rows.cols
                ),
            ));
        }
        if !scale.is_finite() {
            return Err(Error::invalid("scale", format!("must be finite, got {scale}")));
        }
        for (name, p) in [("x", x), ("y", y)] {
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

    /// `y = softmax(x * scale)` per row on cudarc buffers.
    pub fn new<T: Element>(
        stream: &CudaStream,
        x: &'a CudaView<'_, T>,
        x_rows: Rows,
        y: &'a mut CudaViewMut<'_, T>,
        y_rows: Rows,
        scale: f32,
    ) -> Result<SoftmaxProblem<'a>> {
        let y_len = y.len();
        let (xp, _gx) = x.device_ptr(stream);
        let (yp, _gy) = y.device_ptr_mut(stream);
        // Safe: the borrows keep the buffers alive for 'a and Rust forbids them aliasing.
        unsafe { Self::raw(T::DTYPE, xp, x.len(), x_rows, yp, y_len, y_rows, scale) }
    }

    /// Softmax of `x` in place.
    pub fn in_place<T: Element>(
        stream: &CudaStream,
        x: &'a mut CudaViewMut<'_, T>,
        rows: Rows,
        scale: f32,
    ) -> Result<SoftmaxProblem<'a>> {
        let len = x.len();
        let (xp, _gx) = x.device_ptr_mut(stream);
        // Safe: the mutable borrow keeps the buffer alive and exclusive for 'a.
        unsafe { Self::raw(T::DTYPE, xp, len, rows, xp, len, rows, scale) }
    }

    pub fn key(&self) -> SoftmaxKey {
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
        AlignClass::of([self.x, self.y, self.x_stride * s, self.y_stride * s])
    }
}

/// Buffers the tuner allocates for a problem of its own.
pub struct SoftmaxBuffers {
    key: SoftmaxKey,
    rows: u64,
    x: CudaSlice<u8>,
    y: CudaSlice<u8>,
    stream: Arc<CudaStream>,
}

impl SoftmaxBuffers {
    fn alloc(stream: &Arc<CudaStream>, key: &SoftmaxKey, rows: u64) -> Result<SoftmaxBuffers> {
        let n = rows as usize * key.cols as usize;
        Ok(SoftmaxBuffers {
            key: *key,
            rows,
            x: alloc_random(stream, key.dtype, n, 11, 8.0, 0.0)?,
            y: alloc_random(stream, key.dtype, n, 12, 1.0, 0.0)?,
            stream: stream.clone(),
        })
    }

    fn problem(&mut self) -> SoftmaxProblem<'_> {
        let (x, _) = self.x.device_ptr(&self.stream);
        let (y, _) = self.y.device_ptr(&self.stream);
        let cols = self.key.cols as u64;
        SoftmaxProblem {
            key: self.key,
            rows: self.rows,
            x,
            x_stride: cols,
            y,
            y_stride: cols,
            scale: 1.0,
            _buffers: PhantomData,
        }
    }
}

/// The config with its vector narrowed to what the buffers' alignment allows; a
/// narrower vector needs more vectors per thread, so a register strategy that no
/// longer fits moves to `online`, which takes any length.
fn fit(target: Target, key: &SoftmaxKey, mut c: SoftmaxConfig, align: AlignClass) -> SoftmaxConfig {
    let size = key.dtype.size() as u32;
    let before = c.vec;
    while c.vec > 1 && (c.vec * size > align.bytes() || !key.cols.is_multiple_of(c.vec)) {
        c.vec /= 2;
    }
    if c.vec != before && !space::fits(target, key, &c) {
        c = SoftmaxConfig {
            strategy: Strategy::Online,
            threads: c.threads.max(target.warp_size()),
            vec: c.vec,
            rows: 1,
            splits: 1,
        };
        if !space::fits(target, key, &c) {
            // Rows this short fit one warp's registers whatever the vector.
            c = SoftmaxConfig {
                strategy: Strategy::Row,
                threads: target.warp_size(),
                vec: c.vec,
                rows: 1,
                splits: 1,
            };
        }
    }
    c
}

fn variant(target: Target, key: &SoftmaxKey, c: &SoftmaxConfig, log: bool) -> Variant {
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
        .define("LOG_SOFTMAX", u32::from(log));
    match c.strategy {
        Strategy::Staged => v.define("STAGE_VECS", c.stage_vectors(target, key)),
        _ => v,
    }
}

fn launch(kernel: &Kernel, stream: &CudaStream, c: &SoftmaxConfig, p: &SoftmaxProblem<'_>) -> Result<()> {
    let align = p.alignment();
    if c.vec * p.key.dtype.size() as u32 > align.bytes() {
        return Err(Error::invalid(
            "x",
            format!(
                "buffers aligned to {align} do not allow {}-element vectors",
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
    // At most the staged limit (space::fits); the launch checks it against the device.
    let smem = u32::try_from(c.smem_bytes(kernel.info().tuning_target(), &p.key))
        .map_err(|_| Error::invalid("config", "staged slice exceeds shared memory"))?;
    let mut args = KernelArgs::new();
    args.ptr(p.x)
        .ptr(p.y)
        .i64(p.rows as i64)
        .i64(p.x_stride as i64)
        .i64(p.y_stride as i64)
        .f32(p.scale);
    // Safe: the arguments follow cuda/softmax.cu's ABI and the problem was validated
    // against the buffers' lengths when it was built.
    unsafe {
        kernel.launch_raw(
            RawStream::of(stream),
            LaunchDims::linear(blocks as u32, threads).with_smem(smem),
            &args,
        )
    }
}

macro_rules! tunable {
    ($ty:ident, $log:literal, $dyn:ident) => {
        // Safety: `buffers` lists x and y with their full spans, and `launch` passes
        // exactly those to the kernel, which stays within them.
        unsafe impl Tunable for $ty {
            type Problem<'a> = SoftmaxProblem<'a>;
            type Owned = SoftmaxBuffers;
            const SOURCE: &'static KernelSource = &SOURCE;

            fn search_space(device: &DeviceInfo, key: &SoftmaxKey, _batch: u64) -> Vec<SoftmaxConfig> {
                space::search_space(device.tuning_target(), key)
            }

            fn variant(device: &DeviceInfo, key: &SoftmaxKey, c: &SoftmaxConfig) -> Variant {
                variant(device.tuning_target(), key, c, $log)
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

            fn launch(
                kernel: &Kernel,
                stream: &Arc<CudaStream>,
                c: &SoftmaxConfig,
                p: &SoftmaxProblem<'_>,
            ) -> Result<()> {
                launch(kernel, stream, c, p)
            }

            fn alloc_problem(
                stream: &Arc<CudaStream>,
                key: &SoftmaxKey,
                batch: u64,
            ) -> Result<SoftmaxBuffers> {
                SoftmaxBuffers::alloc(stream, key, batch)
            }

            fn borrow_problem(owned: &mut SoftmaxBuffers) -> SoftmaxProblem<'_> {
                owned.problem()
            }
        }

        #[doc = concat!("The `kernels tune` view of [`", stringify!($ty), "`].")]
        pub static $dyn: TunableDyn<$ty> = TunableDyn::new();
    };
}

tunable!(Softmax, false, SOFTMAX_TUNABLE);
tunable!(LogSoftmax, true, LOG_SOFTMAX_TUNABLE);

/// `y = softmax(x * scale)` over the last dimension, with the config the runtime's
/// policy resolves. Returns that config and where it came from.
pub fn softmax<T: Element>(
    rt: &Runtime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    scale: f32,
) -> Result<Resolved<SoftmaxConfig>> {
    let p = SoftmaxProblem::new(stream, x, x_rows, y, y_rows, scale)?;
    Ok(rt.run::<Softmax>(stream, &p)?.resolved)
}

/// `y = log_softmax(x * scale)` over the last dimension.
pub fn log_softmax<T: Element>(
    rt: &Runtime,
    stream: &Arc<CudaStream>,
    x: &CudaView<'_, T>,
    x_rows: Rows,
    y: &mut CudaViewMut<'_, T>,
    y_rows: Rows,
    scale: f32,
) -> Result<Resolved<SoftmaxConfig>> {
    let p = SoftmaxProblem::new(stream, x, x_rows, y, y_rows, scale)?;
    Ok(rt.run::<LogSoftmax>(stream, &p)?.resolved)
}

#[cfg(test)]
mod tests {
    //! Argument checks run before anything touches a device, so they are tested here
    //! with made-up (never dereferenced) device addresses.
    use super::*;

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
}
