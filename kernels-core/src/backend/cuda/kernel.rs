//! Loaded CUDA kernels and launching them: with cudarc buffers ([`CudaKernel::builder`])
//! or with raw device pointers and a raw stream ([`CudaKernel::launch_raw`]) for C++
//! and Python engines.

use std::ffi::c_void;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
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
    /// The last answer of [`CudaKernel::resident_clusters`], packed with what it was
    /// asked for (see `resident_key`); 0: none yet.
    resident: AtomicU64,
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
            resident: AtomicU64::new(0),
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

    /// How many clusters of `dims.cluster` blocks of this function, with `dims`' block and
    /// dynamic shared memory, the device holds at once (`cuOccupancyMaxActiveClusters`;
    /// the function is opted in to the shared memory first). The answer for the last
    /// (cluster, block, shared memory) asked is kept, so a launch repeating it makes no
    /// driver call. 1-block "clusters": the device's SM count times the blocks an SM
    /// holds is not asked for; this returns `u32::MAX`.
    pub fn resident_clusters(&self, dims: &LaunchDims) -> Result<u32> {
        if dims.cluster <= 1 {
            return Ok(u32::MAX);
        }
        if let Some(n) = self.kept_resident(dims) {
            return Ok(n);
        }
        let key = resident_key(dims);
        self.prepare(dims)?;
        let n = ffi::max_active_clusters(
            self.function.cu_function(),
            dims.block,
            dims.smem_bytes,
            dims.cluster,
        )?;
        if key != 0 {
            self.resident
                .store(key << 16 | u64::from(n.min(0xffff)), Ordering::Release);
        }
        Ok(n)
    }

    /// The kept answer of [`CudaKernel::resident_clusters`] for `dims`, if it was asked.
    fn kept_resident(&self, dims: &LaunchDims) -> Option<u32> {
        let key = resident_key(dims);
        let last = self.resident.load(Ordering::Acquire);
        (key != 0 && last >> 16 == key).then_some((last & 0xffff) as u32)
    }

    /// `dims` with a persistent launch's grid on `stream` lowered to the clusters the
    /// device holds at once (see [`LaunchDims::persistent`]); others as they are.
    fn fit_resident(&self, dims: LaunchDims, stream: RawStream) -> LaunchDims {
        if !dims.persistent || dims.cluster <= 1 {
            return dims;
        }
        // The lowering only spares a second wave, so where the device is not asked (in a
        // capture, before any launch outside one has: the occupancy query is no stream
        // work, and a capture in global mode may refuse calls that are not) or the
        // query fails, the grid launches as asked. A function the query finds no room
        // for still launches one cluster (the launch itself then says why it cannot run).
        let most = match self.kept_resident(&dims) {
            Some(n) => n,
            None if matches!(stream.is_capturing(), Ok(false)) => match self.resident_clusters(&dims) {
                Ok(n) => n,
                Err(_) => return dims,
            },
            None => return dims,
        };
        let most = most.max(1);
        let clusters = dims.grid.0 / dims.cluster;
        if clusters <= most {
            return dims;
        }
        let mut lowered = dims;
        lowered.grid.0 = most * dims.cluster;
        lowered
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
        let dims = self.fit_resident(dims, RawStream::of(stream));
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
        let dims = self.fit_resident(dims, stream);
        let mut slots = args.slots;
        let mut params: [*mut c_void; MAX_KERNEL_ARGS] = [std::ptr::null_mut(); MAX_KERNEL_ARGS];
        for (p, s) in params.iter_mut().zip(slots.iter_mut()) {
            *p = s as *mut u64 as *mut c_void;
        }
        // Tensor maps are encoded here, on the stack (the driver copies parameters at
        // launch), so the arguments stay plain data and a launch allocates nothing.
        // SAFETY: all-zero is a valid (unencoded) CUtensorMap.
        let mut maps: [cudarc::driver::sys::CUtensorMap; crate::launch::MAX_TENSOR_MAPS] =
            unsafe { std::mem::zeroed() };
        for (slot, (at, map)) in maps.iter_mut().zip(args.tensor_maps()) {
            *slot = ffi::encode_tensor_map(map, "args")?;
            params[at] = slot as *mut _ as *mut c_void;
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

/// What [`CudaKernel::resident_clusters`] was asked, in 48 bits (cluster size, block
/// threads, dynamic shared memory), or 0 where it does not fit them (then not kept).
fn resident_key(dims: &LaunchDims) -> u64 {
    let (bx, by, bz) = dims.block;
    let threads = u64::from(bx) * u64::from(by) * u64::from(bz);
    if by != 1 || bz != 1 || threads >= 1 << 11 || dims.cluster >= 1 << 5 || dims.smem_bytes >= 1 << 20 {
        return 0;
    }
    (1 << 47) | u64::from(dims.cluster) << 31 | threads << 20 | u64::from(dims.smem_bytes)
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
