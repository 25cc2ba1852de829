//! Reads a DLPack capsule (`__dlpack__`'s result, legacy `dltensor` or DLPack 1.x
//! `dltensor_versioned`) without consuming it: the capsule keeps ownership and calls
//! the producer's deleter when it is collected, as the protocol asks of a consumer
//! that does not take the tensor.

use std::ffi::c_void;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

#[repr(C)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// The head of a DLPack 1.x `DLManagedTensorVersioned`, up to its tensor.
#[repr(C)]
struct DlVersionedHead {
    major: u32,
    minor: u32,
    manager_ctx: *mut c_void,
    deleter: *mut c_void,
    flags: u64,
    dl_tensor: DlTensor,
}

/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const READ_ONLY: u64 = 1;

/// More dimensions than this is taken for a corrupt capsule.
const MAX_DIMS: i32 = 64;

/// What a capsule describes: `(address, shape, strides or None, (code, bits, lanes),
/// (device type, device id), read-only)`, the address with the byte offset added.
pub type DlpackInfo = (u64, Vec<i64>, Option<Vec<i64>>, (u8, u8, u16), (i32, i32), bool);

/// The tensor described by `capsule`; `name` names the argument in errors.
pub fn info(capsule: &Bound<'_, PyAny>, name: &str) -> PyResult<DlpackInfo> {
    let bad = |why: &str| PyValueError::new_err(format!("invalid argument `{name}`: {why}"));
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| bad("__dlpack__() did not return a PyCapsule"))?;
    let (tensor, readonly) = if capsule.is_valid_checked(Some(c"dltensor_versioned")) {
        let head = capsule
            .pointer_checked(Some(c"dltensor_versioned"))?
            .cast::<DlVersionedHead>();
        // SAFETY: a valid capsule of this name holds a DLManagedTensorVersioned, whose
        // version fields come first in every 1.x layout.
        let head = unsafe { head.as_ref() };
        if head.major != 1 {
            return Err(bad(&format!(
                "DLPack version {}.{}; this package reads 1.x",
                head.major, head.minor
            )));
        }
        (&head.dl_tensor, head.flags & READ_ONLY != 0)
    } else if capsule.is_valid_checked(Some(c"dltensor")) {
        let t = capsule.pointer_checked(Some(c"dltensor"))?.cast::<DlTensor>();
        // SAFETY: a valid `dltensor` capsule holds a DLManagedTensor, whose first
        // member is its DLTensor.
        (unsafe { t.as_ref() }, false)
    } else {
        return Err(bad(
            "the capsule is neither an unconsumed `dltensor` nor `dltensor_versioned`",
        ));
    };
    if !(0..=MAX_DIMS).contains(&tensor.ndim) || (tensor.ndim > 0 && tensor.shape.is_null()) {
        return Err(bad(&format!("the capsule has {} dimensions", tensor.ndim)));
    }
    let ndim = tensor.ndim as usize;
    // SAFETY: DLPack: `shape` holds `ndim` values.
    let shape = unsafe { slice(tensor.shape, ndim) };
    let strides = (!tensor.strides.is_null()).then(|| {
        // SAFETY: DLPack: non-null `strides` holds `ndim` values.
        unsafe { slice(tensor.strides, ndim) }
    });
    let ptr = (tensor.data as u64).wrapping_add(tensor.byte_offset);
    let d = &tensor.dtype;
    Ok((
        ptr,
        shape,
        strides,
        (d.code, d.bits, d.lanes),
        (tensor.device.device_type, tensor.device.device_id),
        readonly,
    ))
}

/// # Safety
/// `p` must point to `n` readable values (any pointer when `n` is 0).
unsafe fn slice(p: *const i64, n: usize) -> Vec<i64> {
    if n == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(p, n) }.to_vec()
}
