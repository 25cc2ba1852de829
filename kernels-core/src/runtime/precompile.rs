//! The runtime's modules and memos. Parallel
//! precompile: memo hits first, one compile per distinct module key on a pool of
//! threads (disk cache or compiler, no device needed), then the modules loaded on the
//! calling thread, and duplicates given their representative's result. Also the
//! loaded-module memo ([`Modules`]), the module image from the disk cache or the
//! compiler ([`cached_image`], [`compile_and_store`]), the per-kernel-type memo of
//! resolutions ([`TypedMemo`]) and the checks of a batch and of an explicit config.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tuned::TunedKernel;

use super::counters::{bump, lock, Counters};
use crate::{
    AlignClass, CacheKey, DeviceInfo, DiskCache, Error, Image, ImageKind, KernelSource, Lookup, ModuleOrigin,
    PlannedKernel, Result, Section, Variant,
};

/// A runtime's loaded kernels by (source name, source fingerprint, variant): the memo
/// `Runtime::kernel` looks in before it builds the module cache key. Within one
/// runtime the key's text is a function of these (its compiler, architecture, device
/// and code-generation settings are the runtime's own), so a launch that names its
/// variant pays one hash of the variant instead of formatting and hashing the key.
/// Buckets by the triple's hash; entries are compared whole, so a hash collision
/// never returns another variant's kernel.
pub(crate) struct VariantMemo<Kn>(Mutex<HashMap<u64, Vec<VariantSlot<Kn>>>>);

type VariantSlot<Kn> = (&'static str, &'static str, Variant, Arc<Kn>);

impl<Kn> Default for VariantMemo<Kn> {
    fn default() -> Self {
        VariantMemo(Mutex::new(HashMap::new()))
    }
}

impl<Kn> VariantMemo<Kn> {
    fn hash(source: &KernelSource, variant: &Variant) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (source.name, source.fingerprint, variant).hash(&mut h);
        h.finish()
    }

    /// The kernel memoized for `variant` of `source`, counted as a memo hit.
    pub(crate) fn hit(
        &self,
        source: &KernelSource,
        variant: &Variant,
        counters: &Counters,
    ) -> Option<Arc<Kn>> {
        let memo = lock(&self.0);
        let kernel = memo
            .get(&Self::hash(source, variant))?
            .iter()
            .find(|(n, f, v, _)| *n == source.name && *f == source.fingerprint && v == variant)
            .map(|(.., k)| k.clone())?;
        bump(&counters.memo_hits);
        Some(kernel)
    }

    /// Memoizes `kernel` for `variant` of `source` (a second insert of the same
    /// triple keeps the first).
    pub(crate) fn insert(&self, source: &KernelSource, variant: &Variant, kernel: &Arc<Kn>) {
        let mut memo = lock(&self.0);
        let bucket = memo.entry(Self::hash(source, variant)).or_default();
        if !bucket
            .iter()
            .any(|(n, f, v, _)| *n == source.name && *f == source.fingerprint && v == variant)
        {
            bucket.push((source.name, source.fingerprint, variant.clone(), kernel.clone()));
        }
    }
}

/// A runtime's loaded kernels, by module cache key text.
pub(crate) struct Modules<Kn>(Mutex<HashMap<String, Arc<Kn>>>);

impl<Kn> Default for Modules<Kn> {
    fn default() -> Self {
        Modules(Mutex::new(HashMap::new()))
    }
}

impl<Kn> Modules<Kn> {
    /// The kernel loaded under `key`, counted as a memo hit in `counters`.
    pub(crate) fn hit(&self, key: &CacheKey, counters: &Counters) -> Option<(Arc<Kn>, ModuleOrigin)> {
        let modules = lock(&self.0);
        let kernel = modules.get(key.text())?;
        bump(&counters.memo_hits);
        Some((kernel.clone(), ModuleOrigin::Memo))
    }

    /// Loads `image` (from `origin`) with `try_load` and memoizes the kernel under `key`.
    /// A cached image (from the disk) that does not load counts as a corrupt file in
    /// `counters` and is replaced by `recompile` once. Another thread may have loaded
    /// the same key meanwhile: its kernel is kept and returned.
    pub(crate) fn load(
        &self,
        image: &Image,
        origin: ModuleOrigin,
        key: &CacheKey,
        counters: &Counters,
        try_load: impl Fn(&Image) -> Result<Kn>,
        recompile: impl FnOnce() -> Result<Image>,
    ) -> Result<Arc<Kn>> {
        let kernel = match try_load(image) {
            Ok(k) => k,
            Err(_) if origin == ModuleOrigin::Disk => {
                bump(&counters.corrupt_files);
                let fresh = recompile()?;
                try_load(&fresh)?
            }
            Err(e) => return Err(e),
        };
        let mut modules = lock(&self.0);
        Ok(modules
            .entry(key.text().to_string())
            .or_insert_with(|| Arc::new(kernel))
            .clone())
    }

    /// [`precompile_jobs`] over these modules, job i's module key being
    /// `module_key(job i)`; memo hits count in `counters`.
    pub(crate) fn precompile<I: Send>(
        &self,
        jobs: &[(KernelSource, Variant)],
        threads: usize,
        counters: &Counters,
        module_key: impl Fn(&KernelSource, &Variant) -> CacheKey,
        image: impl Fn(&KernelSource, &Variant, &CacheKey) -> Result<(I, ModuleOrigin)> + Sync,
        load: impl Fn(I, ModuleOrigin, &KernelSource, &Variant, &CacheKey) -> Result<Arc<Kn>>,
    ) -> Vec<Result<(Arc<Kn>, ModuleOrigin)>> {
        let keys: Vec<CacheKey> = jobs.iter().map(|(s, v)| module_key(s, v)).collect();
        precompile_jobs(jobs, &keys, threads, &self.0, &counters.memo_hits, image, load)
    }
}

/// The module image under `key`: the disk cache's when the file is intact and its kind
/// is one `usable` accepts (a disk hit in `counters`), else `compile`d now. A corrupt
/// file, or an image of a kind refused, counts as a corrupt file and is compiled again.
pub(crate) fn cached_image(
    cache: &DiskCache,
    key: &CacheKey,
    counters: &Counters,
    usable: impl Fn(ImageKind) -> bool,
    compile: impl FnOnce() -> Result<Image>,
) -> Result<(Image, ModuleOrigin)> {
    match cache.load(Section::Modules, key) {
        Lookup::Hit(e) => match ImageKind::from_name(&e.kind).filter(|k| usable(*k)) {
            Some(kind) => {
                bump(&counters.disk_hits);
                return Ok((
                    Image {
                        kind,
                        bytes: e.payload,
                    },
                    ModuleOrigin::Disk,
                ));
            }
            None => bump(&counters.corrupt_files),
        },
        Lookup::Corrupt { .. } => bump(&counters.corrupt_files),
        Lookup::Miss => {}
    }
    Ok((compile()?, ModuleOrigin::Compiled))
}

/// The image `compile` makes (counted as compiled in `counters`), stored under `key` in
/// the cache's modules; a failed store is noted in `counters`, not an error.
pub(crate) fn compile_and_store(
    cache: &DiskCache,
    key: &CacheKey,
    counters: &Counters,
    compile: impl FnOnce() -> Result<Image>,
) -> Result<Image> {
    let image = compile()?;
    bump(&counters.compiled);
    counters.note_cache_write(cache.store(Section::Modules, key, image.kind.name(), &image.bytes));
    Ok(image)
}

/// The key of a runtime's resolutions: static key, batch and alignment class.
pub(crate) type MemoKey<K> = (<K as TunedKernel>::Key, u64, AlignClass);

/// Per kernel type, a runtime's resolutions: [`MemoKey`] -> what was resolved and
/// loaded for it (`P`, the runtime's prepared kernel).
#[derive(Default)]
pub(crate) struct TypedMemo(Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>);

impl TypedMemo {
    /// The resolution memoized for `key` of kernel `K`.
    pub(crate) fn get<K: PlannedKernel, P: Clone + Send + Sync + 'static>(
        &self,
        key: &MemoKey<K>,
    ) -> Option<P> {
        let typed = lock(&self.0);
        let memo = typed
            .get(&TypeId::of::<K>())?
            .downcast_ref::<HashMap<MemoKey<K>, P>>()?;
        memo.get(key).cloned()
    }

    /// Memoizes `prepared` for `key` of kernel `K`.
    pub(crate) fn put<K: PlannedKernel, P: Send + Sync + 'static>(&self, key: MemoKey<K>, prepared: P) {
        let mut typed = lock(&self.0);
        let entry = typed
            .entry(TypeId::of::<K>())
            .or_insert_with(|| Box::new(HashMap::<MemoKey<K>, P>::new()));
        if let Some(memo) = entry.downcast_mut::<HashMap<MemoKey<K>, P>>() {
            memo.insert(key, prepared);
        }
    }

    /// The resolution memoized for `key` (counted in `hits`), else `resolve`d now and
    /// memoized.
    pub(crate) fn get_or_resolve<K: PlannedKernel, P: Clone + Send + Sync + 'static>(
        &self,
        key: MemoKey<K>,
        hits: &AtomicU64,
        resolve: impl FnOnce() -> Result<P>,
    ) -> Result<P> {
        if let Some(p) = self.get::<K, P>(&key) {
            bump(hits);
            return Ok(p);
        }
        let p = resolve()?;
        self.put::<K, P>(key, p.clone());
        Ok(p)
    }
}

/// A batch of 0 is an error naming `batch`, the kernel and `key`.
pub(crate) fn check_batch<K: PlannedKernel>(key: &K::Key, batch: u64) -> Result<()> {
    if batch == 0 {
        return Err(Error::invalid(
            "batch",
            format!(
                "kernel `{}` key {key:?}: batch must be at least 1",
                K::SCHEMA.kernel
            ),
        ));
    }
    Ok(())
}

/// An explicit `config` that `K` does not accept for (`key`, `batch`) on `device` is
/// an error naming `config`.
pub(crate) fn check_config<K: PlannedKernel>(
    device: &DeviceInfo,
    key: &K::Key,
    batch: u64,
    config: &K::Config,
) -> Result<()> {
    if !K::accepts(device.tuning_target(), key, batch, config) {
        return Err(Error::invalid(
            "config",
            format!("{config:?} does not fit {key:?} on {}", device.name),
        ));
    }
    Ok(())
}

/// One compile thread's result: the image and where it came from.
type ImageSlot<I> = Mutex<Option<Result<(I, ModuleOrigin)>>>;

/// Compiles and loads every job (`keys[i]` is job i's module key) on `threads` compile
/// threads (0: one per core; 1: serial). A key already in `modules` is a memo hit
/// (counted in `memo_hits`); otherwise `image` gets the job's compiled image (run on
/// the compile threads) and `load` loads it (on this thread: loading needs the bound
/// device context, and is fast). Identical keys compile once; the others report
/// [`ModuleOrigin::Memo`]. One result per job, in order.
#[allow(clippy::too_many_arguments)]
pub(crate) fn precompile_jobs<K: Clone, I: Send>(
    jobs: &[(KernelSource, Variant)],
    keys: &[CacheKey],
    threads: usize,
    modules: &Mutex<HashMap<String, K>>,
    memo_hits: &AtomicU64,
    image: impl Fn(&KernelSource, &Variant, &CacheKey) -> Result<(I, ModuleOrigin)> + Sync,
    load: impl Fn(I, ModuleOrigin, &KernelSource, &Variant, &CacheKey) -> Result<K>,
) -> Vec<Result<(K, ModuleOrigin)>> {
    let mut results: Vec<Option<Result<(K, ModuleOrigin)>>> = (0..jobs.len()).map(|_| None).collect();
    // Memo hits, and one representative per distinct key for the rest.
    let mut todo: Vec<usize> = Vec::new();
    let mut first_of: HashMap<&str, usize> = HashMap::new();
    {
        let modules = lock(modules);
        for (i, key) in keys.iter().enumerate() {
            if let Some(k) = modules.get(key.text()) {
                bump(memo_hits);
                results[i] = Some(Ok((k.clone(), ModuleOrigin::Memo)));
            } else if let std::collections::hash_map::Entry::Vacant(e) = first_of.entry(key.text()) {
                e.insert(i);
                todo.push(i);
            }
        }
    }
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(4, |n| n.get()),
        n => n,
    }
    .min(todo.len())
    .max(1);
    let images: Vec<ImageSlot<I>> = todo.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let t = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = todo.get(t) else { break };
                let (source, variant) = &jobs[i];
                *lock(&images[t]) = Some(image(source, variant, &keys[i]));
            });
        }
    });
    for (t, &i) in todo.iter().enumerate() {
        let (source, variant) = &jobs[i];
        results[i] = Some(match lock(&images[t]).take() {
            Some(Ok((img, origin))) => load(img, origin, source, variant, &keys[i]).map(|k| (k, origin)),
            Some(Err(e)) => Err(e),
            None => Err(Error::kernel(source.name, "compile thread did not finish")),
        });
    }
    // Duplicates share their representative's result.
    for i in 0..jobs.len() {
        if results[i].is_none() {
            let rep = first_of.get(keys[i].text()).copied().unwrap_or(i);
            results[i] = Some(match &results[rep] {
                Some(Ok((k, _))) => Ok((k.clone(), ModuleOrigin::Memo)),
                Some(Err(e)) => Err(e.clone()),
                None => Err(Error::kernel(jobs[i].0.name, "not compiled")),
            });
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::kernel("", "not compiled"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::search::dummy::Dummy;
    use crate::{cache_key, CacheKeyParts, Component};

    static SRC: KernelSource = KernelSource::new("toy", "", "fnv1a64:1");

    fn key(variant: &str) -> CacheKey {
        cache_key(&CacheKeyParts {
            crate_version: "0.1.0",
            kernel: "toy",
            source_fingerprint: "fnv1a64:1",
            compiler: "nvrtc 13.0",
            arch: "sm_90a",
            device_name: "NVIDIA H200",
            sm_count: 132,
            codegen_env: &[],
            variant: Component::Applies(variant),
            candidates: Component::DoesNotApply,
            static_key: Component::DoesNotApply,
            batch: Component::DoesNotApply,
            alignment: Component::DoesNotApply,
        })
    }

    #[test]
    fn images_come_from_the_disk_or_the_compiler_and_loads_keep_one_kernel() {
        let dir = std::env::temp_dir().join(format!("kernels-core-modules-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = DiskCache::at(&dir);
        let counters = Counters::default();
        let cubin = |bytes: &[u8]| Image {
            kind: ImageKind::Cubin,
            bytes: bytes.to_vec(),
        };
        let compile = |bytes: &'static [u8]| move || Ok(cubin(bytes));
        let any = |_: ImageKind| true;
        let got = |r: Result<(Image, ModuleOrigin)>| r.map(|(i, o)| (i.bytes, o)).unwrap();
        let stats = || {
            let s = counters.snapshot();
            (s.compiled, s.disk_hits, s.corrupt_files, s.cache_write_errors)
        };

        // A miss compiles and stores; the next lookup is a disk hit.
        let image = cached_image(&cache, &key("a"), &counters, any, || {
            compile_and_store(&cache, &key("a"), &counters, compile(b"one"))
        });
        assert_eq!(got(image), (b"one".to_vec(), ModuleOrigin::Compiled));
        let image = cached_image(&cache, &key("a"), &counters, any, || unreachable!());
        assert_eq!(got(image), (b"one".to_vec(), ModuleOrigin::Disk));
        assert_eq!(stats(), (1, 1, 0, 0));
        // A kind the backend refuses is a corrupt file, compiled again.
        let code_objects = |k: ImageKind| k == ImageKind::CodeObject;
        let image = cached_image(&cache, &key("a"), &counters, code_objects, compile(b"two"));
        assert_eq!(got(image), (b"two".to_vec(), ModuleOrigin::Compiled));
        assert_eq!(stats(), (1, 1, 1, 0));
        // A store that fails is noted, not an error.
        let image = compile_and_store(&DiskCache::at(dir.join("a")), &key("b"), &counters, || {
            std::fs::write(dir.join("a"), "a file, not a folder").unwrap();
            Ok(cubin(b"three"))
        });
        assert_eq!(image.unwrap().bytes, b"three");
        assert_eq!(stats().3, 1);
        assert!(counters.last_cache_error().is_some());

        // A disk image that does not load is recompiled once; a compiled one is not.
        let modules = Modules::<String>::default();
        let load = |i: &Image| match i.bytes.as_slice() {
            b"bad" => Err(Error::kernel("toy", "refused")),
            b => Ok(String::from_utf8_lossy(b).into_owned()),
        };
        let k = modules.load(
            &cubin(b"bad"),
            ModuleOrigin::Disk,
            &key("c"),
            &counters,
            load,
            || Ok(cubin(b"fresh")),
        );
        assert_eq!(k.unwrap().as_str(), "fresh");
        assert_eq!(stats().2, 2);
        let e = modules.load(
            &cubin(b"bad"),
            ModuleOrigin::Compiled,
            &key("d"),
            &counters,
            load,
            || unreachable!(),
        );
        assert!(e.is_err());
        // The first kernel memoized under a key is kept.
        let k = modules.load(
            &cubin(b"other"),
            ModuleOrigin::Compiled,
            &key("c"),
            &counters,
            load,
            || unreachable!(),
        );
        assert_eq!(k.unwrap().as_str(), "fresh");
        let (k, origin) = modules.hit(&key("c"), &counters).unwrap();
        assert_eq!((k.as_str(), origin), ("fresh", ModuleOrigin::Memo));
        assert!(modules.hit(&key("d"), &counters).is_none());
        assert_eq!(counters.snapshot().memo_hits, 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    // SAFETY: no problem of it is ever launched.
    unsafe impl PlannedKernel for Dummy {
        type Problem<'a> = ();
        const SOURCE: &'static KernelSource = &SRC;
        fn search_space(_: &DeviceInfo, _: &u32, _: u64) -> Vec<u32> {
            Vec::new()
        }
        fn variant(_: &DeviceInfo, _: &u32, _: &u32) -> Variant {
            Variant::new("toy")
        }
        fn problem_shape(_: &()) -> (u32, u64) {
            (0, 1)
        }
        fn buffers(_: &()) -> Vec<crate::TuneBuffer> {
            Vec::new()
        }
        fn launch_args(_: &DeviceInfo, _: &u32, _: &()) -> Result<(crate::LaunchDims, crate::KernelArgs)> {
            Err(Error::invalid("problem", "toy kernels do not launch"))
        }
        fn reference(_: &(), _: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
            None
        }
        fn check_outputs(
            _: &(),
            _: &[Vec<u8>],
            _: &[Vec<u8>],
            _: crate::Expected<'_>,
        ) -> std::result::Result<(), String> {
            Err("toy kernels do not launch".into())
        }
    }

    #[test]
    fn the_typed_memo_resolves_once_per_key_and_batch_zero_is_refused() {
        let memo = TypedMemo::default();
        let hits = AtomicU64::new(0);
        let mut resolved = 0;
        for _ in 0..3 {
            let p = memo.get_or_resolve::<Dummy, String>((4096, 8, AlignClass::A16), &hits, || {
                resolved += 1;
                Ok("prepared".into())
            });
            assert_eq!(p.unwrap(), "prepared");
        }
        assert_eq!((resolved, hits.load(Ordering::Relaxed)), (1, 2));
        // Another alignment is another entry; a failed resolution memoizes nothing.
        let e = memo.get_or_resolve::<Dummy, String>((4096, 8, AlignClass::A4), &hits, || {
            Err(Error::invalid("search", "failed"))
        });
        assert!(e.is_err());
        assert_eq!(memo.get::<Dummy, String>(&(4096, 8, AlignClass::A4)), None);
        memo.put::<Dummy, String>((4096, 8, AlignClass::A4), "put".into());
        assert_eq!(
            memo.get::<Dummy, String>(&(4096, 8, AlignClass::A4)).as_deref(),
            Some("put")
        );

        assert!(check_batch::<Dummy>(&4096, 1).is_ok());
        let e = check_batch::<Dummy>(&4096, 0).unwrap_err().to_string();
        assert!(e.contains("`batch`") && e.contains("kernel `k` key 4096"), "{e}");
    }

    #[test]
    fn memo_hits_duplicates_and_failures_without_a_device() {
        // Jobs: a (memoized), b, b again, c (fails to compile), d.
        let names = ["a", "b", "b", "c", "d"];
        let jobs: Vec<(KernelSource, Variant)> = names.iter().map(|n| (SRC, Variant::new(*n))).collect();
        let keys: Vec<CacheKey> = names.iter().map(|n| key(n)).collect();
        let modules = Mutex::new(HashMap::from([(
            keys[0].text().to_string(),
            "a-loaded".to_string(),
        )]));
        let memo_hits = AtomicU64::new(0);
        let compiled = Mutex::new(Vec::new());
        for threads in [1, 3] {
            compiled.lock().unwrap().clear();
            memo_hits.store(0, Ordering::Relaxed);
            let out = precompile_jobs(
                &jobs,
                &keys,
                threads,
                &modules,
                &memo_hits,
                |_, v, _| {
                    compiled.lock().unwrap().push(v.entry().to_string());
                    if v.entry() == "c" {
                        Err(Error::kernel("toy", "does not compile"))
                    } else {
                        Ok((format!("{}-image", v.entry()), ModuleOrigin::Compiled))
                    }
                },
                |img: String, _, _, _, _| Ok(img.replace("image", "loaded")),
            );
            let mut c = compiled.lock().unwrap().clone();
            c.sort();
            assert_eq!(
                c,
                ["b", "c", "d"],
                "each distinct key compiles once, memo hits never"
            );
            assert_eq!(memo_hits.load(Ordering::Relaxed), 1);
            let got: Vec<std::result::Result<(String, ModuleOrigin), String>> =
                out.into_iter().map(|r| r.map_err(|e| e.to_string())).collect();
            assert_eq!(got[0], Ok(("a-loaded".into(), ModuleOrigin::Memo)));
            assert_eq!(got[1], Ok(("b-loaded".into(), ModuleOrigin::Compiled)));
            assert_eq!(
                got[2],
                Ok(("b-loaded".into(), ModuleOrigin::Memo)),
                "a duplicate shares its result"
            );
            assert!(got[3].as_ref().is_err_and(|e| e.contains("does not compile")));
            assert_eq!(got[4], Ok(("d-loaded".into(), ModuleOrigin::Compiled)));
        }
    }
}
