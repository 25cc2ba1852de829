//! The raw-pointer entry points the C ABI ([`crate::ffi`]) and the Python extension
//! share: integer codes and sizes as a foreign caller holds them, checked and turned
//! into the kernel crates' problems, then run on the caller's stream with the
//! device's shared runtime. Every check runs before the device is touched, so a bad
//! argument is an error naming it even where no GPU is present, and nothing is
//! launched.
//!
//! The row kernels (softmax, RMSNorm) are here; each other family has a module of its
//! own ([`gemm`], [`moe`]) with its problem from raw addresses, its workspace size and
//! its warm function (their keys are not `(dtype, cols)`), and one `extern "C"`
//! wrapper per function in [`crate::ffi`]. [`interop`] serves the Python package's
//! arrays of other libraries.

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use kernels::core::cudarc::driver::{result as drv, sys as dsys};
use kernels::core::{CudaRuntime, Error, Result, Rows};
use kernels::rmsnorm::{self, ops::NormProblem, FusedAddRmsNorm, RmsNorm, RmsNormKey};
use kernels::softmax::{self, ops::SoftmaxProblem, LogSoftmax, Softmax, SoftmaxKey};
use kernels::DType;

pub mod gemm;
pub mod interop;
pub mod moe;

/// Element type codes (`kernels_dtype` in the C header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum DTypeCode {
    Bf16 = 0,
    F16 = 1,
    F32 = 2,
}

impl DTypeCode {
    /// Every code, in value order.
    pub const ALL: [DTypeCode; 3] = [DTypeCode::Bf16, DTypeCode::F16, DTypeCode::F32];

    /// The constant's name in the C header.
    pub const fn c_name(self) -> &'static str {
        match self {
            DTypeCode::Bf16 => "KERNELS_BF16",
            DTypeCode::F16 => "KERNELS_F16",
            DTypeCode::F32 => "KERNELS_F32",
        }
    }

    /// The element type.
    pub const fn dtype(self) -> DType {
        match self {
            DTypeCode::Bf16 => DType::Bf16,
            DTypeCode::F16 => DType::F16,
            DTypeCode::F32 => DType::F32,
        }
    }

    /// The code `code`, or an error naming `name`.
    pub fn parse(name: &str, code: i32) -> Result<DTypeCode> {
        DTypeCode::ALL
            .into_iter()
            .find(|d| *d as i32 == code)
            .ok_or_else(|| {
                Error::invalid(
                    name,
                    format!("unknown element type code {code} (0 bf16, 1 f16, 2 f32)"),
                )
            })
    }
}

/// Kernel codes (`kernels_op` in the C header), for warm-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Op {
    Softmax = 0,
    LogSoftmax = 1,
    RmsNorm = 2,
    FusedAddRmsNorm = 3,
}

impl Op {
    /// Every code, in value order.
    pub const ALL: [Op; 4] = [Op::Softmax, Op::LogSoftmax, Op::RmsNorm, Op::FusedAddRmsNorm];

    /// The constant's name in the C header.
    pub const fn c_name(self) -> &'static str {
        match self {
            Op::Softmax => "KERNELS_OP_SOFTMAX",
            Op::LogSoftmax => "KERNELS_OP_LOG_SOFTMAX",
            Op::RmsNorm => "KERNELS_OP_RMSNORM",
            Op::FusedAddRmsNorm => "KERNELS_OP_FUSED_ADD_RMSNORM",
        }
    }

    /// The kernel's name, as tables and `kernels plan` print it.
    pub const fn kernel(self) -> &'static str {
        match self {
            Op::Softmax => "softmax",
            Op::LogSoftmax => "log_softmax",
            Op::RmsNorm => "rmsnorm",
            Op::FusedAddRmsNorm => "fused_add_rmsnorm",
        }
    }

    /// The code `code`, or an error naming `name`.
    pub fn parse(name: &str, code: i32) -> Result<Op> {
        Op::ALL.into_iter().find(|o| *o as i32 == code).ok_or_else(|| {
            Error::invalid(
                name,
                format!(
                    "unknown kernel code {code} (0 softmax, 1 log_softmax, 2 rmsnorm, 3 fused_add_rmsnorm)"
                ),
            )
        })
    }
}

/// A row operand as a foreign caller holds it: a device address and the elements
/// between the starts of its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    pub ptr: u64,
    pub stride: i64,
}

/// A `[rows, cols]` shape as a foreign caller holds it (signed, as torch's sizes are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub rows: i64,
    pub cols: i64,
}

impl Shape {
    /// The shape as `usize`s; zero or negative sizes are errors naming `rows` or `cols`.
    fn sizes(self) -> Result<(usize, usize)> {
        Ok((positive("rows", self.rows)?, positive("cols", self.cols)?))
    }

    /// Operand `name` of this shape: its rows, and the elements it spans (the length
    /// the problem constructors check; a span that overflows is left to their check,
    /// which names the operand).
    fn operand(self, name: &str, stride: i64) -> Result<(Rows, usize)> {
        let (rows, cols) = self.sizes()?;
        let stride = usize::try_from(stride).map_err(|_| {
            Error::invalid(
                format!("{name}_stride"),
                format!("must not be negative, got {stride}"),
            )
        })?;
        let r = Rows::strided(rows, cols, stride);
        Ok((r, r.span().unwrap_or(usize::MAX)))
    }
}

/// The size `v` of argument `name`: zero or negative is an error naming it.
fn positive(name: &str, v: i64) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|v| *v > 0)
        .ok_or_else(|| Error::invalid(name, format!("must be at least 1, got {v}")))
}

/// The device ordinal `device`, or an error naming it.
fn ordinal(device: i32) -> Result<usize> {
    usize::try_from(device)
        .map_err(|_| Error::invalid("device", format!("must not be negative, got {device}")))
}

/// Ordinals below this keep their runtime in a lock-free slot; the rest go through
/// the runtime's shared map (a mutex).
const FAST_ORDINALS: usize = 64;

/// The shared runtime of device `ordinal`. The first call opens the device (the
/// no-driver and no-GPU errors come from here); later calls are an atomic load and
/// a reference-count increment.
pub fn runtime(ordinal: usize) -> Result<Arc<CudaRuntime>> {
    static SLOTS: [OnceLock<Arc<CudaRuntime>>; FAST_ORDINALS] = [const { OnceLock::new() }; FAST_ORDINALS];
    let Some(slot) = SLOTS.get(ordinal) else {
        return CudaRuntime::shared(ordinal);
    };
    if let Some(rt) = slot.get() {
        return Ok(rt.clone());
    }
    let rt = CudaRuntime::shared(ordinal)?;
    Ok(slot.get_or_init(|| rt).clone())
}

/// Keeps the calling thread's current CUDA context as the caller had it: launches
/// bind the device's primary context, and a torch or C++ engine that works on
/// another device must find its own context current afterwards.
struct KeepCurrentContext(Option<dsys::CUcontext>);

impl KeepCurrentContext {
    /// Remembers the current context; call only once the driver is loaded (after
    /// [`runtime`] succeeded).
    fn new() -> KeepCurrentContext {
        KeepCurrentContext(
            drv::ctx::get_current()
                .ok()
                .map(|c| c.unwrap_or(std::ptr::null_mut())),
        )
    }
}

impl Drop for KeepCurrentContext {
    fn drop(&mut self) {
        let Some(saved) = self.0 else { return };
        let now = drv::ctx::get_current()
            .ok()
            .flatten()
            .unwrap_or(std::ptr::null_mut());
        if now != saved {
            // SAFETY: `saved` was current on this thread when the call began (or null,
            // which unbinds); the caller owns it and keeps it alive across the call.
            let _ = unsafe { drv::ctx::set_current(saved) };
        }
    }
}

/// Runs `op` on the shared runtime of `device` and the caller's `stream`, keeping the
/// thread's current context.
///
/// # Safety
/// `stream` must be null (the legacy default stream), `CU_STREAM_PER_THREAD`, or a
/// live stream of device `device`'s primary context, alive for the call.
unsafe fn on_stream<T>(
    device: usize,
    stream: *mut c_void,
    op: impl FnOnce(&CudaRuntime, &Arc<kernels::core::cudarc::driver::CudaStream>) -> Result<T>,
) -> Result<T> {
    let rt = runtime(device)?;
    let _keep = KeepCurrentContext::new();
    // SAFETY: forwarded from the caller; the wrapper does not destroy the stream.
    let stream = unsafe { rt.device().borrow_stream(stream) };
    op(&rt, &stream)
}

/// `y = softmax(x * scale)` (or log-softmax with `log`) per row of a `[rows, cols]`
/// problem, on `stream` of device `device`. `y` may be `x` (in place, equal strides).
///
/// # Safety
/// `x` and `y` must be device allocations of device `device` covering their operands
/// (`(rows - 1) * stride + cols` elements of `dtype`), alive until the kernel has run
/// on `stream`; `stream` as for [`rmsnorm()`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn softmax(
    log: bool,
    y: Operand,
    x: Operand,
    shape: Shape,
    dtype: i32,
    scale: f32,
    device: i32,
    stream: *mut c_void,
) -> Result<()> {
    let dtype = DTypeCode::parse("dtype", dtype)?.dtype();
    let (x_rows, x_len) = shape.operand("x", x.stride)?;
    let (y_rows, y_len) = shape.operand("y", y.stride)?;
    let device = ordinal(device)?;
    // SAFETY: the caller's promise on x and y.
    let p = unsafe { SoftmaxProblem::raw(dtype, x.ptr, x_len, x_rows, y.ptr, y_len, y_rows, scale) }?;
    // SAFETY: the caller's promise on stream.
    unsafe {
        on_stream(device, stream, |rt, s| match log {
            false => softmax::ops::softmax(rt, s, &p).map(|_| ()),
            true => softmax::ops::log_softmax(rt, s, &p).map(|_| ()),
        })
    }
}

/// `y = x / rms(x) * weight` per row of a `[rows, cols]` problem, on `stream` of device
/// `device`.
///
/// # Safety
/// `x`, `weight` (`cols` elements) and `y` must be device allocations of device
/// `device` covering their operands, alive until the kernel has run on `stream`.
/// `stream` must be null (the legacy default stream), `CU_STREAM_PER_THREAD`, or a
/// live stream of the device's primary context.
#[allow(clippy::too_many_arguments)]
pub unsafe fn rmsnorm(
    y: Operand,
    x: Operand,
    weight: u64,
    shape: Shape,
    dtype: i32,
    eps: f32,
    device: i32,
    stream: *mut c_void,
) -> Result<()> {
    let dtype = DTypeCode::parse("dtype", dtype)?.dtype();
    let (x_rows, x_len) = shape.operand("x", x.stride)?;
    let (y_rows, y_len) = shape.operand("y", y.stride)?;
    let device = ordinal(device)?;
    let cols = x_rows.cols;
    // SAFETY: the caller's promise on x, weight and y.
    let p = unsafe {
        NormProblem::rmsnorm_raw(
            dtype, x.ptr, x_len, x_rows, weight, cols, y.ptr, y_len, y_rows, eps,
        )
    }?;
    // SAFETY: the caller's promise on stream.
    unsafe {
        on_stream(device, stream, |rt, s| {
            rmsnorm::ops::rmsnorm(rt, s, &p).map(|_| ())
        })
    }
}

/// `residual += x; x = residual / rms(residual) * weight` per row, in place, on
/// `stream` of device `device`.
///
/// # Safety
/// As [`rmsnorm()`], with `x` and `residual` writable.
#[allow(clippy::too_many_arguments)]
pub unsafe fn fused_add_rmsnorm(
    x: Operand,
    residual: Operand,
    weight: u64,
    shape: Shape,
    dtype: i32,
    eps: f32,
    device: i32,
    stream: *mut c_void,
) -> Result<()> {
    let dtype = DTypeCode::parse("dtype", dtype)?.dtype();
    let (x_rows, x_len) = shape.operand("x", x.stride)?;
    let (r_rows, r_len) = shape.operand("residual", residual.stride)?;
    let device = ordinal(device)?;
    let cols = x_rows.cols;
    // SAFETY: the caller's promise on x, residual and weight.
    let p = unsafe {
        NormProblem::fused_add_rmsnorm_raw(
            dtype,
            x.ptr,
            x_len,
            x_rows,
            residual.ptr,
            r_len,
            r_rows,
            weight,
            cols,
            eps,
        )
    }?;
    // SAFETY: the caller's promise on stream.
    unsafe {
        on_stream(device, stream, |rt, s| {
            rmsnorm::ops::fused_add_rmsnorm(rt, s, &p).map(|_| ())
        })
    }
}

/// One shape to warm: a row kernel, its element type and `[rows, cols]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WarmShape {
    pub op: i32,
    pub dtype: i32,
    pub rows: i64,
    pub cols: i64,
}

/// What warm-up resolved for one shape, as `kernels plan` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warmed {
    /// `softmax`, `log_softmax`, `rmsnorm`, `fused_add_rmsnorm`, `gemm` or `moe`.
    pub kernel: &'static str,
    /// The config, as `name=value` pairs.
    pub config: String,
    /// Where it came from (`table-exact`, `default`, ...).
    pub source: String,
}

/// Upper bound on the shapes of one warm-up call; more is taken for a bad count.
pub const MAX_WARM_SHAPES: usize = 1 << 16;

/// Resolves and compiles every shape on device `device` (distinct variants compile in
/// parallel), so later launches and CUDA-graph captures of these shapes compile
/// nothing. Every shape is checked first; a bad one is an error naming
/// `shapes[i].<field>`. The first shape that fails to resolve or compile is the error.
///
/// # Safety
/// `stream` as for [`rmsnorm()`] (the online policy times candidates on it).
pub unsafe fn warm(shapes: &[WarmShape], device: i32, stream: *mut c_void) -> Result<Vec<Warmed>> {
    check_count(shapes.len())?;
    let mut checked = Vec::with_capacity(shapes.len());
    for (i, s) in shapes.iter().enumerate() {
        let at = |e| at_shape(i, e);
        let op = Op::parse("op", s.op).map_err(at)?;
        let dtype = DTypeCode::parse("dtype", s.dtype).map_err(at)?.dtype();
        let (rows, cols) = Shape {
            rows: s.rows,
            cols: s.cols,
        }
        .sizes()
        .map_err(at)?;
        let cols = u32::try_from(cols)
            .ok()
            .filter(|c| *c <= i32::MAX as u32)
            .ok_or_else(|| {
                at(Error::invalid(
                    "cols",
                    format!("{cols} exceeds the kernels' 32-bit column index"),
                ))
            })?;
        checked.push((op, dtype, rows as u64, cols));
    }
    let device = ordinal(device)?;
    // SAFETY: the caller's promise on stream.
    unsafe {
        on_stream(device, stream, |rt, s| {
            let mut out: Vec<Option<Result<Warmed>>> = vec![None; checked.len()];
            for op in Op::ALL {
                let idx: Vec<usize> = (0..checked.len()).filter(|i| checked[*i].0 == op).collect();
                if idx.is_empty() {
                    continue;
                }
                let results: Vec<Result<Warmed>> = match op {
                    Op::Softmax | Op::LogSoftmax => {
                        let keys: Vec<(SoftmaxKey, u64)> = idx
                            .iter()
                            .map(|i| {
                                (
                                    SoftmaxKey {
                                        dtype: checked[*i].1,
                                        cols: checked[*i].3,
                                    },
                                    checked[*i].2,
                                )
                            })
                            .collect();
                        let r = match op {
                            Op::Softmax => rt.warm::<Softmax>(s, &keys),
                            _ => rt.warm::<LogSoftmax>(s, &keys),
                        };
                        r.into_iter()
                            .map(|p| p.map(|p| warmed(op, &p.resolved)))
                            .collect()
                    }
                    Op::RmsNorm | Op::FusedAddRmsNorm => {
                        let keys: Vec<(RmsNormKey, u64)> = idx
                            .iter()
                            .map(|i| {
                                (
                                    RmsNormKey {
                                        dtype: checked[*i].1,
                                        cols: checked[*i].3,
                                    },
                                    checked[*i].2,
                                )
                            })
                            .collect();
                        let r = match op {
                            Op::RmsNorm => rt.warm::<RmsNorm>(s, &keys),
                            _ => rt.warm::<FusedAddRmsNorm>(s, &keys),
                        };
                        r.into_iter()
                            .map(|p| p.map(|p| warmed(op, &p.resolved)))
                            .collect()
                    }
                };
                for (i, r) in idx.into_iter().zip(results) {
                    out[i] = Some(r);
                }
            }
            out.into_iter()
                .enumerate()
                .map(|(i, r)| {
                    r.unwrap_or_else(|| Err(Error::kernel("warm", format!("shapes[{i}] was not warmed"))))
                })
                .collect()
        })
    }
}

fn warmed<C: std::fmt::Display>(op: Op, r: &kernels::Resolved<C>) -> Warmed {
    warmed_as(op.kernel(), r)
}

/// What warm-up resolved for one shape of `kernel`.
fn warmed_as<C: std::fmt::Display>(kernel: &'static str, r: &kernels::Resolved<C>) -> Warmed {
    Warmed {
        kernel,
        config: r.config.to_string(),
        source: r.source.to_string(),
    }
}

/// More shapes than [`MAX_WARM_SHAPES`] in one call is an error naming `count`.
fn check_count(count: usize) -> Result<()> {
    if count > MAX_WARM_SHAPES {
        return Err(Error::invalid(
            "count",
            format!("{count} shapes; at most {MAX_WARM_SHAPES} per call"),
        ));
    }
    Ok(())
}

/// An argument error of shape `i`'s field, named `shapes[i].<field>`.
fn at_shape(i: usize, e: Error) -> Error {
    match e {
        Error::InvalidArgument { name, reason } => Error::invalid(format!("shapes[{i}].{name}"), reason),
        other => other,
    }
}

/// Status codes (`kernels_status` in the C header): what kind of failure an error is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// An argument failed validation; nothing was launched.
    InvalidArgument = 1,
    /// No CUDA driver, no GPU, a device ordinal out of range, or a GPU older than sm_80.
    NoDevice = 2,
    /// The NVRTC library could not be loaded.
    NoCompiler = 3,
    /// NVRTC failed on a kernel variant.
    CompileFailed = 4,
    /// A launch needed a kernel that is not compiled yet while its stream captures a
    /// CUDA graph; warm the shape first.
    NotWarmed = 5,
    /// A CUDA driver call failed (including an asynchronous error from earlier work).
    Driver = 6,
    /// Anything else, a caught panic included.
    Internal = 7,
}

impl Status {
    /// Every status, in value order.
    pub const ALL: [Status; 8] = [
        Status::Ok,
        Status::InvalidArgument,
        Status::NoDevice,
        Status::NoCompiler,
        Status::CompileFailed,
        Status::NotWarmed,
        Status::Driver,
        Status::Internal,
    ];

    /// The constant's name in the C header.
    pub const fn c_name(self) -> &'static str {
        match self {
            Status::Ok => "KERNELS_OK",
            Status::InvalidArgument => "KERNELS_ERROR_INVALID_ARGUMENT",
            Status::NoDevice => "KERNELS_ERROR_NO_DEVICE",
            Status::NoCompiler => "KERNELS_ERROR_NO_COMPILER",
            Status::CompileFailed => "KERNELS_ERROR_COMPILE",
            Status::NotWarmed => "KERNELS_ERROR_NOT_WARMED",
            Status::Driver => "KERNELS_ERROR_DRIVER",
            Status::Internal => "KERNELS_ERROR_INTERNAL",
        }
    }

    /// The status of an error.
    pub fn of(e: &Error) -> Status {
        match e {
            Error::InvalidArgument { .. } => Status::InvalidArgument,
            Error::NoDriver
            | Error::NoGpu(_)
            | Error::BadOrdinal { .. }
            | Error::UnsupportedDevice { .. } => Status::NoDevice,
            Error::NoNvrtc => Status::NoCompiler,
            Error::Compile { .. } | Error::Nvrtc { .. } => Status::CompileFailed,
            Error::CompileWhileCapturing { .. } => Status::NotWarmed,
            Error::Driver { .. } | Error::LibraryPanic { .. } => Status::Driver,
            _ => Status::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: Operand = Operand {
        ptr: 0x1000_0000,
        stride: 4096,
    };
    const Y: Operand = Operand {
        ptr: 0x2000_0000,
        stride: 4096,
    };
    const SHAPE: Shape = Shape { rows: 8, cols: 4096 };
    const NULL_STREAM: *mut c_void = std::ptr::null_mut();

    fn invalid_name(r: Result<()>) -> String {
        match r {
            Err(Error::InvalidArgument { name, .. }) => name,
            other => panic!("expected an invalid argument, got {other:?}"),
        }
    }

    #[test]
    fn bad_arguments_name_the_argument_before_any_device_call() {
        // SAFETY: every call fails validation before it touches the addresses.
        unsafe {
            let bad_dtype = softmax(false, Y, X, SHAPE, 9, 1.0, 0, NULL_STREAM);
            assert_eq!(invalid_name(bad_dtype), "dtype");
            let zero_rows = softmax(false, Y, X, Shape { rows: 0, cols: 4096 }, 0, 1.0, 0, NULL_STREAM);
            assert_eq!(invalid_name(zero_rows), "rows");
            let neg_cols = rmsnorm(
                Y,
                X,
                0x3000_0000,
                Shape { rows: 1, cols: -4 },
                0,
                1e-6,
                0,
                NULL_STREAM,
            );
            assert_eq!(invalid_name(neg_cols), "cols");
            let neg_stride = rmsnorm(
                Y,
                Operand { stride: -1, ..X },
                0x3000_0000,
                SHAPE,
                0,
                1e-6,
                0,
                NULL_STREAM,
            );
            assert_eq!(invalid_name(neg_stride), "x_stride");
            let short_stride = softmax(
                false,
                Operand { stride: 10, ..Y },
                X,
                SHAPE,
                0,
                1.0,
                0,
                NULL_STREAM,
            );
            assert_eq!(invalid_name(short_stride), "y_stride");
            let huge = softmax(
                false,
                Y,
                X,
                Shape {
                    rows: i64::MAX,
                    cols: 4096,
                },
                0,
                1.0,
                0,
                NULL_STREAM,
            );
            assert_eq!(invalid_name(huge), "x");
            let null_x = softmax(false, Y, Operand { ptr: 0, ..X }, SHAPE, 0, 1.0, 0, NULL_STREAM);
            assert_eq!(invalid_name(null_x), "x");
            let null_w = rmsnorm(Y, X, 0, SHAPE, 0, 1e-6, 0, NULL_STREAM);
            assert_eq!(invalid_name(null_w), "weight");
            let bad_eps = rmsnorm(Y, X, 0x3000_0000, SHAPE, 0, f32::NAN, 0, NULL_STREAM);
            assert_eq!(invalid_name(bad_eps), "eps");
            let neg_device = softmax(false, Y, X, SHAPE, 0, 1.0, -1, NULL_STREAM);
            assert_eq!(invalid_name(neg_device), "device");
            // y starts inside x's rows: partial overlap.
            let overlap = softmax(
                false,
                Operand { ptr: X.ptr + 64, ..Y },
                X,
                SHAPE,
                0,
                1.0,
                0,
                NULL_STREAM,
            );
            assert_eq!(invalid_name(overlap), "y");
            let residual_on_x = fused_add_rmsnorm(X, X, 0x3000_0000, SHAPE, 0, 1e-6, 0, NULL_STREAM);
            assert_eq!(invalid_name(residual_on_x), "residual");
        }
    }

    #[test]
    fn warm_names_the_shape_and_field() {
        let good = WarmShape {
            op: 2,
            dtype: 0,
            rows: 16,
            cols: 4096,
        };
        let cases = [
            (WarmShape { op: 7, ..good }, "shapes[1].op"),
            (WarmShape { dtype: -1, ..good }, "shapes[1].dtype"),
            (WarmShape { rows: 0, ..good }, "shapes[1].rows"),
            (
                WarmShape {
                    cols: 1 << 40,
                    ..good
                },
                "shapes[1].cols",
            ),
        ];
        for (bad, name) in cases {
            // SAFETY: validation fails before the stream is used.
            let r = unsafe { warm(&[good, bad], 0, NULL_STREAM) };
            assert_eq!(invalid_name(r.map(|_| ())), name);
        }
    }

    #[test]
    fn codes_round_trip_and_errors_map_to_statuses() {
        for d in DTypeCode::ALL {
            assert_eq!(DTypeCode::parse("dtype", d as i32).unwrap(), d);
        }
        for o in Op::ALL {
            assert_eq!(Op::parse("op", o as i32).unwrap(), o);
        }
        assert_eq!(Status::of(&Error::NoDriver), Status::NoDevice);
        assert_eq!(Status::of(&Error::NoNvrtc), Status::NoCompiler);
        assert_eq!(Status::of(&Error::invalid("x", "bad")), Status::InvalidArgument);
        let capturing = Error::CompileWhileCapturing {
            kernel: "rmsnorm".into(),
            variant: String::new(),
        };
        assert_eq!(Status::of(&capturing), Status::NotWarmed);
        for (i, s) in Status::ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
        }
    }
}
