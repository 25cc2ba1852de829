//! The HIP runtime of one device: modules compiled with hipRTC, cached on disk under
//! the one cache key, memoized in process, and launched with `hipModuleLaunchKernel`.

use std::ffi::c_void;
use std::fmt;
use std::sync::Arc;

use super::ffi::{self, FunctionHandle, ModuleHandle};
use super::{HipCompiler, HipDevice, HipStream};
use crate::counters::Counters;
use crate::precompile::{cached_image, compile_and_store, Modules, TypedMemo};
use crate::{
    cache_key, CacheKey, CacheKeyParts, Component, DeviceInfo, DiskCache, Error, Image, ImageKind,
    KernelArgs, KernelSource, LaunchDims, ModuleOrigin, Policy, Result, Stats, TuneOptions, Variant,
    MAX_KERNEL_ARGS,
};

/// A loaded kernel and where its module came from.
type Loaded = (Arc<HipKernel>, ModuleOrigin);

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
    let mut parts = hip_key_parts(
        &compiler_id,
        arch,
        device_name,
        cu_count,
        source.name,
        source.fingerprint,
    );
    parts.variant = Component::Applies(&compile);
    cache_key(&parts)
}

/// The online tuning cache key of a problem of `kernel` (source `fingerprint`) on
/// `device` compiled by `compiler`: the module key's components (hipRTC, arch, device
/// name, CUs) with the canonical static key, the batch, the alignment class and the
/// search's [`crate::candidates_digest`], as on CUDA. `kernels tune --backend hip`
/// resumes from results stored under it.
#[allow(clippy::too_many_arguments)]
pub fn hip_tuning_key(
    compiler: &HipCompiler,
    device: &super::HipDeviceInfo,
    kernel: &str,
    fingerprint: &str,
    static_key: &str,
    batch: u64,
    alignment: crate::AlignClass,
    candidates: &str,
) -> CacheKey {
    let compiler_id = compiler.id();
    let parts = hip_key_parts(
        &compiler_id,
        device.arch(),
        &device.name,
        device.cu_count,
        kernel,
        fingerprint,
    )
    .for_tuning(static_key, batch, alignment, candidates);
    cache_key(&parts)
}

/// The components every HIP cache key shares; the caller sets the variant (modules)
/// or the static key, batch and alignment (tuning results).
fn hip_key_parts<'a>(
    compiler_id: &'a str,
    arch: &'a str,
    device_name: &'a str,
    cu_count: u32,
    kernel: &'a str,
    fingerprint: &'a str,
) -> CacheKeyParts<'a> {
    CacheKeyParts {
        crate_version: CRATE_VERSION,
        kernel,
        source_fingerprint: fingerprint,
        compiler: compiler_id,
        arch,
        device_name,
        sm_count: cu_count,
        codegen_env: &[],
        variant: Component::DoesNotApply,
        candidates: Component::DoesNotApply,
        static_key: Component::DoesNotApply,
        batch: Component::DoesNotApply,
        alignment: Component::DoesNotApply,
    }
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

    /// The device it is loaded on, as launch plans and limit checks see it
    /// ([`super::HipDeviceInfo::launch_limits`]).
    pub fn info(&self) -> &DeviceInfo {
        &self.limits
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
    /// The device as search spaces, variants and launch plans see it.
    pub(super) limits: DeviceInfo,
    compiler: HipCompiler,
    arch: String,
    cache: DiskCache,
    pub(super) policy: Policy,
    /// Options of the searches the online policy runs.
    pub(super) tune_options: TuneOptions,
    /// Module cache key text -> loaded kernel.
    modules: Modules<HipKernel>,
    /// Per kernel type: (key, batch, alignment) -> resolved config and kernel.
    pub(super) typed: TypedMemo,
    pub(super) counters: Counters,
}

impl fmt::Debug for HipRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipRuntime")
            .field("device", &self.device.info().name)
            .field("arch", &self.arch)
            .field("compiler", &self.compiler.id())
            .field("policy", &self.policy)
            .field("cache", &self.cache.root())
            .finish()
    }
}

impl HipRuntime {
    /// A runtime for `device` with the policy (`KERNELS_TUNING`; unknown is an error)
    /// and disk cache (`KERNELS_CACHE_DIR`) of the environment, as on CUDA. Fails when
    /// hipRTC cannot be loaded.
    pub fn new(device: HipDevice) -> Result<HipRuntime> {
        let policy = Policy::from_env()?;
        Ok(HipRuntime::with_cache(device, DiskCache::from_env())?.with_policy(policy))
    }

    /// A runtime for `device` with an explicit disk cache and the `serve` policy.
    pub fn with_cache(device: HipDevice, cache: DiskCache) -> Result<HipRuntime> {
        let compiler = HipCompiler::detect()?;
        Ok(HipRuntime {
            arch: device.info().arch().to_string(),
            limits: device.info().launch_limits(),
            device,
            compiler,
            cache,
            policy: Policy::Serve,
            tune_options: TuneOptions::default(),
            modules: Modules::default(),
            typed: TypedMemo::default(),
            counters: Counters::default(),
        })
    }

    /// The same runtime resolving configs under `policy`.
    pub fn with_policy(mut self, policy: Policy) -> HipRuntime {
        self.policy = policy;
        self
    }

    /// The same runtime with these options for the online policy's searches.
    pub fn with_tune_options(mut self, tune: TuneOptions) -> HipRuntime {
        self.tune_options = tune;
        self
    }

    /// The resolution policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The device as search spaces, variants and launch plans see it (its target is
    /// the gfx target: [`super::HipDeviceInfo::launch_limits`]).
    pub fn limits(&self) -> &DeviceInfo {
        &self.limits
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
        self.counters.last_cache_error()
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
        if let Some(hit) = self.modules.hit(&key, &self.counters) {
            return Ok(hit);
        }
        let (image, origin) = self.image(source, variant, &key)?;
        let kernel = self.load(&image, origin, source, variant, &key)?;
        Ok((kernel, origin))
    }

    /// Loads a code object on the device and memoizes the kernel. A cached code object
    /// the runtime refuses is recompiled once.
    fn load(
        &self,
        image: &Image,
        origin: ModuleOrigin,
        source: &KernelSource,
        variant: &Variant,
        key: &CacheKey,
    ) -> Result<Arc<HipKernel>> {
        let load = |image: &Image| {
            HipKernel::load(
                &self.device,
                image,
                variant.entry(),
                source.name,
                variant.to_string(),
            )
        };
        // A cached code object the runtime refuses is recompiled once.
        self.modules.load(image, origin, key, &self.counters, load, || {
            self.compile_and_store(source, variant, key)
        })
    }

    /// Parallel precompile: compiles (or reads from the disk cache) every job on
    /// `threads` compile threads (0: one per core; 1: serial), then loads the modules
    /// on this thread. Identical jobs compile once. One result per job, in order; a
    /// failure is that job's error (hipRTC's log for a compile error).
    pub fn precompile(&self, jobs: &[(KernelSource, Variant)], threads: usize) -> Vec<Result<Loaded>> {
        self.modules.precompile(
            jobs,
            threads,
            &self.counters,
            |source, variant| self.module_key(source, variant),
            |source, variant, key| self.image(source, variant, key),
            |image, origin, source, variant, key| self.load(&image, origin, source, variant, key),
        )
    }

    /// The code object: the disk cache's (checked), else compiled now and stored.
    fn image(
        &self,
        source: &KernelSource,
        variant: &Variant,
        key: &CacheKey,
    ) -> Result<(Image, ModuleOrigin)> {
        cached_image(
            &self.cache,
            key,
            &self.counters,
            |kind| kind == ImageKind::CodeObject,
            || self.compile_and_store(source, variant, key),
        )
    }

    /// Whether `variant` of `source` is loaded (in the memo).
    pub(super) fn is_loaded(&self, source: &KernelSource, variant: &Variant) -> bool {
        self.modules.contains(&self.module_key(source, variant))
    }

    /// A fresh compile of `variant` of `source`, stored in the disk cache under `key`.
    fn compile_and_store(&self, source: &KernelSource, variant: &Variant, key: &CacheKey) -> Result<Image> {
        compile_and_store(&self.cache, key, &self.counters, || {
            self.compiler.compile(source, variant, &self.arch)
        })
    }
}
