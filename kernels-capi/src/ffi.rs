//! The `extern "C"` functions of `include/kernels.h`. Each one resets the calling
//! thread's last-error message, runs its [`crate::raw`] counterpart inside
//! `catch_unwind` (no panic crosses into C), and returns a status code; on failure
//! the message says what failed and names the bad argument.
//!
//! The types below are the header's typedefs under Rust names; `tests/header.rs`
//! parses this file and the header and fails when a prototype differs.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use kernels::core::{Error, Result};

use crate::raw::gemm::{GemmShape, GemmWarmShape, Matrix};
use crate::raw::moe::{MoeShape, MoeWarmShape, RoutingShape};
use crate::raw::{self, Operand, Shape, Status, WarmShape};

/// `kernels_status`: a [`Status`] as its `int32_t` value.
pub type KernelsStatus = i32;
/// `kernels_dtype`: a [`raw::DTypeCode`] as its `int32_t` value (an unknown value is an
/// error, never undefined behaviour, hence not a Rust enum).
pub type KernelsDtype = i32;
/// `kernels_layout`: a [`raw::gemm::LayoutCode`] as its `int32_t` value.
pub type KernelsLayout = i32;
/// `kernels_stream`: a `CUstream` / `cudaStream_t`; null is the legacy default stream.
pub type KernelsStream = *mut c_void;

/// `kernels_shape`: one shape to warm.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelsShape {
    /// A [`raw::Op`] value.
    pub op: i32,
    /// A [`raw::DTypeCode`] value.
    pub dtype: i32,
    pub rows: i64,
    pub cols: i64,
}

/// `kernels_gemm_shape`: one GEMM shape to warm.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelsGemmShape {
    /// A [`raw::DTypeCode`] value: A's and B's type.
    pub dtype: i32,
    /// A [`raw::gemm::LayoutCode`] value.
    pub layout: i32,
    pub m: i64,
    pub n: i64,
    pub k: i64,
}

/// `kernels_moe_shape`: one fused-MoE shape to warm, with its routing kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KernelsMoeShape {
    /// A [`raw::DTypeCode`] value: the hidden states', weights' and output's type.
    pub dtype: i32,
    /// A [`raw::moe::RoutingCode`] value.
    pub routing: i32,
    /// A [`raw::DTypeCode`] value: the router logits' type (unused without routing).
    pub logits_dtype: i32,
    pub topk: i32,
    pub tokens: i64,
    pub experts: i64,
    pub n: i64,
    pub k: i64,
}

/// The version of the C ABI: a change that breaks callers compiled against an
/// older header raises it (`KERNELS_ABI_VERSION` in the header).
pub const ABI_VERSION: u32 = 1;

thread_local! {
    /// The message of the last failed call on this thread; empty after a success.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // Interior NULs would cut the C string short; they cannot come from our own
    // messages but may from a driver's.
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f` as an exported call: clears the last error, catches panics, and turns
/// the result into a status code with its message.
fn call(f: impl FnOnce() -> Result<()>) -> KernelsStatus {
    set_last_error("");
    let (status, message) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return Status::Ok as i32,
        Ok(Err(e)) => (Status::of(&e), e.to_string()),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            (
                Status::Internal,
                format!("internal error (a panic, caught): {what}"),
            )
        }
    };
    set_last_error(&message);
    status as i32
}

/// The library's version, `"MAJOR.MINOR.PATCH"`; a static string.
#[no_mangle]
pub extern "C" fn kernels_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The C ABI version the library implements.
#[no_mangle]
pub extern "C" fn kernels_abi_version() -> u32 {
    ABI_VERSION
}

/// The message of the last failed call on the calling thread, or `""` when the last
/// call succeeded. Valid until the next call into the library on this thread.
#[no_mangle]
pub extern "C" fn kernels_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// The name of a status code, or `"KERNELS_ERROR_UNKNOWN"`; a static string.
#[no_mangle]
pub extern "C" fn kernels_status_name(status: KernelsStatus) -> *const c_char {
    usize::try_from(status)
        .ok()
        .and_then(|i| STATUS_NAMES.get(i))
        .map_or(c"KERNELS_ERROR_UNKNOWN".as_ptr(), |n| n.as_ptr())
}

/// [`Status::c_name`] of each status, NUL-terminated, in value order (checked in the
/// tests).
const STATUS_NAMES: [&std::ffi::CStr; 8] = [
    c"KERNELS_OK",
    c"KERNELS_ERROR_INVALID_ARGUMENT",
    c"KERNELS_ERROR_NO_DEVICE",
    c"KERNELS_ERROR_NO_COMPILER",
    c"KERNELS_ERROR_COMPILE",
    c"KERNELS_ERROR_NOT_WARMED",
    c"KERNELS_ERROR_DRIVER",
    c"KERNELS_ERROR_INTERNAL",
];

/// `y = softmax(x * scale)` per row; see the header.
///
/// # Safety
/// As [`raw::softmax`].
#[no_mangle]
pub unsafe extern "C" fn kernels_softmax(
    y: *mut c_void,
    y_stride: i64,
    x: *const c_void,
    x_stride: i64,
    rows: i64,
    cols: i64,
    dtype: KernelsDtype,
    scale: f32,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    let (y, x) = (
        Operand {
            ptr: y as u64,
            stride: y_stride,
        },
        Operand {
            ptr: x as u64,
            stride: x_stride,
        },
    );
    // SAFETY: forwarded from the caller.
    call(|| unsafe { raw::softmax(false, y, x, Shape { rows, cols }, dtype, scale, device, stream) })
}

/// `y = log_softmax(x * scale)` per row; see the header.
///
/// # Safety
/// As [`raw::softmax`].
#[no_mangle]
pub unsafe extern "C" fn kernels_log_softmax(
    y: *mut c_void,
    y_stride: i64,
    x: *const c_void,
    x_stride: i64,
    rows: i64,
    cols: i64,
    dtype: KernelsDtype,
    scale: f32,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    let (y, x) = (
        Operand {
            ptr: y as u64,
            stride: y_stride,
        },
        Operand {
            ptr: x as u64,
            stride: x_stride,
        },
    );
    // SAFETY: forwarded from the caller.
    call(|| unsafe { raw::softmax(true, y, x, Shape { rows, cols }, dtype, scale, device, stream) })
}

/// `y = x / rms(x) * weight` per row; see the header.
///
/// # Safety
/// As [`raw::rmsnorm`].
#[no_mangle]
pub unsafe extern "C" fn kernels_rmsnorm(
    y: *mut c_void,
    y_stride: i64,
    x: *const c_void,
    x_stride: i64,
    weight: *const c_void,
    rows: i64,
    cols: i64,
    dtype: KernelsDtype,
    eps: f32,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    let (y, x) = (
        Operand {
            ptr: y as u64,
            stride: y_stride,
        },
        Operand {
            ptr: x as u64,
            stride: x_stride,
        },
    );
    // SAFETY: forwarded from the caller.
    call(|| unsafe {
        raw::rmsnorm(
            y,
            x,
            weight as u64,
            Shape { rows, cols },
            dtype,
            eps,
            device,
            stream,
        )
    })
}

/// `residual += x; x = rmsnorm(residual) * weight`, in place; see the header.
///
/// # Safety
/// As [`raw::fused_add_rmsnorm`].
#[no_mangle]
pub unsafe extern "C" fn kernels_fused_add_rmsnorm(
    x: *mut c_void,
    x_stride: i64,
    residual: *mut c_void,
    residual_stride: i64,
    weight: *const c_void,
    rows: i64,
    cols: i64,
    dtype: KernelsDtype,
    eps: f32,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    let x = Operand {
        ptr: x as u64,
        stride: x_stride,
    };
    let residual = Operand {
        ptr: residual as u64,
        stride: residual_stride,
    };
    let shape = Shape { rows, cols };
    // SAFETY: forwarded from the caller.
    call(|| unsafe { raw::fused_add_rmsnorm(x, residual, weight as u64, shape, dtype, eps, device, stream) })
}

/// Resolves and compiles `count` shapes ahead of serving; see the header.
///
/// # Safety
/// `shapes` must point to `count` readable `kernels_shape`s (or be null with `count`
/// 0); `stream` as for [`raw::warm`].
#[no_mangle]
pub unsafe extern "C" fn kernels_warm(
    shapes: *const KernelsShape,
    count: usize,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    call(|| {
        // SAFETY: forwarded from the caller.
        let given = unsafe { shape_slice(shapes, count) }?;
        if given.is_empty() {
            return Ok(());
        }
        let shapes: Vec<WarmShape> = given
            .iter()
            .map(|s| WarmShape {
                op: s.op,
                dtype: s.dtype,
                rows: s.rows,
                cols: s.cols,
            })
            .collect();
        // SAFETY: forwarded from the caller.
        unsafe { raw::warm(&shapes, device, stream) }.map(|_| ())
    })
}

/// The `count` shapes at `shapes` (null allowed with count 0); a null array or a count
/// past [`raw::MAX_WARM_SHAPES`] is an error naming it.
///
/// # Safety
/// `shapes` must point to `count` readable values (or be null with `count` 0).
unsafe fn shape_slice<'a, T>(shapes: *const T, count: usize) -> Result<&'a [T]> {
    if count == 0 {
        return Ok(&[]);
    }
    if shapes.is_null() {
        return Err(Error::invalid("shapes", format!("is null with count {count}")));
    }
    if count > raw::MAX_WARM_SHAPES {
        return Err(Error::invalid(
            "count",
            format!("{count} shapes; at most {} per call", raw::MAX_WARM_SHAPES),
        ));
    }
    // SAFETY: the caller's promise: `count` readable values at `shapes`.
    Ok(unsafe { std::slice::from_raw_parts(shapes, count) })
}

/// Writes `value` through the out-pointer `bytes`, named `bytes` when null.
fn write_out(bytes: *mut usize, value: impl FnOnce() -> Result<usize>) -> Result<()> {
    if bytes.is_null() {
        return Err(Error::invalid("bytes", "is a null pointer"));
    }
    let v = value()?;
    // SAFETY: non-null; the caller's promise that it points to a writable size_t.
    unsafe { bytes.write(v) };
    Ok(())
}

/// `c = a · op(b) (+ bias)`; see the header.
///
/// # Safety
/// As [`raw::gemm::gemm`].
#[no_mangle]
pub unsafe extern "C" fn kernels_gemm(
    c: *mut c_void,
    ldc: i64,
    c_dtype: KernelsDtype,
    a: *const c_void,
    lda: i64,
    b: *const c_void,
    ldb: i64,
    layout: KernelsLayout,
    bias: *const c_void,
    m: i64,
    n: i64,
    k: i64,
    dtype: KernelsDtype,
    workspace: *mut c_void,
    workspace_bytes: usize,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    let matrix = |ptr: *const c_void, ld: i64| Matrix { ptr: ptr as u64, ld };
    let (c, a, b) = (matrix(c, ldc), matrix(a, lda), matrix(b, ldb));
    let shape = GemmShape { m, n, k };
    let ws = (workspace as u64, workspace_bytes);
    // SAFETY: forwarded from the caller.
    call(|| unsafe {
        raw::gemm::gemm(
            c,
            c_dtype,
            a,
            b,
            layout,
            bias as u64,
            shape,
            dtype,
            ws,
            device,
            stream,
        )
    })
}

/// The workspace a GEMM shape may need on a device; see the header.
///
/// # Safety
/// `bytes` must be null or point to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn kernels_gemm_workspace_bytes(
    m: i64,
    n: i64,
    k: i64,
    dtype: KernelsDtype,
    layout: KernelsLayout,
    device: i32,
    bytes: *mut usize,
) -> KernelsStatus {
    call(|| {
        write_out(bytes, || {
            raw::gemm::gemm_workspace_bytes(GemmShape { m, n, k }, dtype, layout, device)
        })
    })
}

/// Fused MoE with SiLU on the engine's or the library's routing; see the header.
///
/// # Safety
/// As [`raw::moe::fused_moe`].
#[no_mangle]
pub unsafe extern "C" fn kernels_fused_moe(
    out: *mut c_void,
    hidden: *const c_void,
    w13: *const c_void,
    w2: *const c_void,
    topk_ids: *const i32,
    topk_weights: *const f32,
    tokens: i64,
    experts: i64,
    n: i64,
    k: i64,
    topk: i64,
    dtype: KernelsDtype,
    workspace: *mut c_void,
    workspace_bytes: usize,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    let shape = MoeShape {
        tokens,
        experts,
        n,
        k,
        topk,
    };
    let ws = (workspace as u64, workspace_bytes);
    // SAFETY: forwarded from the caller.
    call(|| unsafe {
        raw::moe::fused_moe(
            out as u64,
            hidden as u64,
            w13 as u64,
            w2 as u64,
            topk_ids as u64,
            topk_weights as u64,
            shape,
            dtype,
            ws,
            device,
            stream,
        )
    })
}

/// The workspace a fused-MoE shape needs; see the header.
///
/// # Safety
/// `bytes` must be null or point to a writable `size_t`.
#[no_mangle]
pub unsafe extern "C" fn kernels_moe_workspace_bytes(
    tokens: i64,
    experts: i64,
    n: i64,
    k: i64,
    topk: i64,
    dtype: KernelsDtype,
    bytes: *mut usize,
) -> KernelsStatus {
    let shape = MoeShape {
        tokens,
        experts,
        n,
        k,
        topk,
    };
    call(|| write_out(bytes, || raw::moe::moe_workspace_bytes(shape, dtype)))
}

/// Softmax top-k routing; see the header.
///
/// # Safety
/// As [`raw::moe::route`].
#[no_mangle]
pub unsafe extern "C" fn kernels_moe_topk_softmax(
    topk_ids: *mut i32,
    topk_weights: *mut f32,
    logits: *const c_void,
    tokens: i64,
    experts: i64,
    topk: i64,
    logits_dtype: KernelsDtype,
    renormalize: i32,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    let shape = RoutingShape {
        tokens,
        experts,
        topk,
    };
    let scoring = raw::moe::softmax_scoring(renormalize != 0);
    // SAFETY: forwarded from the caller.
    call(|| unsafe {
        raw::moe::route(
            topk_ids as u64,
            topk_weights as u64,
            logits as u64,
            shape,
            logits_dtype,
            scoring,
            device,
            stream,
        )
    })
}

/// DeepSeek-V3's grouped top-k routing; see the header.
///
/// # Safety
/// As [`raw::moe::route`]; `bias` null or `experts` readable f32 of the device.
#[no_mangle]
pub unsafe extern "C" fn kernels_moe_grouped_topk(
    topk_ids: *mut i32,
    topk_weights: *mut f32,
    logits: *const c_void,
    bias: *const f32,
    tokens: i64,
    experts: i64,
    topk: i64,
    n_group: i32,
    topk_group: i32,
    renormalize: i32,
    scale: f32,
    logits_dtype: KernelsDtype,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    let shape = RoutingShape {
        tokens,
        experts,
        topk,
    };
    call(|| {
        let scoring = raw::moe::grouped(n_group, topk_group, renormalize != 0, scale, bias as u64, experts)?;
        // SAFETY: forwarded from the caller.
        unsafe {
            raw::moe::route(
                topk_ids as u64,
                topk_weights as u64,
                logits as u64,
                shape,
                logits_dtype,
                scoring,
                device,
                stream,
            )
        }
    })
}

/// Resolves and compiles `count` GEMM shapes ahead of serving; see the header.
///
/// # Safety
/// As [`kernels_warm`], with `kernels_gemm_shape`s.
#[no_mangle]
pub unsafe extern "C" fn kernels_warm_gemm(
    shapes: *const KernelsGemmShape,
    count: usize,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    call(|| {
        // SAFETY: forwarded from the caller.
        let given = unsafe { shape_slice(shapes, count) }?;
        if given.is_empty() {
            return Ok(());
        }
        let shapes: Vec<GemmWarmShape> = given
            .iter()
            .map(|s| GemmWarmShape {
                dtype: s.dtype,
                layout: s.layout,
                m: s.m,
                n: s.n,
                k: s.k,
            })
            .collect();
        // SAFETY: forwarded from the caller.
        unsafe { raw::gemm::warm_gemm(&shapes, device, stream) }.map(|_| ())
    })
}

/// Resolves and compiles `count` fused-MoE shapes (and their routing kernels) ahead of
/// serving; see the header.
///
/// # Safety
/// As [`kernels_warm`], with `kernels_moe_shape`s.
#[no_mangle]
pub unsafe extern "C" fn kernels_warm_moe(
    shapes: *const KernelsMoeShape,
    count: usize,
    device: i32,
    stream: KernelsStream,
) -> KernelsStatus {
    call(|| {
        // SAFETY: forwarded from the caller.
        let given = unsafe { shape_slice(shapes, count) }?;
        if given.is_empty() {
            return Ok(());
        }
        let shapes: Vec<MoeWarmShape> = given
            .iter()
            .map(|s| MoeWarmShape {
                dtype: s.dtype,
                routing: s.routing,
                logits_dtype: s.logits_dtype,
                topk: s.topk,
                tokens: s.tokens,
                experts: s.experts,
                n: s.n,
                k: s.k,
            })
            .collect();
        // SAFETY: forwarded from the caller.
        unsafe { raw::moe::warm_moe(&shapes, device, stream) }.map(|_| ())
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    fn last_error() -> String {
        // SAFETY: the library's pointer is a valid C string until the next call.
        unsafe { CStr::from_ptr(kernels_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn status_names_match_the_statuses() {
        for (s, n) in Status::ALL.iter().zip(STATUS_NAMES) {
            assert_eq!(s.c_name().as_bytes(), n.to_bytes());
            // SAFETY: a static string.
            let got = unsafe { CStr::from_ptr(kernels_status_name(*s as i32)) };
            assert_eq!(got.to_bytes(), s.c_name().as_bytes());
        }
        // SAFETY: a static string.
        let unknown = unsafe { CStr::from_ptr(kernels_status_name(99)) };
        assert_eq!(unknown.to_bytes(), b"KERNELS_ERROR_UNKNOWN");
    }

    #[test]
    fn an_error_sets_the_message_and_the_next_call_clears_it() {
        let null = std::ptr::null_mut();
        // SAFETY: validation fails before anything is dereferenced.
        let s = unsafe { kernels_softmax(null, 8, null, 8, 1, 8, 0, 1.0, 0, null) };
        assert_eq!(s, Status::InvalidArgument as i32);
        assert!(last_error().contains("`x`"), "{}", last_error());
        // SAFETY: count 0 reads nothing.
        assert_eq!(unsafe { kernels_warm(std::ptr::null(), 0, 0, null) }, 0);
        assert_eq!(last_error(), "");
    }

    #[test]
    fn the_shape_structs_have_the_header_sizes() {
        // The C++ probe of tests/c_program.rs asserts the same sizes of the header's.
        assert_eq!(std::mem::size_of::<KernelsShape>(), 24);
        assert_eq!(std::mem::size_of::<KernelsGemmShape>(), 32);
        assert_eq!(std::mem::size_of::<KernelsMoeShape>(), 48);
    }

    #[test]
    fn a_panic_is_a_status_not_an_unwind() {
        let s = call(|| panic!("boom"));
        assert_eq!(s, Status::Internal as i32);
        assert!(last_error().contains("boom"), "{}", last_error());
    }
}
