//! What a runtime did, the same for every backend: where each module came from and
//! counters of compiles, cache hits, corrupt files and searches.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Where a module came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ModuleOrigin {
    /// Already loaded in this process.
    Memo,
    /// Read from the disk cache and loaded (no compile).
    Disk,
    /// Compiled now (and stored in the disk cache).
    Compiled,
}

/// Counters of what a runtime did, for tests and `kernels info`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Modules compiled (NVRTC or hipRTC).
    pub compiled: u64,
    /// Modules read from the disk cache.
    pub disk_hits: u64,
    /// Lookups answered by the in-process memos.
    pub memo_hits: u64,
    /// Cache files found corrupt, or refused by the driver at load (recompiled or
    /// searched again).
    pub corrupt_files: u64,
    /// Cache writes that failed (the result was still used).
    pub cache_write_errors: u64,
    /// Online searches run (the CUDA runtime; the HIP runtime does not search).
    pub searches: u64,
}

/// The live counters behind [`Stats`], and the last cache write error.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) compiled: AtomicU64,
    pub(crate) disk_hits: AtomicU64,
    pub(crate) memo_hits: AtomicU64,
    pub(crate) corrupt_files: AtomicU64,
    pub(crate) cache_write_errors: AtomicU64,
    pub(crate) searches: AtomicU64,
    last_cache_error: Mutex<Option<String>>,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Stats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            compiled: g(&self.compiled),
            disk_hits: g(&self.disk_hits),
            memo_hits: g(&self.memo_hits),
            corrupt_files: g(&self.corrupt_files),
            cache_write_errors: g(&self.cache_write_errors),
            searches: g(&self.searches),
        }
    }

    /// Counts and remembers a failed cache write (a write that fails fails no compile,
    /// launch or search).
    pub(crate) fn note_cache_write(&self, r: crate::Result<()>) {
        if let Err(e) = r {
            bump(&self.cache_write_errors);
            *lock(&self.last_cache_error) = Some(e.to_string());
        }
    }

    /// The last cache write error, if any.
    pub(crate) fn last_cache_error(&self) -> Option<String> {
        lock(&self.last_cache_error).clone()
    }
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Locks a memo. Inserts are single calls, so a poisoned memo is still consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
