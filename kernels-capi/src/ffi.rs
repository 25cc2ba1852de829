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

use crate::raw::{self, Operand, Shape, Status, WarmShape};

/// `kernels_status`: a [`Status`] as its `int32_t` value.
pub type KernelsStatus = i32;
/// `kernels_dtype`: a [`raw::DTypeCode`] as its `int32_t` value (an unknown value is an
/// error, never undefined behaviour, hence not a Rust enum).
pub type KernelsDtype = i32;
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
        if count == 0 {
            return Ok(());
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
        // SAFETY: the caller's promise: `count` readable shapes at `shapes`.
        let given = unsafe { std::slice::from_raw_parts(shapes, count) };
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
    fn a_panic_is_a_status_not_an_unwind() {
        let s = call(|| panic!("boom"));
        assert_eq!(s, Status::Internal as i32);
        assert!(last_error().contains("boom"), "{}", last_error());
    }
}
