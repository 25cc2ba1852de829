//! The runtime: one per device, generic over the [`Backend`]. Compiles with a
//! persistent module cache and an in-process memo, resolves configs under a
//! [`Policy`], and launches. Written once for CUDA and HIP.

mod counters;
mod policy;
mod precompile;

pub use counters::{ModuleOrigin, Stats};
pub use policy::{
    parse_pdl, pdl_from_env, resolve_in_order, Outcome, Policy, ResolutionSteps, PDL_ENV, TUNING_ENV,
};

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tuned::{resolve_serve, Resolved, Source};

use crate::launch::MAX_LAUNCHES;
use crate::tune::search::canonical_key;
use crate::{
    cache_key, AlignClass, Backend, CacheKey, CacheKeyParts, Component, DeviceInfo, DiskCache, Error, Image,
    KernelSource, Launches, LoadedKernel, PlannedKernel, Result, Section, Tunable, TuneOptions, TuneRecord,
    Variant,
};
use counters::{bump, lock, Counters};
use precompile::{
    cached_image, check_batch, check_config, compile_and_store, Modules, TypedMemo, VariantMemo,
};

/// The version of this crate, part of every cache key.
pub const CRATE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// How a runtime resolves and caches.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    pub policy: Policy,
    pub cache: DiskCache,
    /// Options of searches the online policy runs.
    pub tune: TuneOptions,
    /// Programmatic dependent launch (a CUDA capability, sm_90 and newer): kernels whose source allows it
    /// ([`KernelSource::pdl`]: softmax, RMSNorm, fused add-RMSNorm) are launched with
    /// the programmatic-stream-serialization attribute. Such a launch may start while
    /// the previous kernel of the stream is still running; the kernel waits for that
    /// kernel's completion and memory before touching global memory, so results are
    /// the same, and the launch latency overlaps the previous kernel's tail. It also
    /// lets the next kernel of the stream start early if that one was launched so.
    /// It pays where the previous kernel triggers early too (a chain of these kernels:
    /// 0.3-0.5 µs per launch at decode sizes on the H200). After a kernel that does not,
    /// it measured 0.04-0.33 µs slower per launch, so it is off by default. Ignored on
    /// older devices and on HIP; `KERNELS_PDL=1` turns it on in [`RuntimeOptions::from_env`].
    /// Tables are tuned with plain launches.
    pub pdl: bool,
}

/// The `serve` policy, the default cache folder ([`DiskCache::from_env`]), default
/// search options, plain launches.
impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            policy: Policy::Serve,
            cache: DiskCache::from_env(),
            tune: TuneOptions::default(),
            pdl: false,
        }
    }
}

impl RuntimeOptions {
    /// From the environment: `KERNELS_TUNING` (policy; unknown is an error),
    /// `KERNELS_CACHE_DIR` (cache folder) and `KERNELS_PDL` (see [`RuntimeOptions::pdl`];
    /// a value other than 0/1/on/off/true/false is an error).
    pub fn from_env() -> Result<RuntimeOptions> {
        Ok(RuntimeOptions {
            policy: Policy::from_env()?,
            cache: DiskCache::from_env(),
            tune: TuneOptions::default(),
            pdl: crate::pdl_from_env()?,
        })
    }
}

/// A resolved config with its loaded kernels: what an op launches.
pub struct Prepared<B: Backend, C> {
    /// The config and where it came from.
    pub resolved: Resolved<C>,
    /// The loaded kernel of each launch of a call, in launch order
    /// ([`PlannedKernel::variants`]; one for most families, never none). Shared, so a
    /// memo hit clones no list.
    pub kernels: CallKernels<B>,
    /// Set when the online policy searched and failed, so the analytic default is used.
    pub search_failure: Option<String>,
}

impl<B: Backend, C> Prepared<B, C> {
    /// The kernel of the first launch (the only one, for most families).
    pub fn kernel(&self) -> &Arc<B::Kernel> {
        &self.kernels[0]
    }
}

impl<B: Backend, C: Clone> Clone for Prepared<B, C> {
    fn clone(&self) -> Self {
        Prepared {
            resolved: self.resolved.clone(),
            kernels: self.kernels.clone(),
            search_failure: self.search_failure.clone(),
        }
    }
}

impl<B: Backend, C: std::fmt::Debug> std::fmt::Debug for Prepared<B, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("resolved", &self.resolved)
            .field("kernels", &self.kernels)
            .field("search_failure", &self.search_failure)
            .finish()
    }
}

/// The loaded kernel of each launch of one call, in launch order
/// ([`PlannedKernel::variants`]), shared so a copy clones no list.
pub type CallKernels<B> = Arc<[Arc<<B as Backend>::Kernel>]>;

/// Per alignment class, the config fitted to it and the variants of its call.
type ClassVariants<C> = (AlignClass, C, Result<Vec<Variant>>);

/// A loaded kernel and where its module came from.
pub(crate) type Loaded<B> = (Arc<<B as Backend>::Kernel>, ModuleOrigin);
/// A config resolution and its search failure, if any.
type Picked<C> = (Resolved<C>, Option<String>);

/// The runtime of one device on backend `B` ([`crate::CudaRuntime`],
/// `HipRuntime`). Share it (`Arc<Runtime<B>>`, or [`Runtime::shared`]); every
/// method takes `&self`.
///
/// ```no_run
/// use kernels_core::{CudaDevice, CudaRuntime, KernelSource, Variant, LaunchDims};
/// static SRC: KernelSource = KernelSource::new(
///     "fill", "extern \"C\" __global__ void fill(float* x, float v) { x[threadIdx.x] = v; }", "fnv1a64:0");
/// let rt = CudaRuntime::new(CudaDevice::open(0)?)?;
/// let stream = rt.device().new_stream()?;
/// let mut x = stream.alloc_zeros::<f32>(256).unwrap();
/// let k = rt.kernel(&stream, &SRC, &Variant::new("fill"))?;
/// use cudarc::driver::PushKernelArg;
/// let mut l = k.builder(&stream, LaunchDims::linear(1, 256))?;
/// l.arg(&mut x).arg(&1.0f32);
/// unsafe { l.launch() }?;
/// # Ok::<(), kernels_core::Error>(())
/// ```
pub struct Runtime<B: Backend> {
    device: B::Device,
    compiler: B::Compiler,
    compiler_id: String,
    arch: String,
    options: RuntimeOptions,
    /// Module cache key text -> loaded kernel.
    modules: Modules<B::Kernel>,
    /// (source, variant) -> loaded kernel: the fast path in front of `modules`.
    by_variant: VariantMemo<B::Kernel>,
    /// Per kernel type: (key, batch, alignment) -> prepared config and kernel.
    typed: TypedMemo,
    counters: Counters,
}

impl<B: Backend> std::fmt::Debug for Runtime<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", &B::NAME)
            .field("device", &self.info().name)
            .field("arch", &self.arch)
            .field("compiler", &self.compiler_id)
            .field("policy", &self.options.policy)
            .field("cache", &self.options.cache.root())
            .finish()
    }
}

impl<B: Backend> Runtime<B> {
    /// A runtime for `device` with options from the environment.
    pub fn new(device: B::Device) -> Result<Runtime<B>> {
        Runtime::with_options(device, RuntimeOptions::from_env()?)
    }

    /// A runtime for `device` with explicit options. Fails when the backend's compiler
    /// (NVRTC, hipRTC) is missing.
    pub fn with_options(device: B::Device, options: RuntimeOptions) -> Result<Runtime<B>> {
        let compiler = B::compiler()?;
        // Temporary files of writers killed mid-write would otherwise stay forever; a
        // cache folder that cannot be listed fails no launch (writes report their errors).
        let _ = options.cache.remove_stale_temporaries();
        Ok(Runtime {
            arch: B::info(&device).compile_arch(),
            compiler_id: B::compiler_id(&compiler),
            compiler,
            device,
            options,
            modules: Modules::default(),
            by_variant: VariantMemo::default(),
            typed: TypedMemo::default(),
            counters: Counters::default(),
        })
    }

    /// The same runtime resolving configs under `policy`.
    pub fn with_policy(mut self, policy: Policy) -> Runtime<B> {
        self.options.policy = policy;
        self
    }

    /// The same runtime with these options for the online policy's searches.
    pub fn with_tune_options(mut self, tune: TuneOptions) -> Runtime<B> {
        self.options.tune = tune;
        self
    }

    /// The process-wide runtime of device `ordinal` on this backend, created on first
    /// use with options from the environment. Ops that get only a stream use this.
    pub fn shared(ordinal: usize) -> Result<Arc<Runtime<B>>> {
        type Shared = Mutex<HashMap<(TypeId, usize), Arc<dyn Any + Send + Sync>>>;
        static SHARED: OnceLock<Shared> = OnceLock::new();
        let map = SHARED.get_or_init(|| Mutex::new(HashMap::new()));
        let mut map = lock(map);
        let id = (TypeId::of::<B>(), ordinal);
        if let Some(rt) = map
            .get(&id)
            .and_then(|rt| rt.clone().downcast::<Runtime<B>>().ok())
        {
            return Ok(rt);
        }
        let rt = Arc::new(Runtime::new(B::open(ordinal)?)?);
        map.insert(id, rt.clone());
        Ok(rt)
    }

    /// Whether this runtime launches kernels of `source` with programmatic dependent
    /// launch: asked for in the options, allowed by the source, a backend that has it,
    /// and an sm_90+ device.
    pub fn pdl_for(&self, source: &KernelSource) -> bool {
        launches_with_pdl(
            self.options.pdl,
            B::PROGRAMMATIC_LAUNCH,
            source,
            self.info().compute_capability,
            false,
        )
    }

    /// Whether this runtime launches `variant` of `source` with programmatic dependent
    /// launch: as [`Runtime::pdl_for`], or a [`Variant::chained`] launch where the
    /// source, backend and device allow it.
    pub fn pdl_for_variant(&self, source: &KernelSource, variant: &Variant) -> bool {
        launches_with_pdl(
            self.options.pdl,
            B::PROGRAMMATIC_LAUNCH,
            source,
            self.info().compute_capability,
            variant.is_chained(),
        )
    }

    /// The device.
    pub fn device(&self) -> &B::Device {
        &self.device
    }

    /// What the device is, as search spaces, variants and launch plans see it.
    pub fn info(&self) -> &DeviceInfo {
        B::info(&self.device)
    }

    /// The compiler (NVRTC or hipRTC, its version, the codegen environment).
    pub fn compiler(&self) -> &B::Compiler {
        &self.compiler
    }

    /// The compiler's name and version, as tables and cache keys record it.
    pub fn compiler_id(&self) -> &str {
        &self.compiler_id
    }

    /// The arch modules are compiled for (`sm_90a`, `gfx942`).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The resolution policy.
    pub fn policy(&self) -> Policy {
        self.options.policy
    }

    /// The disk cache.
    pub fn cache(&self) -> &DiskCache {
        &self.options.cache
    }

    /// The options.
    pub fn options(&self) -> &RuntimeOptions {
        &self.options
    }

    /// What the runtime has done so far.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// The last cache write error, if any (writes that fail do not fail launches).
    pub fn last_cache_error(&self) -> Option<String> {
        self.counters.last_cache_error()
    }

    fn key_parts<'a>(&'a self, kernel: &'a str, fingerprint: &'a str) -> CacheKeyParts<'a> {
        let info = self.info();
        CacheKeyParts {
            crate_version: CRATE_VERSION,
            kernel,
            source_fingerprint: fingerprint,
            compiler: &self.compiler_id,
            arch: &self.arch,
            device_name: &info.name,
            sm_count: info.sm_count,
            codegen_env: B::codegen_env(&self.compiler),
            variant: Component::DoesNotApply,
            candidates: Component::DoesNotApply,
            static_key: Component::DoesNotApply,
            batch: Component::DoesNotApply,
            alignment: Component::DoesNotApply,
        }
    }

    /// The module cache key of `variant` of `source` on this device: the exact compile
    /// (entry point and every compiler option) is the variant component.
    pub fn module_key(&self, source: &KernelSource, variant: &Variant) -> CacheKey {
        let options = B::compile_options(&self.compiler, variant, &self.arch);
        // A chained variant compiles the same code but is loaded to launch differently:
        // its own key keeps the two loaded kernels apart.
        let chained = if variant.is_chained() { "\nchained" } else { "" };
        let compile = format!("{}\n{}{chained}", variant.entry(), options.join("\n"));
        let mut parts = self.key_parts(source.name, source.fingerprint);
        parts.variant = Component::Applies(&compile);
        cache_key(&parts)
    }

    /// The online tuning cache key of a problem on this device, for a search timed with
    /// plain launches; `candidates` is the search's [`crate::candidates_digest`]. (Where
    /// [`Runtime::pdl_for`] holds, the runtime's own searches time launches with
    /// programmatic dependent launch and add [`crate::PDL_TUNING_VARIANT`] as the
    /// variant component.)
    pub fn tuning_key(
        &self,
        kernel: &str,
        fingerprint: &str,
        static_key: &str,
        batch: u64,
        alignment: AlignClass,
        candidates: &str,
    ) -> CacheKey {
        self.search_key(
            false,
            kernel,
            fingerprint,
            static_key,
            batch,
            alignment,
            candidates,
        )
    }

    /// [`Runtime::tuning_key`], with [`crate::PDL_TUNING_VARIANT`] as the variant where
    /// `pdl` (a search timed with programmatic dependent launch: its results are kept
    /// apart from plain ones, and `tables promote` skips them).
    #[allow(clippy::too_many_arguments)]
    fn search_key(
        &self,
        pdl: bool,
        kernel: &str,
        fingerprint: &str,
        static_key: &str,
        batch: u64,
        alignment: AlignClass,
        candidates: &str,
    ) -> CacheKey {
        let mut parts = self
            .key_parts(kernel, fingerprint)
            .for_tuning(static_key, batch, alignment, candidates);
        if pdl {
            parts.variant = Component::Applies(crate::PDL_TUNING_VARIANT);
        }
        cache_key(&parts)
    }

    /// The cache key of an offline (`kernels tune`) result: [`Runtime::tuning_key`]
    /// for 16-byte aligned buffers (what the tuner allocates), with the timing method
    /// as the variant component, so results timed one way never resume a run timed
    /// the other.
    pub fn offline_tuning_key(
        &self,
        kernel: &str,
        fingerprint: &str,
        static_key: &str,
        batch: u64,
        method: crate::TimingMethod,
        candidates: &str,
    ) -> CacheKey {
        let mut parts =
            self.key_parts(kernel, fingerprint)
                .for_tuning(static_key, batch, AlignClass::A16, candidates);
        let timing = format!("timing={method}");
        parts.variant = Component::Applies(&timing);
        cache_key(&parts)
    }

    /// The loaded kernel for `variant` of `source`: from the memo (no compile, no disk
    /// access), else the disk cache, else compiled now. A memo miss while `stream` is
    /// capturing a graph is [`Error::CompileWhileCapturing`].
    pub fn kernel(
        &self,
        stream: &B::Stream,
        source: &KernelSource,
        variant: &Variant,
    ) -> Result<Arc<B::Kernel>> {
        self.kernel_with_origin(stream, source, variant).map(|(k, _)| k)
    }

    /// The loaded kernel of every launch of a call of `config` for `key`
    /// ([`PlannedKernel::variants`], in order), each as [`Runtime::kernel`] loads it.
    pub fn kernels<K: PlannedKernel>(
        &self,
        stream: &B::Stream,
        key: &K::Key,
        config: &K::Config,
    ) -> Result<CallKernels<B>> {
        variants_of::<K>(self.info(), key, config)?
            .iter()
            .map(|v| self.kernel(stream, K::SOURCE, v))
            .collect::<Result<Vec<_>>>()
            .map(Into::into)
    }

    /// [`Runtime::kernel`], also saying where the module came from.
    pub fn kernel_with_origin(
        &self,
        stream: &B::Stream,
        source: &KernelSource,
        variant: &Variant,
    ) -> Result<Loaded<B>> {
        if let Some(kernel) = self.by_variant.hit(source, variant, &self.counters) {
            return Ok((kernel, ModuleOrigin::Memo));
        }
        let key = self.module_key(source, variant);
        let loaded = match self.modules.hit(&key, &self.counters) {
            Some(hit) => hit,
            None => {
                refuse_if_capturing::<B>(stream, source.name, &variant.to_string())?;
                let (image, origin) = self.image(source, variant, &key)?;
                (self.load(&image, origin, source, variant, &key)?, origin)
            }
        };
        self.by_variant.insert(source, variant, &loaded.0);
        Ok(loaded)
    }

    /// The module image: the disk cache's (checked), else compiled now and stored.
    /// Needs no device, so it runs on compile threads.
    fn image(
        &self,
        source: &KernelSource,
        variant: &Variant,
        key: &CacheKey,
    ) -> Result<(Image, ModuleOrigin)> {
        cached_image(&self.options.cache, key, &self.counters, B::loads, || {
            self.compile_and_store(source, variant, key)
        })
    }

    /// A fresh compile of `variant` of `source`, stored in the disk cache under `key`.
    fn compile_and_store(&self, source: &KernelSource, variant: &Variant, key: &CacheKey) -> Result<Image> {
        compile_and_store(&self.options.cache, key, &self.counters, || {
            B::compile(&self.compiler, source, variant, &self.arch)
        })
    }

    /// Loads an image on the device and memoizes the kernel. A cached image the driver
    /// refuses is recompiled once.
    fn load(
        &self,
        image: &Image,
        origin: ModuleOrigin,
        source: &KernelSource,
        variant: &Variant,
        key: &CacheKey,
    ) -> Result<Arc<B::Kernel>> {
        let pdl = self.pdl_for_variant(source, variant);
        self.modules.load(
            image,
            origin,
            key,
            &self.counters,
            |image| B::load(&self.device, image, source, variant, pdl),
            || self.compile_and_store(source, variant, key),
        )
    }

    /// Parallel precompile: compiles (or reads from the disk cache) every job on a pool
    /// of threads, one per core (the compilers are thread-safe across programs), then
    /// loads the modules. Identical jobs compile once. One result per job, in order; a
    /// failure is that job's error (the compiler's log for a compile error).
    pub fn precompile(&self, jobs: &[(KernelSource, Variant)]) -> Vec<Result<ModuleOrigin>> {
        self.precompile_with(jobs, 0)
    }

    /// [`Runtime::precompile`] on `threads` compile threads (0: one per core; 1: serial).
    pub fn precompile_with(
        &self,
        jobs: &[(KernelSource, Variant)],
        threads: usize,
    ) -> Vec<Result<ModuleOrigin>> {
        self.precompile_kernels(jobs, threads)
            .into_iter()
            .map(|r| r.map(|(_, o)| o))
            .collect()
    }

    pub(crate) fn precompile_kernels(
        &self,
        jobs: &[(KernelSource, Variant)],
        threads: usize,
    ) -> Vec<Result<Loaded<B>>> {
        self.modules.precompile(
            jobs,
            threads,
            &self.counters,
            |source, variant| self.module_key(source, variant),
            |source, variant, key| self.image(source, variant, key),
            |image, origin, source, variant, key| self.load(&image, origin, source, variant, key),
        )
    }

    /// The kernels of each config's call for `key` ([`PlannedKernel::variants`]),
    /// compiled as [`Runtime::precompile`] does (in parallel, each distinct variant
    /// once), in the order of `configs`. A config whose variants do not all compile and
    /// load gets the first error.
    pub(crate) fn precompile_calls<K: PlannedKernel>(
        &self,
        key: &K::Key,
        configs: &[K::Config],
        threads: usize,
    ) -> Vec<Result<CallKernels<B>>> {
        let info = self.info();
        let mut jobs: Vec<(KernelSource, Variant)> = Vec::new();
        let spans: Vec<Result<std::ops::Range<usize>>> = configs
            .iter()
            .map(|c| {
                let variants = variants_of::<K>(info, key, c)?;
                let start = jobs.len();
                jobs.extend(variants.into_iter().map(|v| (*K::SOURCE, v)));
                Ok(start..jobs.len())
            })
            .collect();
        let loaded = self.precompile_kernels(&jobs, threads);
        spans
            .into_iter()
            .map(|span| {
                loaded[span?]
                    .iter()
                    .map(|r| r.as_ref().map(|(k, _)| k.clone()).map_err(Clone::clone))
                    .collect::<Result<Vec<_>>>()
                    .map(Into::into)
            })
            .collect()
    }

    // ---- typed resolution -------------------------------------------------------

    /// Resolves the config for `key` and `batch` under the runtime's policy and loads
    /// its kernel, for 16-byte-aligned buffers. Memo hits touch neither compiler nor
    /// disk. Under the online policy a miss searches on a problem the kernel allocates
    /// ([`Tunable::tuning_inputs`]). A memo miss while `stream` captures a graph is an
    /// error.
    pub fn resolve<K: Tunable>(
        &self,
        stream: &B::Stream,
        key: &K::Key,
        batch: u64,
    ) -> Result<Prepared<B, K::Config>> {
        check_batch::<K>(key, batch)?;
        let mkey = (key.clone(), batch, AlignClass::A16);
        self.typed
            .get_or_resolve::<K, _>(mkey, &self.counters.memo_hits, || {
                let (p, _ran) = self.resolve_and_load::<K>(stream, key, batch, AlignClass::A16, None)?;
                Ok(p)
            })
    }

    /// A memo miss of [`Runtime::resolve`] and [`Runtime::run`]: refuses while `stream`
    /// captures a graph, resolves under the policy (searching on `problem` when given
    /// and the policy searches) and loads the kernel. Also says whether the search
    /// already ran the winner on `problem`. The caller memoizes.
    fn resolve_and_load<K: Tunable>(
        &self,
        stream: &B::Stream,
        key: &K::Key,
        batch: u64,
        align: AlignClass,
        problem: Option<&K::Problem<'_>>,
    ) -> Result<(Prepared<B, K::Config>, bool)> {
        refuse_if_capturing::<B>(stream, K::SCHEMA.kernel, "(unresolved)")?;
        let (outcome, ran) = self.resolve_config::<K>(stream, key, batch, align, problem);
        let kernels = self.kernels::<K>(stream, key, &outcome.resolved.config)?;
        let p = Prepared {
            resolved: outcome.resolved,
            kernels,
            search_failure: outcome.failure,
        };
        Ok((p, ran))
    }

    /// Runs the kernel on `problem` with the config the policy resolves for the
    /// problem's shape and alignment class, and says which config and where it came
    /// from. Under the online policy a first call searches on the caller's own buffers
    /// (restoring and zeroing them between runs); the search ends with one plain run of
    /// the winner, so the buffers hold exactly one run's result either way.
    pub fn run<K: Tunable>(
        &self,
        stream: &B::Stream,
        problem: &K::Problem<'_>,
    ) -> Result<Prepared<B, K::Config>> {
        let (key, batch) = K::problem_shape(problem);
        check_batch::<K>(&key, batch)?;
        let align = K::alignment(problem);
        let mkey = (key.clone(), batch, align);
        if let Some(p) = self.typed.get::<K, Prepared<B, K::Config>>(&mkey) {
            bump(&self.counters.memo_hits);
            launch::<B, K>(&p.kernels, stream, &p.resolved.config, problem)?;
            return Ok(p);
        }
        let (p, ran) = self.resolve_and_load::<K>(stream, &key, batch, align, Some(problem))?;
        if !ran {
            launch::<B, K>(&p.kernels, stream, &p.resolved.config, problem)?;
        }
        self.typed.put::<K, _>(mkey, p.clone());
        Ok(p)
    }

    /// Launches `problem` with an explicit `config`, bypassing resolution (tests,
    /// benchmarks, A/B runs); its variant is compiled on first use. A config the kernel
    /// does not accept for this problem on this device is an error naming `config`.
    pub fn launch_config<K: PlannedKernel>(
        &self,
        stream: &B::Stream,
        config: &K::Config,
        problem: &K::Problem<'_>,
    ) -> Result<()> {
        let (key, batch) = K::problem_shape(problem);
        let info = self.info();
        check_config::<K>(info, &key, batch, config)?;
        let kernels = self.kernels::<K>(stream, &key, config)?;
        launch::<B, K>(&kernels, stream, config, problem)
    }

    /// Warms every shape a model needs at start-up: resolves each under the policy,
    /// then compiles all distinct variants in parallel and memoizes them, so later
    /// launches (and graph captures) compile nothing. One result per shape, the config
    /// for 16-byte-aligned buffers.
    ///
    /// Every alignment class is prepared, not only the aligned one: a problem whose
    /// pointers or strides are less aligned (odd column counts, views at an offset) gets
    /// the aligned config narrowed to its class ([`PlannedKernel::fit_alignment`]), so
    /// it too is captured in a graph without compiling. Such a class is not searched
    /// under the online policy, since `warm` has no problem of that alignment.
    pub fn warm<K: Tunable>(
        &self,
        stream: &B::Stream,
        shapes: &[(K::Key, u64)],
    ) -> Vec<Result<Prepared<B, K::Config>>> {
        let info = self.info();
        let mut resolved: Vec<Result<Picked<K::Config>>> = Vec::new();
        for (key, batch) in shapes {
            let mkey = (key.clone(), *batch, AlignClass::A16);
            let r = match check_batch::<K>(key, *batch) {
                Err(e) => Err(e),
                Ok(()) => match self.typed.get::<K, Prepared<B, K::Config>>(&mkey) {
                    Some(p) => Ok((p.resolved, p.search_failure)),
                    None => {
                        let (o, _) = self.resolve_config::<K>(stream, key, *batch, AlignClass::A16, None);
                        Ok((o.resolved, o.failure))
                    }
                },
            };
            resolved.push(r);
        }
        // Per shape, the config of each alignment class (the aligned one first), and
        // the distinct variants their calls need.
        let per_class: Vec<Vec<ClassVariants<K::Config>>> = shapes
            .iter()
            .zip(&resolved)
            .map(|((key, _), r)| match r {
                Err(_) => Vec::new(),
                Ok((res, _)) => AlignClass::ALL
                    .iter()
                    .rev()
                    .map(|&class| {
                        let config = K::fit_alignment(info, key, res.config.clone(), class);
                        let variants = variants_of::<K>(info, key, &config);
                        (class, config, variants)
                    })
                    .collect(),
            })
            .collect();
        let mut jobs: Vec<(KernelSource, Variant)> = Vec::new();
        for (_, _, variants) in per_class.iter().flatten() {
            for variant in variants.iter().flatten() {
                if !jobs.iter().any(|(_, v)| v == variant) {
                    jobs.push((*K::SOURCE, variant.clone()));
                }
            }
        }
        let kernels = self.precompile_kernels(&jobs, 0);
        let loaded_one = |variant: &Variant| -> Result<Arc<B::Kernel>> {
            let i = jobs.iter().position(|(_, v)| v == variant);
            match i.and_then(|i| kernels.get(i)) {
                Some(Ok((kernel, _))) => Ok(kernel.clone()),
                Some(Err(e)) => Err(e.clone()),
                None => Err(Error::kernel(K::SCHEMA.kernel, "not compiled")),
            }
        };
        let loaded = |variants: Result<Vec<Variant>>| -> Result<CallKernels<B>> {
            variants?
                .iter()
                .map(loaded_one)
                .collect::<Result<Vec<_>>>()
                .map(Into::into)
        };
        shapes
            .iter()
            .zip(resolved)
            .zip(per_class)
            .map(|(((key, batch), r), classes)| {
                let (res, failure) = r?;
                let mut aligned = None;
                for (class, config, variants) in classes {
                    let p = Prepared {
                        resolved: Resolved {
                            config,
                            ..res.clone()
                        },
                        kernels: loaded(variants)?,
                        search_failure: failure.clone(),
                    };
                    self.typed.put::<K, _>((key.clone(), *batch, class), p.clone());
                    if class == AlignClass::A16 {
                        aligned = Some(p);
                    }
                }
                aligned.ok_or_else(|| Error::kernel(K::SCHEMA.kernel, "no aligned config"))
            })
            .collect()
    }

    /// Walks the policy. Returns the outcome and whether a search already ran the
    /// chosen config once on `problem` (so the caller must not launch it again).
    fn resolve_config<K: Tunable>(
        &self,
        stream: &B::Stream,
        key: &K::Key,
        batch: u64,
        align: AlignClass,
        problem: Option<&K::Problem<'_>>,
    ) -> (crate::Outcome<K::Config>, bool) {
        let mut steps = Steps::<B, K> {
            rt: self,
            stream,
            key,
            batch,
            align,
            problem,
            ran: false,
            tuning_key: std::cell::OnceCell::new(),
        };
        let mut outcome = resolve_in_order(self.options.policy, &mut steps);
        outcome.resolved.config = K::fit_alignment(self.info(), key, outcome.resolved.config, align);
        let ran = steps.ran && outcome.resolved.source == Source::OnlineSearch;
        (outcome, ran)
    }

    /// The tuning record of a finished search, or why there is none.
    pub fn record_of<K: PlannedKernel>(&self, report: &crate::TuneReport<K::Config>) -> Result<TuneRecord> {
        crate::tune_record::<K>(report, &self.info().name, &self.compiler_id)
    }
}

/// One call of `config` on `problem` with `kernels` (compiled from the config's
/// [`PlannedKernel::variants`], in order): the plan's [`PlannedKernel::launches`], which
/// check what the config needs of the problem and name the argument otherwise, then
/// the backend's launch of each, in order. An error launches nothing.
pub fn launch<B: Backend, K: PlannedKernel>(
    kernels: &[Arc<B::Kernel>],
    stream: &B::Stream,
    config: &K::Config,
    problem: &K::Problem<'_>,
) -> Result<()> {
    let first = kernels
        .first()
        .ok_or_else(|| Error::kernel(K::SCHEMA.kernel, "no compiled kernel to launch"))?;
    let launches = K::launches(first.info(), config, problem)?;
    // SAFETY: the PlannedKernel contract: each launch matches its variant's entry point
    // and stays within the problem's buffers.
    unsafe { launch_planned::<B>(kernels, stream, &launches) }
}

/// Enqueues `launches` on `stream`, the i-th with `kernels[i]`; an error, launching
/// nothing, when their numbers differ. For ops that plan a call themselves.
///
/// # Safety
/// Each launch's arguments must match its kernel's entry point and stay within
/// buffers that live until the kernels have run.
pub unsafe fn launch_planned<B: Backend>(
    kernels: &[Arc<B::Kernel>],
    stream: &B::Stream,
    launches: &Launches,
) -> Result<()> {
    let name = kernels.first().map_or("(none)", |k| k.name());
    crate::launch::check_count(name, kernels.len(), launches.len())?;
    for (kernel, (dims, args)) in kernels.iter().zip(launches.iter()) {
        // SAFETY: the caller's promise.
        unsafe { B::launch(kernel, stream, *dims, args) }?;
    }
    Ok(())
}

/// The variants of one call of `config` for `key` ([`PlannedKernel::variants`]); an
/// error naming the kernel when there are none or more than [`MAX_LAUNCHES`].
pub(crate) fn variants_of<K: PlannedKernel>(
    device: &DeviceInfo,
    key: &K::Key,
    config: &K::Config,
) -> Result<Vec<Variant>> {
    let variants = K::variants(device, key, config);
    if variants.is_empty() || variants.len() > MAX_LAUNCHES {
        return Err(Error::kernel(
            K::SCHEMA.kernel,
            format!(
                "a call has {} variants; 1 to {MAX_LAUNCHES} are allowed",
                variants.len()
            ),
        ));
    }
    Ok(variants)
}

/// [`Error::CompileWhileCapturing`] when `stream` is capturing a graph.
fn refuse_if_capturing<B: Backend>(stream: &B::Stream, kernel: &str, variant: &str) -> Result<()> {
    if B::is_capturing(stream)? {
        return Err(Error::CompileWhileCapturing {
            kernel: kernel.to_string(),
            variant: variant.to_string(),
        });
    }
    Ok(())
}

/// The runtime's answers to a policy's steps for one problem.
struct Steps<'r, 's, 'p, 'q, B: Backend, K: Tunable> {
    rt: &'r Runtime<B>,
    stream: &'s B::Stream,
    key: &'s K::Key,
    batch: u64,
    align: AlignClass,
    problem: Option<&'q K::Problem<'p>>,
    ran: bool,
    /// The tuning cache key, built on first use: the disk lookup and the store after
    /// a search share it (its candidates digest formats every variant of the space).
    tuning_key: std::cell::OnceCell<CacheKey>,
}

impl<B: Backend, K: Tunable> Steps<'_, '_, '_, '_, B, K> {
    fn tuning_key(&self) -> &CacheKey {
        self.tuning_key.get_or_init(|| {
            self.rt.search_key(
                self.rt.pdl_for(K::SOURCE),
                K::SCHEMA.kernel,
                K::SOURCE.fingerprint,
                &canonical_key::<K>(self.key),
                self.batch,
                self.align,
                &crate::candidates_digest::<K>(self.rt.info(), self.key, self.batch),
            )
        })
    }
}

impl<B: Backend, K: Tunable> ResolutionSteps<K::Config> for Steps<'_, '_, '_, '_, B, K> {
    fn memo(&mut self) -> Option<Resolved<K::Config>> {
        // The runtime checks its memo before walking the policy.
        None
    }

    fn table(&mut self) -> Option<Resolved<K::Config>> {
        let target = self.rt.info().target()?;
        let r = resolve_serve::<K>(target, self.key, self.batch);
        (r.source != Source::Default).then_some(r)
    }

    fn disk_cache(&mut self) -> Option<K::Config> {
        crate::cached_config::<K>(
            &self.rt.options.cache,
            self.tuning_key(),
            self.rt.info().tuning_target(),
            self.key,
            self.batch,
            &self.rt.counters.corrupt_files,
        )
    }

    fn search(&mut self) -> Result<K::Config, String> {
        bump(&self.rt.counters.searches);
        let opts = self.rt.options.tune.clone();
        let report = match self.problem {
            Some(p) => self.rt.tune::<K>(self.stream, p, &opts),
            None => {
                let owned =
                    crate::backend::Owned::<B>::upload(self.stream, &K::tuning_inputs(self.key, self.batch))
                        .map_err(|e| e.to_string())?;
                let p = K::tuning_problem(self.key, self.batch, owned.addresses());
                self.rt.tune::<K>(self.stream, &p, &opts)
            }
        };
        let record = self.rt.record_of::<K>(&report).map_err(|e| e.to_string())?;
        // A winner whose final run failed is neither cached nor served.
        if let Err(e) = &report.final_run {
            return Err(format!("the chosen config's final run failed: {e}"));
        }
        self.ran = self.problem.is_some();
        self.rt.counters.note_cache_write(self.rt.options.cache.store(
            Section::Tuning,
            self.tuning_key(),
            "tune",
            record.to_json().as_bytes(),
        ));
        Ok(report.chosen)
    }

    fn analytic_default(&mut self) -> K::Config {
        K::analytic_default(self.rt.info().tuning_target(), self.key, self.batch)
    }

    fn remember(&mut self, _resolved: &Resolved<K::Config>) {
        // The runtime memoizes once the kernel is loaded too.
    }
}

/// Whether a launch uses programmatic dependent launch: the backend has it, the source
/// allows it, the device is sm_90 or newer, and either the runtime asks for it
/// (`options_pdl`) or the launch is [`Variant::chained`] after a kernel of its own call.
fn launches_with_pdl(
    options_pdl: bool,
    backend_has: bool,
    source: &KernelSource,
    compute_capability: (i32, i32),
    chained: bool,
) -> bool {
    backend_has && source.pdl && compute_capability.0 >= 9 && (options_pdl || chained)
}

#[cfg(test)]
mod tests {
    use super::*;

    static MARKED: KernelSource = KernelSource::new("k", "", "fnv1a64:0").programmatic_launch();
    static PLAIN: KernelSource = KernelSource::new("k", "", "fnv1a64:0");

    #[test]
    fn chained_launches_use_pdl_where_the_source_backend_and_device_allow() {
        // Asked for by the runtime or chained: on.
        assert!(launches_with_pdl(true, true, &MARKED, (9, 0), false));
        assert!(launches_with_pdl(false, true, &MARKED, (9, 0), true));
        // Neither: off.
        assert!(!launches_with_pdl(false, true, &MARKED, (9, 0), false));
        // A source that does not wait first, a backend without it, or a device before
        // sm_90: off even when chained.
        assert!(!launches_with_pdl(true, true, &PLAIN, (9, 0), true));
        assert!(!launches_with_pdl(true, false, &MARKED, (9, 0), true));
        assert!(!launches_with_pdl(true, true, &MARKED, (8, 9), true));
    }
}
