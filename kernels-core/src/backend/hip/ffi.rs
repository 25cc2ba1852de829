//! The unsafe edge of the HIP backend: the HIP runtime calls (linked through hip-sys),
//! hipRTC and the code object manager (both loaded at run time), and the handle types
//! the safe layer holds. Everything here is `pub(crate)`; every `unsafe` block says
//! what makes it sound. The modules above this one are safe Rust.
//!
//! ABI choices, all checked against Debian's ROCm 5.2 headers (`/usr/include/hip`) and
//! ROCm 6.2's `hip_runtime_api.h`:
//!
//! - Calls are declared here with `c_int` results, not through hip-sys's functions:
//!   hip-sys returns `hipError_t` as a Rust enum generated from one ROCm version, and a
//!   code that enum lacks (ROCm 6.2 added 911 and 912) would be undefined behaviour.
//!   hip-sys still does the linking (its build script finds `HIP_PATH` and links
//!   `libamdhip64`) and gives the opaque handle types.
//! - Device attributes are the integer values below, identical in both headers.
//! - `gcnArchName` has no attribute that works on ROCm 6 (its attribute became
//!   unused), so it is read from the device properties struct, whose layout depends on
//!   the runtime's major version; see [`gcn_arch_name`].

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::sync::OnceLock;

use hip_sys::hiprt::{hipEvent_t, hipFunction_t, hipModule_t, hipStream_t};

use crate::{Error, Result};

// hipDeviceAttribute_t values. Verified identical in ROCm 5.2 (Debian's
// /usr/include/hip/hip_runtime_api.h) and ROCm 6.2 (rocm-6.2 hip_runtime_api.h):
// ROCm 6 kept every value and only renamed retired entries to `Unused*`.
pub(crate) const ATTR_L2_CACHE_SIZE: c_int = 19;
pub(crate) const ATTR_MAX_GRID_DIM_X: c_int = 29;
pub(crate) const ATTR_MAX_GRID_DIM_Y: c_int = 30;
pub(crate) const ATTR_MAX_GRID_DIM_Z: c_int = 31;
pub(crate) const ATTR_MAX_THREADS_PER_BLOCK: c_int = 56;
pub(crate) const ATTR_MULTIPROCESSOR_COUNT: c_int = 63;
pub(crate) const ATTR_MAX_REGISTERS_PER_BLOCK: c_int = 71;
pub(crate) const ATTR_MAX_REGISTERS_PER_MULTIPROCESSOR: c_int = 72;
pub(crate) const ATTR_MAX_SHARED_MEMORY_PER_BLOCK: c_int = 74;
pub(crate) const ATTR_WARP_SIZE: c_int = 87;
/// AMD-specific: LDS per compute unit.
pub(crate) const ATTR_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: c_int = 10002;

const HIP_SUCCESS: c_int = 0;
const HIPRTC_SUCCESS: c_int = 0;
/// hipMemcpyKind values (stable since HIP 1.x).
const MEMCPY_HOST_TO_DEVICE: c_int = 1;
const MEMCPY_DEVICE_TO_HOST: c_int = 2;
const MEMCPY_DEVICE_TO_DEVICE: c_int = 3;
/// `hipStreamCaptureStatusNone`.
const CAPTURE_STATUS_NONE: c_int = 0;

extern "C" {
    fn hipGetDeviceCount(count: *mut c_int) -> c_int;
    fn hipRuntimeGetVersion(version: *mut c_int) -> c_int;
    fn hipSetDevice(ordinal: c_int) -> c_int;
    fn hipDeviceGet(device: *mut c_int, ordinal: c_int) -> c_int;
    fn hipDeviceGetName(name: *mut c_char, len: c_int, device: c_int) -> c_int;
    fn hipDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) -> c_int;
    fn hipDeviceTotalMem(bytes: *mut usize, device: c_int) -> c_int;
    /// The HIP 4.x/5.x symbol; its struct is the layout of those headers (ROCm 6 keeps
    /// the symbol with the same layout, as `hipDeviceProp_tR0000`).
    fn hipGetDeviceProperties(prop: *mut c_void, device: c_int) -> c_int;
    fn hipGetErrorName(error: c_int) -> *const c_char;
    fn hipGetErrorString(error: c_int) -> *const c_char;

    fn hipStreamCreateWithFlags(stream: *mut hipStream_t, flags: c_uint) -> c_int;
    fn hipStreamDestroy(stream: hipStream_t) -> c_int;
    fn hipStreamSynchronize(stream: hipStream_t) -> c_int;

    fn hipMalloc(ptr: *mut *mut c_void, bytes: usize) -> c_int;
    fn hipFree(ptr: *mut c_void) -> c_int;
    fn hipMemcpy(dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int) -> c_int;
    fn hipMemsetAsync(dst: *mut c_void, value: c_int, bytes: usize, stream: hipStream_t) -> c_int;
    fn hipMemcpyAsync(
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
        kind: c_int,
        stream: hipStream_t,
    ) -> c_int;
    fn hipStreamIsCapturing(stream: hipStream_t, status: *mut c_int) -> c_int;

    fn hipModuleLoadData(module: *mut hipModule_t, image: *const c_void) -> c_int;
    fn hipModuleUnload(module: hipModule_t) -> c_int;
    fn hipModuleGetFunction(function: *mut hipFunction_t, module: hipModule_t, name: *const c_char) -> c_int;
    fn hipModuleLaunchKernel(
        f: hipFunction_t,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        smem_bytes: c_uint,
        stream: hipStream_t,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> c_int;

    fn hipEventCreate(event: *mut hipEvent_t) -> c_int;
    fn hipEventDestroy(event: hipEvent_t) -> c_int;
    fn hipEventRecord(event: hipEvent_t, stream: hipStream_t) -> c_int;
    fn hipEventSynchronize(event: hipEvent_t) -> c_int;
    fn hipEventElapsedTime(ms: *mut f32, start: hipEvent_t, end: hipEvent_t) -> c_int;
}

/// `hipStreamNonBlocking`.
const STREAM_NON_BLOCKING: c_uint = 1;

fn cstr_lossy(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: HIP and hipRTC return static NUL-terminated strings from their error
    // name/string calls; `p` is non-null.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// `hipGetErrorName: hipGetErrorString (code)`.
fn describe(code: c_int) -> String {
    // SAFETY: both calls accept any int and return a static string (or null).
    let (name, text) = unsafe { (hipGetErrorName(code), hipGetErrorString(code)) };
    let name = cstr_lossy(name).unwrap_or_else(|| "hipError".into());
    let text = cstr_lossy(text).unwrap_or_default();
    format!("{name} ({code}): {text}")
}

fn check(call: &'static str, code: c_int) -> Result<()> {
    if code == HIP_SUCCESS {
        Ok(())
    } else {
        Err(Error::Hip {
            call,
            message: describe(code),
        })
    }
}

/// `hipGetDeviceCount`. No usable device (an error from the runtime, or zero devices)
/// is [`Error::NoHipDevice`].
pub(crate) fn device_count() -> Result<usize> {
    let mut n: c_int = 0;
    // SAFETY: writes one int through a valid pointer.
    let code = unsafe { hipGetDeviceCount(&mut n) };
    if code != HIP_SUCCESS {
        return Err(Error::NoHipDevice(format!(
            "hipGetDeviceCount returned {}",
            describe(code)
        )));
    }
    if n <= 0 {
        return Err(Error::NoHipDevice("the HIP runtime reports 0 devices".into()));
    }
    Ok(n as usize)
}

/// `hipRuntimeGetVersion` as (major, minor, patch), from `major * 10_000_000 +
/// minor * 100_000 + patch` (HIP_VERSION's encoding). Needs no device.
pub(crate) fn runtime_version() -> Result<(i32, i32, i32)> {
    let mut v: c_int = 0;
    // SAFETY: writes one int through a valid pointer.
    check("hipRuntimeGetVersion", unsafe { hipRuntimeGetVersion(&mut v) })?;
    Ok((v / 10_000_000, (v / 100_000) % 100, v % 100_000))
}

/// `hipSetDevice`: makes `ordinal` the calling thread's device.
pub(crate) fn set_device(ordinal: usize) -> Result<()> {
    // SAFETY: plain int argument; the runtime validates the ordinal.
    check("hipSetDevice", unsafe { hipSetDevice(ordinal as c_int) })
}

/// `hipDeviceGet`: the device handle of `ordinal`.
pub(crate) fn device_handle(ordinal: usize) -> Result<c_int> {
    let mut d: c_int = 0;
    // SAFETY: writes one int through a valid pointer.
    check("hipDeviceGet", unsafe { hipDeviceGet(&mut d, ordinal as c_int) })?;
    Ok(d)
}

/// `hipDeviceGetName`.
pub(crate) fn device_name(device: c_int) -> Result<String> {
    let mut buf = [0 as c_char; 256];
    // SAFETY: the buffer holds `len` chars; the runtime NUL-terminates within it.
    check("hipDeviceGetName", unsafe {
        hipDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, device)
    })?;
    buf[buf.len() - 1] = 0;
    Ok(cstr_lossy(buf.as_ptr()).unwrap_or_default())
}

/// `hipDeviceGetAttribute` for one of the `ATTR_*` values above.
pub(crate) fn attribute(device: c_int, attr: c_int) -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: writes one int; `attr` is a value both supported headers define.
    check("hipDeviceGetAttribute", unsafe {
        hipDeviceGetAttribute(&mut v, attr, device)
    })?;
    Ok(v)
}

/// `hipDeviceTotalMem`.
pub(crate) fn total_memory(device: c_int) -> Result<u64> {
    let mut b: usize = 0;
    // SAFETY: writes one size_t through a valid pointer.
    check("hipDeviceTotalMem", unsafe { hipDeviceTotalMem(&mut b, device) })?;
    Ok(b as u64)
}

/// Where a properties struct keeps what [`gcn_arch_name`] reads and cross-checks.
struct PropLayout {
    what: &'static str,
    total_global_mem: usize,
    gcn_arch_name: usize,
}

/// HIP 4.x/5.x `hipDeviceProp_t` (ROCm 6's `hipDeviceProp_tR0000`): offsets computed
/// with `offsetof` against Debian's ROCm 5.2 header (struct size 792).
const LAYOUT_R0000: PropLayout = PropLayout {
    what: "hipDeviceProp_t of HIP 5 (R0000)",
    total_global_mem: 256,
    gcn_arch_name: 396,
};

/// ROCm 6's `hipDeviceProp_tR0600`: offsets computed with `offsetof` against the
/// rocm-6.2 header (struct size 1472). The versioned name freezes the layout.
const LAYOUT_R0600: PropLayout = PropLayout {
    what: "hipDeviceProp_tR0600 of HIP 6",
    total_global_mem: 288,
    gcn_arch_name: 1160,
};

/// Bytes handed to the properties call: well over either struct (792 and 1472 bytes),
/// 8-byte aligned.
const PROP_BUFFER_WORDS: usize = 1024;

type GetPropsFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// The device's `gcnArchName` (`gfx942:sramecc+:xnack-`), read version-checked:
/// `hipRuntimeGetVersion` picks the properties call and struct layout (HIP 4/5:
/// `hipGetDeviceProperties` with the R0000 layout; HIP 6 and later:
/// `hipGetDevicePropertiesR0600`, looked up at run time because HIP 5 lacks it). The
/// struct lands in an 8 KiB buffer, larger than any known layout, and is trusted only
/// when its name matches `hipDeviceGetName`, its memory size matches
/// `hipDeviceTotalMem`, and the arch name is a NUL-terminated `gfx...` string;
/// otherwise the error says the layout is unknown.
pub(crate) fn gcn_arch_name(device: c_int, ordinal: usize, hip_major: i32) -> Result<String> {
    let (layout, call, get): (PropLayout, &'static str, GetPropsFn) = match hip_major {
        4 | 5 => (LAYOUT_R0000, "hipGetDeviceProperties", hipGetDeviceProperties),
        m if m >= 6 => {
            // SAFETY: the symbol, where present, has the C signature
            // `hipError_t (hipDeviceProp_tR0600*, int)`, matching `GetPropsFn`.
            let f = unsafe { process_symbol::<GetPropsFn>(b"hipGetDevicePropertiesR0600\0") };
            match f {
                Some(f) => (LAYOUT_R0600, "hipGetDevicePropertiesR0600", f),
                None => {
                    return Err(Error::Hip {
                        call: "hipGetDevicePropertiesR0600",
                        message: format!("HIP {m}.x runtime does not export it; gcnArchName cannot be read"),
                    })
                }
            }
        }
        m => {
            return Err(Error::Hip {
                call: "hipGetDeviceProperties",
                message: format!("HIP major version {m} has no known device-properties layout"),
            })
        }
    };
    let mut buf = vec![0u64; PROP_BUFFER_WORDS];
    // SAFETY: `buf` is 8 KiB, 8-byte aligned and zeroed, larger than the struct either
    // call writes; the device ordinal is validated by the runtime.
    check(call, unsafe {
        get(buf.as_mut_ptr() as *mut c_void, ordinal as c_int)
    })?;
    let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_le_bytes()).collect();
    let c_string_at = |offset: usize, max: usize| -> Option<String> {
        let field = &bytes[offset..offset + max];
        let end = field.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&field[..end]).ok().map(str::to_string)
    };
    let mut mem = [0u8; 8];
    mem.copy_from_slice(&bytes[layout.total_global_mem..layout.total_global_mem + 8]);
    let prop_mem = u64::from_le_bytes(mem);
    let prop_name = c_string_at(0, 256);
    let arch = c_string_at(layout.gcn_arch_name, 256);
    let name = device_name(device)?;
    let mem = total_memory(device)?;
    match arch {
        Some(a) if a.starts_with("gfx") && prop_name.as_deref() == Some(name.as_str()) && prop_mem == mem => {
            Ok(a)
        }
        _ => Err(Error::Hip {
            call,
            message: format!(
                "the device properties do not match the {} layout (name {prop_name:?} vs `{name}`, memory \
                 {prop_mem} vs {mem} bytes, arch {arch:?}); gcnArchName cannot be read safely",
                layout.what
            ),
        }),
    }
}

/// A symbol of a library already loaded in the process (the linked libamdhip64).
///
/// # Safety
/// `T` must be the symbol's true (function pointer) type.
unsafe fn process_symbol<T: Copy>(name: &[u8]) -> Option<T> {
    let this = libloading::os::unix::Library::this();
    // SAFETY: forwarded to the caller (the type); `this` stays loaded for the process.
    unsafe { this.get::<T>(name) }.ok().map(|s| *s)
}

// ---- streams, memory, modules, events --------------------------------------------

/// A stream handle. HIP handles are opaque tokens the runtime accepts from any thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamHandle(pub(crate) hipStream_t);
// SAFETY: see the type's doc: an opaque, thread-agnostic runtime token.
unsafe impl Send for StreamHandle {}
// SAFETY: as above; no shared mutable Rust state behind it.
unsafe impl Sync for StreamHandle {}

/// A module handle (see [`StreamHandle`] on threads).
#[derive(Debug)]
pub(crate) struct ModuleHandle(hipModule_t);
// SAFETY: an opaque runtime token; unloaded once, in Drop.
unsafe impl Send for ModuleHandle {}
// SAFETY: as above.
unsafe impl Sync for ModuleHandle {}

/// A function handle inside a loaded module.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FunctionHandle(hipFunction_t);
// SAFETY: an opaque runtime token, valid while its module is loaded (the safe layer
// keeps the module alive beside it).
unsafe impl Send for FunctionHandle {}
// SAFETY: as above.
unsafe impl Sync for FunctionHandle {}

/// An event handle.
#[derive(Debug)]
pub(crate) struct EventHandle(hipEvent_t);
// SAFETY: an opaque runtime token; destroyed once, in Drop.
unsafe impl Send for EventHandle {}

/// A new non-blocking stream on the calling thread's device.
pub(crate) fn stream_create() -> Result<StreamHandle> {
    let mut s: hipStream_t = std::ptr::null_mut();
    // SAFETY: writes one handle through a valid pointer.
    check("hipStreamCreateWithFlags", unsafe {
        hipStreamCreateWithFlags(&mut s, STREAM_NON_BLOCKING)
    })?;
    Ok(StreamHandle(s))
}

/// Destroys a stream created by [`stream_create`] (once).
pub(crate) fn stream_destroy(s: StreamHandle) {
    // SAFETY: the caller owns `s` and destroys it exactly once (in Drop).
    let _ = unsafe { hipStreamDestroy(s.0) };
}

/// `hipStreamSynchronize`.
pub(crate) fn stream_synchronize(s: StreamHandle) -> Result<()> {
    // SAFETY: `s` is a live stream (or null, the default stream).
    check("hipStreamSynchronize", unsafe { hipStreamSynchronize(s.0) })
}

/// `hipMalloc` of `bytes` (at least 1) on the calling thread's device.
pub(crate) fn malloc(bytes: usize) -> Result<u64> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: writes one pointer through a valid pointer.
    check("hipMalloc", unsafe { hipMalloc(&mut p, bytes.max(1)) })?;
    Ok(p as u64)
}

/// `hipFree` of a pointer from [`malloc`] (once).
pub(crate) fn free(ptr: u64) {
    // SAFETY: the caller owns `ptr`, from `malloc`, and frees it exactly once.
    let _ = unsafe { hipFree(ptr as *mut c_void) };
}

/// Copies `src` to device memory at `dst` (synchronous).
///
/// # Safety
/// `dst` must be device memory valid for `src.len()` bytes.
pub(crate) unsafe fn copy_to_device(dst: u64, src: &[u8]) -> Result<()> {
    // SAFETY: `src` is valid for its length; `dst` per the caller's contract.
    check("hipMemcpy", unsafe {
        hipMemcpy(
            dst as *mut c_void,
            src.as_ptr() as *const c_void,
            src.len(),
            MEMCPY_HOST_TO_DEVICE,
        )
    })
}

/// Copies device memory at `src` into `dst` (synchronous).
///
/// # Safety
/// `src` must be device memory valid for `dst.len()` bytes.
pub(crate) unsafe fn copy_to_host(dst: &mut [u8], src: u64) -> Result<()> {
    // SAFETY: `dst` is valid for its length; `src` per the caller's contract.
    check("hipMemcpy", unsafe {
        hipMemcpy(
            dst.as_mut_ptr() as *mut c_void,
            src as *const c_void,
            dst.len(),
            MEMCPY_DEVICE_TO_HOST,
        )
    })
}

/// Zeroes `bytes` at `dst` on `stream`.
///
/// # Safety
/// `dst` must be device memory valid for `bytes` bytes until the memset runs.
pub(crate) unsafe fn memset_zero(dst: u64, bytes: usize, stream: StreamHandle) -> Result<()> {
    // SAFETY: per the caller's contract.
    check("hipMemsetAsync", unsafe {
        hipMemsetAsync(dst as *mut c_void, 0, bytes, stream.0)
    })
}

/// Copies `bytes` from device memory at `src` to device memory at `dst` on `stream`.
///
/// # Safety
/// Both must be device memory valid for `bytes` bytes until the copy runs, and must
/// not overlap.
pub(crate) unsafe fn copy_dtod(dst: u64, src: u64, bytes: usize, stream: StreamHandle) -> Result<()> {
    // SAFETY: per the caller's contract.
    check("hipMemcpyAsync", unsafe {
        hipMemcpyAsync(
            dst as *mut c_void,
            src as *const c_void,
            bytes,
            MEMCPY_DEVICE_TO_DEVICE,
            stream.0,
        )
    })
}

/// Whether `stream` is capturing a graph (active or invalidated capture).
pub(crate) fn stream_is_capturing(s: StreamHandle) -> Result<bool> {
    let mut status: c_int = CAPTURE_STATUS_NONE;
    // SAFETY: `s` is a live stream; writes one enum value (an int) through a valid pointer.
    check("hipStreamIsCapturing", unsafe {
        hipStreamIsCapturing(s.0, &mut status)
    })?;
    Ok(status != CAPTURE_STATUS_NONE)
}

/// `hipModuleLoadData` on the calling thread's device. The runtime copies the image.
pub(crate) fn module_load(image: &[u8]) -> Result<ModuleHandle> {
    if image.is_empty() {
        return Err(Error::invalid("image", "is empty"));
    }
    let mut m: hipModule_t = std::ptr::null_mut();
    // SAFETY: `image` is a readable buffer; the runtime parses it as an ELF code
    // object, reading within the sizes the ELF headers give, and rejects bad input
    // with an error code.
    check("hipModuleLoadData", unsafe {
        hipModuleLoadData(&mut m, image.as_ptr() as *const c_void)
    })?;
    Ok(ModuleHandle(m))
}

impl Drop for ModuleHandle {
    fn drop(&mut self) {
        // SAFETY: the module was loaded by `module_load` and is unloaded once, here.
        let _ = unsafe { hipModuleUnload(self.0) };
    }
}

/// `hipModuleGetFunction`.
pub(crate) fn module_function(module: &ModuleHandle, entry: &str) -> Result<FunctionHandle> {
    let name = CString::new(entry).map_err(|_| Error::invalid("entry", "contains a NUL byte"))?;
    let mut f: hipFunction_t = std::ptr::null_mut();
    // SAFETY: `module` is loaded; `name` is a NUL-terminated string.
    check("hipModuleGetFunction", unsafe {
        hipModuleGetFunction(&mut f, module.0, name.as_ptr())
    })?;
    Ok(FunctionHandle(f))
}

/// `hipModuleLaunchKernel` with the `kernelParams` array form.
///
/// # Safety
/// `params` must hold one pointer to each kernel argument's value, matching the
/// kernel's signature; every device pointer among the values must be valid for what
/// the kernel does; `stream` must be a live stream of the function's device; the
/// function's module must stay loaded until the kernel has run.
pub(crate) unsafe fn launch(
    f: FunctionHandle,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem_bytes: u32,
    stream: StreamHandle,
    params: &mut [*mut c_void],
) -> Result<()> {
    let params_ptr = if params.is_empty() {
        std::ptr::null_mut()
    } else {
        params.as_mut_ptr()
    };
    // SAFETY: per the caller's contract; `extra` is null (the params form is used).
    check("hipModuleLaunchKernel", unsafe {
        hipModuleLaunchKernel(
            f.0,
            grid.0,
            grid.1,
            grid.2,
            block.0,
            block.1,
            block.2,
            smem_bytes,
            stream.0,
            params_ptr,
            std::ptr::null_mut(),
        )
    })
}

/// `hipEventCreate` (timing enabled) on the calling thread's device.
pub(crate) fn event_create() -> Result<EventHandle> {
    let mut e: hipEvent_t = std::ptr::null_mut();
    // SAFETY: writes one handle through a valid pointer.
    check("hipEventCreate", unsafe { hipEventCreate(&mut e) })?;
    Ok(EventHandle(e))
}

impl Drop for EventHandle {
    fn drop(&mut self) {
        // SAFETY: created by `event_create`, destroyed once, here.
        let _ = unsafe { hipEventDestroy(self.0) };
    }
}

/// `hipEventRecord` on `stream`.
pub(crate) fn event_record(e: &EventHandle, stream: StreamHandle) -> Result<()> {
    // SAFETY: `e` is live; `stream` is a live stream of the event's device.
    check("hipEventRecord", unsafe { hipEventRecord(e.0, stream.0) })
}

/// `hipEventSynchronize`.
pub(crate) fn event_synchronize(e: &EventHandle) -> Result<()> {
    // SAFETY: `e` is live.
    check("hipEventSynchronize", unsafe { hipEventSynchronize(e.0) })
}

/// `hipEventElapsedTime` in milliseconds between two recorded events.
pub(crate) fn event_elapsed_ms(start: &EventHandle, end: &EventHandle) -> Result<f32> {
    let mut ms = 0f32;
    // SAFETY: both events are live; writes one float.
    check("hipEventElapsedTime", unsafe {
        hipEventElapsedTime(&mut ms, start.0, end.0)
    })?;
    Ok(ms)
}

// ---- hipRTC, loaded at run time ---------------------------------------------------

/// The library names tried for hipRTC, in order. ROCm 6 ships `libhiprtc.so`; ROCm 5
/// (Debian's 5.2 included) has the `hiprtc*` symbols in `libamdhip64`.
pub(crate) const HIPRTC_LIBRARIES: &[&str] = &[
    "libhiprtc.so",
    "libhiprtc.so.6",
    "libhiprtc.so.5",
    "libamdhip64.so",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
];

type Program = *mut c_void;

/// The hipRTC entry points, resolved from the first library of [`HIPRTC_LIBRARIES`]
/// that loads and has them all.
pub(crate) struct HipRtc {
    /// The library name that was loaded.
    pub(crate) library: &'static str,
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    log: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    code_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    code: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut Program) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    // Keeps the function pointers above valid; never unloaded before them.
    _lib: libloading::Library,
}

impl std::fmt::Debug for HipRtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipRtc").field("library", &self.library).finish()
    }
}

/// hipRTC, loaded once per process. The error names every library tried and why it
/// was not used.
pub(crate) fn hiprtc() -> Result<&'static HipRtc> {
    static RTC: OnceLock<std::result::Result<HipRtc, String>> = OnceLock::new();
    RTC.get_or_init(load_hiprtc)
        .as_ref()
        .map_err(|tried| Error::NoHipRtc(tried.clone()))
}

fn load_hiprtc() -> std::result::Result<HipRtc, String> {
    let mut tried = Vec::new();
    for &name in HIPRTC_LIBRARIES {
        // SAFETY: loading a ROCm library runs its initialisers, which only set up
        // the library itself.
        let lib = match unsafe { libloading::Library::new(name) } {
            Ok(l) => l,
            Err(e) => {
                tried.push(format!("{name} ({e})"));
                continue;
            }
        };
        // SAFETY: each symbol is looked up with the C signature of ROCm's hiprtc.h,
        // identical in ROCm 5.2 and 6.2.
        match unsafe { resolve_hiprtc(name, lib) } {
            Ok(rtc) => return Ok(rtc),
            Err(e) => tried.push(format!("{name} ({e})")),
        }
    }
    Err(tried.join("; "))
}

/// # Safety
/// The function pointer types must be the symbols' C signatures.
unsafe fn resolve_hiprtc(
    name: &'static str,
    lib: libloading::Library,
) -> std::result::Result<HipRtc, String> {
    macro_rules! sym {
        ($s:literal) => {
            // SAFETY: forwarded to the caller; the pointer is copied out and kept
            // valid by storing `lib` beside it.
            *unsafe { lib.get($s) }
                .map_err(|e| format!("no {}: {e}", String::from_utf8_lossy(&$s[..$s.len() - 1])))?
        };
    }
    Ok(HipRtc {
        library: name,
        version: sym!(b"hiprtcVersion\0"),
        create: sym!(b"hiprtcCreateProgram\0"),
        compile: sym!(b"hiprtcCompileProgram\0"),
        log_size: sym!(b"hiprtcGetProgramLogSize\0"),
        log: sym!(b"hiprtcGetProgramLog\0"),
        code_size: sym!(b"hiprtcGetCodeSize\0"),
        code: sym!(b"hiprtcGetCode\0"),
        destroy: sym!(b"hiprtcDestroyProgram\0"),
        error_string: sym!(b"hiprtcGetErrorString\0"),
        _lib: lib,
    })
}

impl HipRtc {
    fn error(&self, call: &'static str, kernel: &str, code: c_int) -> Error {
        // SAFETY: accepts any int; returns a static string or null.
        let text = cstr_lossy(unsafe { (self.error_string)(code) }).unwrap_or_default();
        Error::HipRtc {
            call,
            kernel: kernel.to_string(),
            message: format!("{text} ({code})"),
        }
    }

    /// `hiprtcVersion`.
    pub(crate) fn version(&self) -> Result<(i32, i32)> {
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: writes two ints through valid pointers.
        let r = unsafe { (self.version)(&mut major, &mut minor) };
        if r != HIPRTC_SUCCESS {
            return Err(self.error("hiprtcVersion", "", r));
        }
        Ok((major, minor))
    }

    /// Compiles `code` (named `name`) with `headers` available to `#include` and
    /// `options`. `Ok(Err(log))` is a compile error with hipRTC's log; `Err` is a
    /// failure of hipRTC itself. Programs are independent, so this is thread-safe.
    pub(crate) fn compile(
        &self,
        name: &str,
        code: &str,
        headers: &[(&str, &str)],
        options: &[String],
    ) -> Result<std::result::Result<Vec<u8>, String>> {
        let text = crate::backend::ProgramText::new(code, &format!("{name}.hip"), headers, options)?;
        let (text_ptrs, name_ptrs) = text.header_arrays();

        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: every pointer is a live NUL-terminated string owned above; both
        // header arrays have `headers.len()` entries (null when empty).
        let r = unsafe {
            (self.create)(
                &mut prog,
                text.code.as_ptr(),
                text.name.as_ptr(),
                text.headers() as c_int,
                text_ptrs,
                name_ptrs,
            )
        };
        if r != HIPRTC_SUCCESS {
            return Err(self.error("hiprtcCreateProgram", name, r));
        }
        let guard = ProgramGuard { rtc: self, prog };
        // SAFETY: `prog` is live; the options array has `text.options.len()` strings.
        let r = unsafe { (self.compile)(guard.prog, text.options.len() as c_int, text.options.as_ptr()) };
        if r != HIPRTC_SUCCESS {
            // SAFETY: accepts any int; returns a static string or null.
            let what = cstr_lossy(unsafe { (self.error_string)(r) }).unwrap_or_default();
            let log = self.log_of(&guard).unwrap_or_else(|e| format!("(no log: {e})"));
            return Ok(Err(format!("{what}\n{log}")));
        }
        let mut size = 0usize;
        // SAFETY: `prog` is live and compiled; writes one size_t.
        let r = unsafe { (self.code_size)(guard.prog, &mut size) };
        if r != HIPRTC_SUCCESS {
            return Err(self.error("hiprtcGetCodeSize", name, r));
        }
        if size == 0 {
            return Err(Error::HipRtc {
                call: "hiprtcGetCodeSize",
                kernel: name.to_string(),
                message: "the compile succeeded but produced an empty code object".into(),
            });
        }
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` holds exactly the size hipRTC reported.
        let r = unsafe { (self.code)(guard.prog, buf.as_mut_ptr() as *mut c_char) };
        if r != HIPRTC_SUCCESS {
            return Err(self.error("hiprtcGetCode", name, r));
        }
        Ok(Ok(buf))
    }

    fn log_of(&self, guard: &ProgramGuard<'_>) -> Result<String> {
        let mut size = 0usize;
        // SAFETY: `prog` is live; writes one size_t.
        let r = unsafe { (self.log_size)(guard.prog, &mut size) };
        if r != HIPRTC_SUCCESS {
            return Err(self.error("hiprtcGetProgramLogSize", "", r));
        }
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: `buf` holds at least the reported size.
        let r = unsafe { (self.log)(guard.prog, buf.as_mut_ptr() as *mut c_char) };
        if r != HIPRTC_SUCCESS {
            return Err(self.error("hiprtcGetProgramLog", "", r));
        }
        while buf.last() == Some(&0) {
            buf.pop();
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

/// Destroys a hipRTC program on drop.
struct ProgramGuard<'a> {
    rtc: &'a HipRtc,
    prog: Program,
}

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the program was created by hiprtcCreateProgram and is destroyed once.
        let _ = unsafe { (self.rtc.destroy)(&mut self.prog) };
    }
}

// ---- the code object manager's ISA list --------------------------------------------

/// The ISAs (`gfx90a`, ...) the code object manager that hipRTC compiles with knows, or
/// `None` where it cannot be found. hipRTC asked for an ISA its comgr lacks can abort
/// the process instead of returning an error (seen with Debian's ROCm 5.2 and
/// `gfx942`), so compiles check this list first. The comgr already loaded by hipRTC is
/// preferred; the ISA names drop their `amdgcn-amd-amdhsa--` prefix and `:feature`
/// suffixes.
pub(crate) fn comgr_isas() -> Option<&'static [String]> {
    static ISAS: OnceLock<Option<Vec<String>>> = OnceLock::new();
    ISAS.get_or_init(load_comgr_isas).as_deref()
}

fn load_comgr_isas() -> Option<Vec<String>> {
    use libloading::os::unix::{Library, RTLD_LAZY};
    // glibc's <bits/dlfcn.h> on Linux (the only platform ROCm supports here).
    const RTLD_NOLOAD: c_int = 0x4;
    const NAMES: [&str; 3] = ["libamd_comgr.so.3", "libamd_comgr.so.2", "libamd_comgr.so"];
    // SAFETY: NOLOAD only finds a library already loaded; loading comgr runs only its
    // own initialisers.
    let lib = NAMES
        .iter()
        .find_map(|&n| unsafe { Library::open(Some(n), RTLD_LAZY | RTLD_NOLOAD) }.ok())
        .or_else(|| NAMES.iter().find_map(|&n| unsafe { Library::new(n) }.ok()))?;
    type CountFn = unsafe extern "C" fn(*mut usize) -> c_int;
    type NameFn = unsafe extern "C" fn(usize, *mut *const c_char) -> c_int;
    // SAFETY: the signatures of amd_comgr_get_isa_count / amd_comgr_get_isa_name
    // (comgr 1.8 and later; status 0 is success).
    let (count, name) = unsafe {
        let c: CountFn = *lib.get(b"amd_comgr_get_isa_count\0").ok()?;
        let n: NameFn = *lib.get(b"amd_comgr_get_isa_name\0").ok()?;
        (c, n)
    };
    let mut n = 0usize;
    // SAFETY: writes one size_t.
    if unsafe { count(&mut n) } != 0 {
        return None;
    }
    let mut isas = Vec::with_capacity(n);
    for i in 0..n {
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: `i` is below the count; comgr returns a static string.
        if unsafe { name(i, &mut p) } != 0 {
            return None;
        }
        let full = cstr_lossy(p)?;
        let isa = full.rsplit("--").next().unwrap_or(&full);
        let base = isa.split(':').next().unwrap_or(isa).to_string();
        if !isas.contains(&base) {
            isas.push(base);
        }
    }
    // Kept loaded for the process: the names were copied, but unloading a library
    // hipRTC may still use is never wanted.
    std::mem::forget(lib);
    Some(isas)
}

// ---- byte views of plain numbers ------------------------------------------------

/// The bytes of a slice of plain numbers (for copies to the device).
pub(crate) fn bytes_of<T: super::DeviceCopy>(v: &[T]) -> &[u8] {
    // SAFETY: `DeviceCopy` is sealed to primitive numbers and half's f16/bf16 (plain
    // 16-bit values): no padding, every byte initialised; the length is the slice's.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// The bytes of a mutable slice of plain numbers (for copies from the device).
pub(crate) fn bytes_of_mut<T: super::DeviceCopy>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `bytes_of`; also, every bit pattern is a valid value of these
    // types, so writing arbitrary bytes keeps them valid.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}
