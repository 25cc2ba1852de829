//! Loaded CUDA kernels and launching them: with cudarc buffers ([`CudaKernel::builder`])
//! or with raw device pointers and a raw stream ([`CudaKernel::launch_raw`]) for C++
//! and Python engines.

use std::ffi::c_void;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, LaunchArgs, LaunchConfig};

use super::ffi::{self, driver_error};
use crate::{DeviceInfo, Error, KernelArgs, LaunchDims, Result, MAX_KERNEL_ARGS};

impl LaunchDims {
    fn config(&self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: self.grid,
            block_dim: self.block,
            shared_mem_bytes: self.smem_bytes,
        }
    }
}

/// Shared memory a block may use without opting in.
const DEFAULT_SMEM_LIMIT: u32 = 48 * 1024;

/// A CUDA stream handle owned by someone else (a C++ or Python engine's
/// `cudaStream_t`). Null is the legacy default stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawStream(cudarc::driver::sys::CUstream);

// SAFETY: a stream handle is an opaque token the driver accepts from any thread.
unsafe impl Send for RawStream {}
unsafe impl Sync for RawStream {}

impl RawStream {
    /// Wraps a raw `CUstream` / `cudaStream_t`.
    ///
    /// # Safety
    /// `ptr` must be null or a live stream of the context the kernel is loaded in,
    /// alive for every launch made with it.
    pub unsafe fn from_raw(ptr: *mut c_void) -> RawStream {
        RawStream(ptr as cudarc::driver::sys::CUstream)
    }

    /// The raw handle of a cudarc stream.
    pub fn of(stream: &CudaStream) -> RawStream {
        RawStream(stream.cu_stream())
    }

    /// The raw handle.
    pub fn as_raw(self) -> *mut c_void {
        self.0 as *mut c_void
    }

    /// Whether the stream is capturing a CUDA graph now.
    pub fn is_capturing(self) -> Result<bool> {
        ffi::is_capturing(self.0)
    }
}

/// A loaded kernel: one variant's function in a module loaded in the device's context.
/// Held in the runtime's memo; launching it compiles and loads nothing.
pub struct CudaKernel {
    kernel: String,
    variant: String,
    function: CudaFunction,
    ctx: Arc<CudaContext>,
    info: Arc<DeviceInfo>,
    /// Dynamic shared memory this function is opted in to (48 KiB until raised).
    smem_limit: AtomicU32,
    /// Whether the function may run in non-portable cluster sizes (set on first need).
    non_portable_cluster: AtomicBool,
    /// The carveout percentage last set on the function (-1: never set, the driver's).
    carveout: AtomicI32,
    /// Whether [`CudaKernel::launch_raw`] launches with programmatic dependent launch.
    pdl: bool,
}

impl fmt::Debug for CudaKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaKernel")
            .field("kernel", &self.kernel)
            .field("variant", &self.variant)
            .finish()
    }
}

impl CudaKernel {
    /// Gets `entry` from a loaded module.
    pub(crate) fn from_module(
        module: &Arc<CudaModule>,
        ctx: Arc<CudaContext>,
        entry: &str,
        kernel: &str,
        variant: String,
        info: Arc<DeviceInfo>,
        pdl: bool,
    ) -> Result<CudaKernel> {
        let function = module.load_function(entry).map_err(|e| Error::Driver {
            call: "cuModuleGetFunction",
            message: format!("kernel `{kernel}` variant [{variant}] has no entry `{entry}`: {e}"),
        })?;
        Ok(CudaKernel {
            kernel: kernel.to_string(),
            variant,
            function,
            ctx,
            info,
            smem_limit: AtomicU32::new(DEFAULT_SMEM_LIMIT),
            non_portable_cluster: AtomicBool::new(false),
            carveout: AtomicI32::new(-1),
            pdl,
        })
    }

    /// Whether [`CudaKernel::launch_raw`] launches this kernel with programmatic dependent
    /// launch (see [`crate::RuntimeOptions::pdl`]). [`CudaKernel::builder`] launches are
    /// always plain.
    pub fn programmatic_launch(&self) -> bool {
        self.pdl
    }

    /// The kernel family's name.
    pub fn name(&self) -> &str {
        &self.kernel
    }

    /// The variant, as [`crate::Variant`] displays it.
    pub fn variant(&self) -> &str {
        &self.variant
    }

    /// The device this kernel is loaded on.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// cudarc's function handle.
    pub fn function(&self) -> &CudaFunction {
        &self.function
    }

    /// Validates `dims` and opts the function in to its dynamic shared memory (once per
    /// new maximum), to a non-portable cluster size (once) and to its carveout (when it
    /// differs from the last one set): driver calls, no compile, legal during graph
    /// capture. A function serves one variant, and the kernels that ask for a carveout
    /// compile it into the variant, so one function sees one carveout in practice.
    fn prepare(&self, dims: &LaunchDims) -> Result<()> {
        dims.validate(&self.info)?;
        if dims.cluster > crate::MAX_PORTABLE_CLUSTER && !self.non_portable_cluster.load(Ordering::Acquire) {
            ffi::allow_non_portable_cluster(self.function.cu_function())?;
            self.non_portable_cluster.store(true, Ordering::Release);
        }
        if dims.smem_bytes > self.smem_limit.load(Ordering::Acquire) {
            ffi::set_max_dynamic_smem(self.function.cu_function(), dims.smem_bytes)?;
            self.smem_limit.fetch_max(dims.smem_bytes, Ordering::AcqRel);
        }
        if let Some(pct) = dims.carveout {
            let pct = i32::from(pct);
            if self.carveout.load(Ordering::Acquire) != pct {
                ffi::set_carveout(self.function.cu_function(), pct)?;
                self.carveout.store(pct, Ordering::Release);
            }
        }
        Ok(())
    }

    /// A launch on `stream` with cudarc buffers: push arguments with cudarc's `arg`
    /// (slices, views, scalars), then `launch`. cudarc orders the buffers' uses across
    /// streams. Always a plain launch, whatever [`CudaKernel::programmatic_launch`] says.
    ///
    /// ```no_run
    /// # fn f(k: &kernels_core::backend::cuda::CudaKernel, stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    /// #      x: &mut cudarc::driver::CudaSlice<f32>) -> kernels_core::Result<()> {
    /// use cudarc::driver::PushKernelArg;
    /// let n = x.len() as i32;
    /// let mut l = k.builder(stream, kernels_core::LaunchDims::linear(1, 256))?;
    /// l.arg(x).arg(&n);
    /// unsafe { l.launch() } // the arguments must match the kernel's signature
    /// # }
    /// ```
    pub fn builder<'a>(&'a self, stream: &'a CudaStream, dims: LaunchDims) -> Result<Launch<'a>> {
        self.prepare(&dims)?;
        Ok(Launch {
            args: stream.launch_builder(&self.function),
            dims,
        })
    }

    /// Launches with raw device pointers and scalars on a raw stream: the entry point
    /// for engines that hold `cudaStream_t` and device pointers. With
    /// [`CudaKernel::programmatic_launch`] it is a programmatic dependent launch
    /// (`cuLaunchKernelEx`), else a plain `cuLaunchKernel`.
    ///
    /// # Safety
    /// `args` must match the kernel's parameters in order and type, every pointer in
    /// it must be valid for what the kernel reads and writes, and `stream` must be a
    /// live stream of the device's context.
    pub unsafe fn launch_raw(&self, stream: RawStream, dims: LaunchDims, args: &KernelArgs) -> Result<()> {
        if args.overflow {
            return Err(Error::invalid(
                "args",
                format!("more than {MAX_KERNEL_ARGS} kernel arguments"),
            ));
        }
        self.prepare(&dims)?;
        let mut slots = args.slots;
        let mut params: [*mut c_void; MAX_KERNEL_ARGS] = [std::ptr::null_mut(); MAX_KERNEL_ARGS];
        for (p, s) in params.iter_mut().zip(slots.iter_mut()) {
            *p = s as *mut u64 as *mut c_void;
        }
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        ffi::launch(
            self.function.cu_function(),
            dims.grid,
            dims.block,
            dims.smem_bytes,
            stream.0,
            &mut params[..args.len],
            self.pdl,
        )
    }
}

/// A launch being built: cudarc's [`LaunchArgs`] (push arguments through `Deref`)
/// plus validated dimensions.
pub struct Launch<'a> {
    args: LaunchArgs<'a>,
    dims: LaunchDims,
}

impl fmt::Debug for Launch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Launch").field("dims", &self.dims).finish()
    }
}

impl<'a> Deref for Launch<'a> {
    type Target = LaunchArgs<'a>;
    fn deref(&self) -> &LaunchArgs<'a> {
        &self.args
    }
}

impl<'a> DerefMut for Launch<'a> {
    fn deref_mut(&mut self) -> &mut LaunchArgs<'a> {
        &mut self.args
    }
}

impl Launch<'_> {
    /// Enqueues the kernel.
    ///
    /// # Safety
    /// The pushed arguments must match the kernel's parameters in order and type, and
    /// the kernel must stay within the buffers it is given (cudarc's
    /// `LaunchArgs::launch` contract).
    pub unsafe fn launch(mut self) -> Result<()> {
        let cfg = self.dims.config();
        self.args
            .launch(cfg)
            .map(|_| ())
            .map_err(|e| driver_error("cuLaunchKernel", e))
    }
}

impl crate::LoadedKernel for CudaKernel {
    fn name(&self) -> &str {
        &self.kernel
    }

    fn variant(&self) -> &str {
        &self.variant
    }

    fn info(&self) -> &DeviceInfo {
        &self.info
    }
}
