//! Parallel precompile shared by the CUDA and HIP runtimes: memo hits first, one
//! compile per distinct module key on a pool of threads (disk cache or compiler, no
//! device needed), then the modules loaded on the calling thread, and duplicates given
//! their representative's result.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::counters::{bump, lock};
use crate::{CacheKey, Error, KernelSource, ModuleOrigin, Result, Variant};

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
