//! GPU-free integration tests: behaviour without a GPU, and two processes writing the
//! disk cache at once.

use std::process::Command;

use kernels_core::{
    cache::{cache_key, CacheKeyParts, Lookup, Section},
    Compiler, CudaDevice, DiskCache, Error,
};

#[test]
fn no_driver_or_gpu_is_an_error_never_a_panic() {
    match CudaDevice::open(0) {
        Ok(d) => eprintln!(
            "a GPU is present: {} ({})",
            d.info().name,
            d.info().compile_arch()
        ),
        Err(e) => {
            assert!(
                matches!(
                    e,
                    Error::NoDriver | Error::NoGpu(_) | Error::UnsupportedDevice { .. }
                ),
                "unexpected error kind: {e:?}"
            );
            let msg = e.to_string();
            assert!(
                msg.contains("CUDA") || msg.contains("compute capability"),
                "{msg}"
            );
        }
    }
    match CudaDevice::open(1_000_000) {
        Ok(_) => panic!("device 1000000 opened"),
        Err(Error::BadOrdinal { ordinal, count }) => {
            assert_eq!(ordinal, 1_000_000);
            assert!(count >= 1);
        }
        Err(Error::NoDriver | Error::NoGpu(_)) => {}
        Err(e) => panic!("unexpected error: {e:?}"),
    }
    match Compiler::detect() {
        Ok(c) => assert!(c.id().starts_with("nvrtc ")),
        Err(e) => assert!(matches!(e, Error::NoNvrtc), "{e:?}"),
    }
}

fn writer_key(n: u64) -> kernels_core::cache::CacheKey {
    cache_key(&CacheKeyParts {
        device_name: "test",
        sm_count: 1,
        ..kernels_core::testing::tuning_key_parts("writer", "fnv1a64:0", "k=1", n)
    })
}

const WRITER_DIR: &str = "KERNELS_TEST_WRITER_DIR";
const WRITER_ID: &str = "KERNELS_TEST_WRITER_ID";
const PER_WRITER: u64 = 150;

/// The child half of `two_processes_writing_at_once_lose_nothing` (run by it; does
/// nothing when run alone).
#[test]
#[ignore = "helper process for two_processes_writing_at_once_lose_nothing"]
fn cache_writer_child() {
    let (Ok(dir), Ok(id)) = (std::env::var(WRITER_DIR), std::env::var(WRITER_ID)) else {
        return;
    };
    let id: u64 = id.parse().expect("writer id");
    let cache = DiskCache::at(dir);
    for i in 0..PER_WRITER {
        let n = id * PER_WRITER + i;
        cache
            .store(
                Section::Tuning,
                &writer_key(10_000 + n),
                "tune",
                &vec![(n % 251) as u8; 3000],
            )
            .expect("store");
        // every writer also rewrites one shared key, with its own bytes
        cache
            .store(Section::Tuning, &writer_key(1), "tune", &vec![id as u8; 20_000])
            .expect("store shared");
    }
}

#[test]
fn two_processes_writing_at_once_lose_nothing() {
    let dir = std::env::temp_dir().join(format!("kernels-core-writers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..2u64)
        .map(|id| {
            Command::new(&exe)
                .args(["cache_writer_child", "--exact", "--ignored", "--test-threads=1"])
                .env(WRITER_DIR, &dir)
                .env(WRITER_ID, id.to_string())
                .spawn()
                .expect("spawn writer")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("wait").success(), "a writer process failed");
    }
    let cache = DiskCache::at(&dir);
    for n in 0..2 * PER_WRITER {
        match cache.load(Section::Tuning, &writer_key(10_000 + n)) {
            Lookup::Hit(e) => assert_eq!(e.payload, vec![(n % 251) as u8; 3000], "entry {n}"),
            other => panic!("entry {n} lost: {other:?}"),
        }
    }
    match cache.load(Section::Tuning, &writer_key(1)) {
        Lookup::Hit(e) => {
            assert_eq!(e.payload.len(), 20_000);
            assert!(e.payload.iter().all(|&b| b == e.payload[0]), "torn shared entry");
        }
        other => panic!("shared entry: {other:?}"),
    }
    // Nothing but whole entries: no temporary files left.
    assert_eq!(cache.usage().unwrap().0, 2 * PER_WRITER + 1);
    let stray = std::fs::read_dir(dir.join("v1").join("tuning"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .map(|e| e.path().extension().is_none_or(|x| x != "kc"))
                .unwrap_or(true)
        })
        .count();
    assert_eq!(stray, 0, "temporary files left behind");
    std::fs::remove_dir_all(&dir).unwrap();
}
