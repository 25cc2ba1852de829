//! The HIP runtime of one device: modules compiled with hipRTC, cached on disk under
//! the one cache key, memoized in process, and launched with `hipModuleLaunchKernel`.

use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, Mutex};

use super::ffi::{self, FunctionHandle, ModuleHandle};
use super::{HipCompiler, HipDevice, HipStream};
use crate::counters::{bump, lock, Counters};
use crate::{
    cache_key, CacheKey, CacheKeyParts, Component, DeviceInfo, DiskCache, Error, Image, ImageKind,
    KernelArgs, KernelSource, LaunchDims, Lookup, ModuleOrigin, Result, Section, Stats, Variant,
    MAX_KERNEL_ARGS,
};

/// The version of this crate, part of every cache key (as on CUDA).
const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The module cache key of `variant` of `source` compiled by `compiler` for `arch` on a
/// device named `device_name` with `cu_count` compute units: the same [`cache_key`]
/// CUDA modules use, with hipRTC's id as the compiler, the gfx arch, and the exact
/// compile (entry point and every hipRTC option) as the variant component. No codegen
/// variable applies to hipRTC, so that component is empty.
pub fn hip_module_key(
    compiler: &HipCompiler,
    arch: &str,
    device_name: &str,
    cu_count: u32,
    source: &KernelSource,
    variant: &Variant,
) -> CacheKey {
    let compiler_id = compiler.id();
    let compile = format!(
        "{}\n{}",
        variant.entry(),
        compiler.options(variant, arch).join("\n")
    );
    cache_key(&CacheKeyParts {
        crate_version: CRATE_VERSION,
        kernel: source.name,
        source_fingerprint: source.fingerprint,
        compiler: &compiler_id,
        arch,
        device_name,
        sm_count: cu_count,
        codegen_env: &[],
        variant: Component::Applies(&compile),
        static_key: Component::DoesNotApply,
        batch: Component::DoesNotApply,
        alignment: Component::DoesNotApply,
    })
}

/// A loaded kernel: one variant's function in a module loaded on one device. Held in
/// the runtime's memo; launching it compiles and loads nothing.
pub struct HipKernel {
    kernel: String,
    variant: String,
    function: FunctionHandle,
    // The function is valid only while its module is loaded.
    _module: ModuleHandle,
    limits: DeviceInfo,
}

impl fmt::Debug for HipKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipKernel")
            .field("kernel", &self.kernel)
            .field("variant", &self.variant)
            .finish()
    }
}

impl HipKernel {
    /// Loads `image` on `device` and gets `entry` from it.
    fn load(
        device: &HipDevice,
        image: &Image,
        entry: &str,
        kernel: &str,
        variant: String,
    ) -> Result<HipKernel> {
        if image.kind != ImageKind::CodeObject {
            return Err(Error::invalid(
                "image",
                format!("is a {} image; HIP loads code objects (hsaco)", image.kind.name()),
            ));
        }
        device.select()?;
        let module = ffi::module_load(&image.bytes)?;
        let function = ffi::module_function(&module, entry).map_err(|e| Error::Hip {
            call: "hipModuleGetFunction",
            message: format!("kernel `{kernel}` variant [{variant}] has no entry `{entry}`: {e}"),
        })?;
        Ok(HipKernel {
            kernel: kernel.to_string(),
            variant,
            function,
            _module: module,
            limits: device.info().launch_limits(),
        })
    }

    /// The kernel family's name.
    pub fn name(&self) -> &str {
        &self.kernel
    }

    /// The variant, as [`Variant`] displays it.
    pub fn variant(&self) -> &str {
        &self.variant
    }

    /// Checks a launch without making it: `dims` against the device (grid, block, and
    /// dynamic LDS at most the workgroup's LDS, 64 KiB on gfx90a and gfx942: more is an
    /// invalid `smem_bytes`) and the argument count.
    ///
    /// On AMD, module kernels need no opt-in for dynamic LDS up to that limit;
    /// `hipFuncSetAttribute` takes a host-side kernel symbol, not a module function,
    /// so it is not called.
    pub fn check_launch(&self, dims: &LaunchDims, args: &KernelArgs) -> Result<()> {
        if args.overflow {
            return Err(Error::invalid(
                "args",
                format!("more than {MAX_KERNEL_ARGS} kernel arguments"),
            ));
        }
        dims.validate(&self.limits)
    }

    /// Launches on `stream` with raw device pointers and scalars (the same packed
    /// [`KernelArgs`] the CUDA path uses), after [`HipKernel::check_launch`].
    ///
    /// # Safety
    /// `args` must match the kernel's parameters in order and type, every pointer in
    /// it must be valid for what the kernel reads and writes, and `stream` must belong
    /// to the kernel's device.
    pub unsafe fn launch(&self, stream: &HipStream, dims: LaunchDims, args: &KernelArgs) -> Result<()> {
        self.check_launch(&dims, args)?;
        if stream.ordinal() != self.limits.ordinal {
            return Err(Error::invalid(
                "stream",
                format!(
                    "belongs to device {}; the kernel is loaded on device {}",
                    stream.ordinal(),
                    self.limits.ordinal
                ),
            ));
        }
        ffi::set_device(self.limits.ordinal)?;
        // Each argument sits in its own 8-byte slot; the runtime reads the parameter's
        // size from the slot's address (the value, on little-endian hosts).
        let mut slots = args.slots;
        let mut params: [*mut c_void; MAX_KERNEL_ARGS] = [std::ptr::null_mut(); MAX_KERNEL_ARGS];
        for (p, s) in params.iter_mut().zip(slots.iter_mut()) {
            *p = s as *mut u64 as *mut c_void;
        }
        // SAFETY: the caller guarantees the arguments and stream; `params` points at
        // `slots`, which outlive the call (the runtime copies the values at launch),
        // and `self` keeps the module loaded.
        unsafe {
            ffi::launch(
                self.function,
                dims.grid,
                dims.block,
                dims.smem_bytes,
                stream.handle(),
                &mut params[..args.len],
            )
        }
    }
}

/// The HIP runtime of one device: given a [`KernelSource`] and a [`Variant`], builds
/// the module cache key ([`hip_module_key`]), looks it up in the [`DiskCache`]
/// (`Section::Modules`), compiles with hipRTC on a miss and stores the code object
/// atomically, loads the module, memoizes it, and returns a launchable [`HipKernel`].
/// A corrupt cache file, or one the runtime refuses to load, is recompiled.
///
/// ```no_run
/// use kernels_core::{HipDevice, HipRuntime, KernelArgs, KernelSource, LaunchDims, Variant};
/// static SRC: KernelSource = KernelSource::new(
///     "fill", "extern \"C\" __global__ void fill(float* x, float v) { x[threadIdx.x] = v; }", "fnv1a64:0");
/// let rt = HipRuntime::new(HipDevice::open(0)?)?;
/// let stream = rt.device().new_stream()?;
/// let x = rt.device().alloc_zeros::<f32>(256)?;
/// let k = rt.kernel(&SRC, &Variant::new("fill"))?;
/// let mut args = KernelArgs::new();
/// args.ptr(x.device_ptr()).f32(1.0);
/// unsafe { k.launch(&stream, LaunchDims::linear(1, 256), &args) }?;
/// stream.synchronize()?;
/// assert_eq!(x.to_vec()?, vec![1.0; 256]);
/// # Ok::<(), kernels_core::Error>(())
/// ```
pub struct HipRuntime {
    device: HipDevice,
    compiler: HipCompiler,
    arch: String,
    cache: DiskCache,
    /// Module cache key text -> loaded kernel.
    modules: Mutex<HashMap<String, Arc<HipKernel>>>,
    counters: Counters,
    last_cache_error: Mutex<Option<String>>,
}

impl fmt::Debug for HipRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipRuntime")
            .field("device", &self.device.info().name)
            .field("arch", &self.arch)
            .field("compiler", &self.compiler.id())
            .field("cache", &self.cache.root())
            .finish()
    }
}

impl HipRuntime {
    /// A runtime for `device` with the disk cache of the environment
    /// (`KERNELS_CACHE_DIR`). Fails when hipRTC cannot be loaded.
    pub fn new(device: HipDevice) -> Result<HipRuntime> {
        HipRuntime::with_cache(device, DiskCache::from_env())
    }

    /// A runtime for `device` with an explicit disk cache.
    pub fn with_cache(device: HipDevice, cache: DiskCache) -> Result<HipRuntime> {
        let compiler = HipCompiler::detect()?;
        Ok(HipRuntime {
            arch: device.info().arch().to_string(),
            device,
            compiler,
            cache,
            modules: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            last_cache_error: Mutex::new(None),
        })
    }

    /// The device.
    pub fn device(&self) -> &HipDevice {
        &self.device
    }

    /// The compiler (hipRTC and its version).
    pub fn compiler(&self) -> &HipCompiler {
        &self.compiler
    }

    /// The arch modules are compiled for (`gfx942`).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The disk cache.
    pub fn cache(&self) -> &DiskCache {
        &self.cache
    }

    /// What the runtime has done so far.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// The last cache write error, if any (a failed write does not fail the compile).
    pub fn last_cache_error(&self) -> Option<String> {
        lock(&self.last_cache_error).clone()
    }

    /// The module cache key of `variant` of `source` on this device.
    pub fn module_key(&self, source: &KernelSource, variant: &Variant) -> CacheKey {
        let info = self.device.info();
        hip_module_key(
            &self.compiler,
            &self.arch,
            &info.name,
            info.cu_count,
            source,
            variant,
        )
    }

    /// The loaded kernel for `variant` of `source`: from the memo, else the disk cache,
    /// else compiled now.
    pub fn kernel(&self, source: &KernelSource, variant: &Variant) -> Result<Arc<HipKernel>> {
        self.kernel_with_origin(source, variant).map(|(k, _)| k)
    }

    /// [`HipRuntime::kernel`], also saying where the module came from.
    pub fn kernel_with_origin(
        &self,
        source: &KernelSource,
        variant: &Variant,
    ) -> Result<(Arc<HipKernel>, ModuleOrigin)> {
        let key = self.module_key(source, variant);
        if let Some(k) = lock(&self.modules).get(key.text()) {
            bump(&self.counters.memo_hits);
            return Ok((k.clone(), ModuleOrigin::Memo));
        }
        let (image, origin) = self.image(source, variant, &key)?;
        let load = |image: &Image| {
            HipKernel::load(
                &self.device,
                image,
                variant.entry(),
                source.name,
                variant.to_string(),
            )
        };
        let kernel = match load(&image) {
            Ok(k) => k,
            Err(_) if origin == ModuleOrigin::Disk => {
                // A cached code object the runtime refuses: recompile it once.
                bump(&self.counters.corrupt_files);
                let fresh = self.compile_and_store(source, variant, &key)?;
                load(&fresh)?
            }
            Err(e) => return Err(e),
        };
        let mut modules = lock(&self.modules);
        // Another thread may have loaded it meanwhile: keep one.
        let kernel = modules
            .entry(key.text().to_string())
            .or_insert_with(|| Arc::new(kernel))
            .clone();
        Ok((kernel, origin))
    }

    /// The code object: the disk cache's (checked), else compiled now and stored.
    fn image(
        &self,
        source: &KernelSource,
        variant: &Variant,
        key: &CacheKey,
    ) -> Result<(Image, ModuleOrigin)> {
        match self.cache.load(Section::Modules, key) {
            Lookup::Hit(e) if ImageKind::from_name(&e.kind) == Some(ImageKind::CodeObject) => {
                bump(&self.counters.disk_hits);
                return Ok((
                    Image {
                        kind: ImageKind::CodeObject,
                        bytes: e.payload,
                    },
                    ModuleOrigin::Disk,
                ));
            }
            Lookup::Hit(_) | Lookup::Corrupt { .. } => bump(&self.counters.corrupt_files),
            Lookup::Miss => {}
        }
        Ok((
            self.compile_and_store(source, variant, key)?,
            ModuleOrigin::Compiled,
        ))
    }

    fn compile_and_store(&self, source: &KernelSource, variant: &Variant, key: &CacheKey) -> Result<Image> {
        let image = self.compiler.compile(source, variant, &self.arch)?;
        bump(&self.counters.compiled);
        if let Err(e) = self
            .cache
            .store(Section::Modules, key, image.kind.name(), &image.bytes)
        {
            bump(&self.counters.cache_write_errors);
            *lock(&self.last_cache_error) = Some(e.to_string());
        }
        Ok(image)
    }
}
