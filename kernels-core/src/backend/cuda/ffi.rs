//! The unsafe edge: the CUDA driver and NVRTC calls that cudarc's safe layer does not
//! cover, and the library checks that keep cudarc's dynamic loader from panicking.
//!
//! Everything here is `pub(crate)` and small; each `unsafe` block states what makes
//! it sound. Every module above this one is safe Rust.

use std::ffi::{c_char, c_int, c_void};
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;

use cudarc::driver::result::{self as drv, DriverError};
use cudarc::driver::sys as dsys;
use cudarc::nvrtc::sys as nsys;

use crate::{Error, ImageKind, Result};

/// Whether libcuda can be loaded. cudarc panics on first use when it cannot, so every
/// entry point checks this first.
pub(crate) fn driver_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen candidate library names.
    *PRESENT.get_or_init(|| unsafe { dsys::is_culib_present() })
}

/// Whether libnvrtc can be loaded.
pub(crate) fn nvrtc_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to dlopen candidate library names.
    *PRESENT.get_or_init(|| unsafe { nsys::is_culib_present() })
}

/// Runs `f`, turning a panic inside cudarc (a missing library or symbol) into an error.
pub(crate) fn guard<T>(call: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let message = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into());
        Err(Error::LibraryPanic { call, message })
    })
}

/// A driver error, naming the call.
pub(crate) fn driver_error(call: &'static str, e: DriverError) -> Error {
    Error::Driver {
        call,
        message: e.to_string(),
    }
}

/// `cuDriverGetVersion`: the driver's CUDA version as (major, minor).
pub(crate) fn driver_version() -> Result<(i32, i32)> {
    if !driver_present() {
        return Err(Error::NoDriver);
    }
    guard("cuDriverGetVersion", || {
        let mut v: c_int = 0;
        // SAFETY: writes one int through a valid pointer; needs no initialised context.
        unsafe { dsys::cuDriverGetVersion(&mut v) }
            .result()
            .map_err(|e| driver_error("cuDriverGetVersion", e))?;
        Ok((v / 1000, (v % 1000) / 10))
    })
}

/// `nvrtcVersion`.
pub(crate) fn nvrtc_version() -> Result<(i32, i32)> {
    if !nvrtc_present() {
        return Err(Error::NoNvrtc);
    }
    guard("nvrtcVersion", || {
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: writes two ints through valid pointers.
        let r = unsafe { nsys::nvrtcVersion(&mut major, &mut minor) };
        if r != nsys::nvrtcResult::NVRTC_SUCCESS {
            return Err(Error::Nvrtc {
                call: "nvrtcVersion",
                kernel: String::new(),
                message: format!("{r:?}"),
            });
        }
        Ok((major, minor))
    })
}

/// An NVRTC program, destroyed on drop.
struct Program(nsys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        unsafe {
            nsys::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

fn nvrtc_check(call: &'static str, kernel: &str, r: nsys::nvrtcResult) -> Result<()> {
    if r == nsys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(Error::Nvrtc {
            call,
            kernel: kernel.to_string(),
            message: format!("{r:?}"),
        })
    }
}

/// Compiles `code` with NVRTC. `Ok(Err(log))` is a compile error with NVRTC's log;
/// `Err` is a failure of NVRTC itself. NVRTC is thread-safe across programs, so this
/// runs on many threads at once.
pub(crate) fn nvrtc_compile(
    name: &str,
    code: &str,
    headers: &[(&str, &str)],
    options: &[String],
) -> Result<std::result::Result<(ImageKind, Vec<u8>), String>> {
    if !nvrtc_present() {
        return Err(Error::NoNvrtc);
    }
    let text = crate::backend::ProgramText::new(code, &format!("{name}.cu"), headers, options)?;
    let (text_ptrs, name_ptrs) = text.header_arrays();

    guard("nvrtcCompileProgram", || {
        let mut raw: nsys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: every pointer is to a live NUL-terminated string owned above, the
        // arrays have `headers.len()` entries, and the program is destroyed by `Program`.
        let r = unsafe {
            nsys::nvrtcCreateProgram(
                &mut raw,
                text.code.as_ptr(),
                text.name.as_ptr(),
                text.headers() as c_int,
                text_ptrs,
                name_ptrs,
            )
        };
        nvrtc_check("nvrtcCreateProgram", name, r)?;
        let prog = Program(raw);
        // SAFETY: `prog` is live; the options array has `text.options.len()` valid strings.
        let r =
            unsafe { nsys::nvrtcCompileProgram(prog.0, text.options.len() as c_int, text.options.as_ptr()) };
        if r != nsys::nvrtcResult::NVRTC_SUCCESS {
            let log = program_log(&prog).unwrap_or_else(|e| format!("(no log: {e})"));
            return Ok(Err(format!("{r:?}\n{log}")));
        }
        // CUBIN exists when compiling for a real `sm_XX` arch; PTX is the fallback.
        let mut size: usize = 0;
        // SAFETY: `prog` is live and compiled; writes one usize.
        let r = unsafe { nsys::nvrtcGetCUBINSize(prog.0, &mut size) };
        if r == nsys::nvrtcResult::NVRTC_SUCCESS && size > 0 {
            let mut buf = vec![0u8; size];
            // SAFETY: `buf` holds exactly the size NVRTC reported.
            let r = unsafe { nsys::nvrtcGetCUBIN(prog.0, buf.as_mut_ptr() as *mut c_char) };
            nvrtc_check("nvrtcGetCUBIN", name, r)?;
            return Ok(Ok((ImageKind::Cubin, buf)));
        }
        // SAFETY: as above, for PTX (the size includes the trailing NUL).
        let r = unsafe { nsys::nvrtcGetPTXSize(prog.0, &mut size) };
        nvrtc_check("nvrtcGetPTXSize", name, r)?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: `buf` holds at least the size NVRTC reported.
        let r = unsafe { nsys::nvrtcGetPTX(prog.0, buf.as_mut_ptr() as *mut c_char) };
        nvrtc_check("nvrtcGetPTX", name, r)?;
        Ok(Ok((ImageKind::Ptx, buf)))
    })
}

fn program_log(prog: &Program) -> Result<String> {
    let mut size: usize = 0;
    // SAFETY: `prog` is live; writes one usize.
    let r = unsafe { nsys::nvrtcGetProgramLogSize(prog.0, &mut size) };
    nvrtc_check("nvrtcGetProgramLogSize", "", r)?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: `buf` holds at least the reported size.
    let r = unsafe { nsys::nvrtcGetProgramLog(prog.0, buf.as_mut_ptr() as *mut c_char) };
    nvrtc_check("nvrtcGetProgramLog", "", r)?;
    while buf.last() == Some(&0) {
        buf.pop();
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// `cuStreamIsCapturing`: whether `stream` is capturing a CUDA graph now.
pub(crate) fn is_capturing(stream: dsys::CUstream) -> Result<bool> {
    // SAFETY: the stream handle comes from a live CudaStream (or a caller's promise
    // through `Device::borrow_stream`).
    let status =
        unsafe { drv::stream::is_capturing(stream) }.map_err(|e| driver_error("cuStreamIsCapturing", e))?;
    Ok(status != dsys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// `cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)`: lets a function use more than
/// 48 KiB of dynamic shared memory.
pub(crate) fn set_max_dynamic_smem(func: dsys::CUfunction, bytes: u32) -> Result<()> {
    // SAFETY: `func` belongs to a module the caller keeps loaded.
    unsafe {
        drv::function::set_function_attribute(
            func,
            dsys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            bytes as i32,
        )
    }
    .map_err(|e| driver_error("cuFuncSetAttribute", e))
}

/// `cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)`: the function's shared memory
/// carveout, `percent` of the SM's most shared memory (-1: the driver's choice).
pub(crate) fn set_carveout(func: dsys::CUfunction, percent: i32) -> Result<()> {
    // SAFETY: `func` belongs to a module the caller keeps loaded.
    unsafe {
        drv::function::set_function_attribute(
            func,
            dsys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
            percent,
        )
    }
    .map_err(|e| driver_error("cuFuncSetAttribute", e))
}

/// `cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)`: lets a function run in
/// clusters of more than 8 blocks (16 on Hopper).
pub(crate) fn allow_non_portable_cluster(func: dsys::CUfunction) -> Result<()> {
    // SAFETY: `func` belongs to a module the caller keeps loaded.
    unsafe {
        drv::function::set_function_attribute(
            func,
            dsys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
            1,
        )
    }
    .map_err(|e| driver_error("cuFuncSetAttribute", e))
}

/// `cuOccupancyMaxActiveClusters`: how many clusters of `cluster` blocks of `func`, each
/// of `block` threads with `smem` bytes of dynamic shared memory, the device holds at
/// once. The function's dynamic shared memory limit must already allow `smem`.
pub(crate) fn max_active_clusters(
    func: dsys::CUfunction,
    block: (u32, u32, u32),
    smem: u32,
    cluster: u32,
) -> Result<u32> {
    // SAFETY: all-zero is a valid value of this plain C union.
    let mut value: dsys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.clusterDim.x = cluster;
    value.clusterDim.y = 1;
    value.clusterDim.z = 1;
    let mut attr = dsys::CUlaunchAttribute {
        id: dsys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
        pad: [0; 4],
        value,
    };
    // The grid of one cluster: the query asks what fits, not what is launched.
    let config = dsys::CUlaunchConfig {
        gridDimX: cluster,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: smem,
        hStream: std::ptr::null_mut(),
        attrs: &mut attr,
        numAttrs: 1,
    };
    let mut n: std::ffi::c_int = 0;
    // SAFETY: `func` belongs to a module the caller keeps loaded; `config` and `attr`
    // outlive the call.
    let asked = unsafe { dsys::cuOccupancyMaxActiveClusters(&mut n, func, &config) }.result();
    if let Err(e) = asked {
        // Kernels that declare `__cluster_dims__` may also be asked with the cluster
        // size left to the function (no attribute).
        let bare = dsys::CUlaunchConfig {
            attrs: std::ptr::null_mut(),
            numAttrs: 0,
            ..config
        };
        // SAFETY: as above.
        unsafe { dsys::cuOccupancyMaxActiveClusters(&mut n, func, &bare) }
            .result()
            .map_err(|_| driver_error("cuOccupancyMaxActiveClusters", e))?;
    }
    Ok(n.max(0) as u32)
}

/// `cuLaunchKernel` with raw parameters, or with `pdl` `cuLaunchKernelEx` with the
/// programmatic-stream-serialization attribute (the kernel may start before the
/// previous one of the stream has finished, and must wait for it before it touches
/// global memory).
///
/// # Safety
/// `params` must match the kernel's signature (one pointer to each argument's value),
/// every device pointer among them must be valid for what the kernel does, and
/// `stream` must be a live stream of the function's context. With `pdl` the kernel
/// must wait for the previous grid (`griddepcontrol.wait`) before any global memory
/// access.
pub(crate) unsafe fn launch(
    func: dsys::CUfunction,
    grid: (u32, u32, u32),
    block: (u32, u32, u32),
    smem: u32,
    stream: dsys::CUstream,
    params: &mut [*mut c_void],
    pdl: bool,
) -> Result<()> {
    if !pdl {
        return drv::launch_kernel(func, grid, block, smem, stream, params)
            .map_err(|e| driver_error("cuLaunchKernel", e));
    }
    // SAFETY: all-zero is a valid value of this plain C union.
    let mut value: dsys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attr = dsys::CUlaunchAttribute {
        id: dsys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = dsys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block.0,
        blockDimY: block.1,
        blockDimZ: block.2,
        sharedMemBytes: smem,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    dsys::cuLaunchKernelEx(&config, func, params.as_mut_ptr(), std::ptr::null_mut())
        .result()
        .map_err(|e| driver_error("cuLaunchKernelEx", e))
}

/// `cuTensorMapEncodeTiled` of a 2-D map (no interleave, 256-byte L2 promotion,
/// zero fill out of bounds); the map is checked first, so an error names `name`.
/// Launches encode their maps with it on every call; a caller replaying one launch
/// with `cuLaunchKernel` (the overhead bench's bare launch) encodes them once.
pub fn encode_tensor_map(map: &crate::launch::TensorMap2d, name: &str) -> Result<dsys::CUtensorMap> {
    use crate::launch::{TmaElement, TmaSwizzle};
    use dsys::CUtensorMapDataType_enum as D;
    use dsys::CUtensorMapSwizzle_enum as S;
    map.check(name)?;
    let dtype = match map.element {
        TmaElement::Bf16 => D::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        TmaElement::F16 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        TmaElement::F32 => D::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
    };
    let swizzle = match map.swizzle {
        TmaSwizzle::None => S::CU_TENSOR_MAP_SWIZZLE_NONE,
        TmaSwizzle::B32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
        TmaSwizzle::B64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
        TmaSwizzle::B128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
    };
    let dims = [map.cols, map.rows];
    let strides = [map.row_bytes];
    let boxes = [map.box_cols, map.box_rows];
    let element_strides = [1u32, 1];
    // SAFETY: all-zero is a valid (unencoded) CUtensorMap, which the call overwrites.
    let mut out: dsys::CUtensorMap = unsafe { std::mem::zeroed() };
    // SAFETY: every pointer is to a live local of the rank the call reads (2 dims, 1
    // stride); the global address is only recorded, not dereferenced, here.
    let r = unsafe {
        dsys::cuTensorMapEncodeTiled(
            &mut out,
            dtype,
            2,
            map.ptr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            element_strides.as_ptr(),
            dsys::CUtensorMapInterleave_enum::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle,
            dsys::CUtensorMapL2promotion_enum::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            dsys::CUtensorMapFloatOOBfill_enum::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    r.result()
        .map_err(|e| driver_error("cuTensorMapEncodeTiled", e))?;
    Ok(out)
}

/// `cuMemcpyDtoDAsync`.
///
/// # Safety
/// `dst` and `src` must be valid for `bytes` bytes until the copy runs on `stream`.
pub(crate) unsafe fn copy_dtod(dst: u64, src: u64, bytes: usize, stream: dsys::CUstream) -> Result<()> {
    drv::memcpy_dtod_async(dst, src, bytes, stream).map_err(|e| driver_error("cuMemcpyDtoDAsync", e))
}

/// `cuMemsetD8Async` to zero.
///
/// # Safety
/// `dst` must be valid for `bytes` bytes until the memset runs on `stream`.
pub(crate) unsafe fn zero(dst: u64, bytes: usize, stream: dsys::CUstream) -> Result<()> {
    drv::memset_d8_async(dst, 0, bytes, stream).map_err(|e| driver_error("cuMemsetD8Async", e))
}
