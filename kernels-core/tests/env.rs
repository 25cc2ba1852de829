//! The environment variables the runtime reads. One test in its own binary, because it
//! sets process-wide variables.

use std::path::PathBuf;

use kernels_core::{
    cache::{codegen_env, default_cache_dir},
    Policy, RuntimeOptions,
};

#[test]
fn environment_picks_policy_cache_folder_and_codegen_flags() {
    std::env::remove_var("KERNELS_TUNING");
    assert_eq!(Policy::from_env().unwrap(), Policy::Serve);
    for (v, p) in [
        ("serve", Policy::Serve),
        ("online", Policy::Online),
        ("default", Policy::DefaultOnly),
        ("", Policy::Serve),
    ] {
        std::env::set_var("KERNELS_TUNING", v);
        assert_eq!(Policy::from_env().unwrap(), p, "KERNELS_TUNING={v}");
    }
    std::env::set_var("KERNELS_TUNING", "aggressive");
    let e = Policy::from_env().unwrap_err().to_string();
    assert!(e.contains("`aggressive`"), "{e}");
    let e = RuntimeOptions::from_env().unwrap_err().to_string();
    assert!(
        e.contains("`aggressive`"),
        "runtime options must refuse it too: {e}"
    );
    std::env::remove_var("KERNELS_TUNING");

    std::env::remove_var("KERNELS_PDL");
    assert!(!RuntimeOptions::from_env().unwrap().pdl, "off unless asked for");
    for on in ["1", "true", "YES", "On"] {
        std::env::set_var("KERNELS_PDL", on);
        assert!(RuntimeOptions::from_env().unwrap().pdl, "KERNELS_PDL={on}");
    }
    std::env::set_var("KERNELS_PDL", "no");
    assert!(!RuntimeOptions::from_env().unwrap().pdl);
    std::env::set_var("KERNELS_PDL", "sometimes");
    let e = RuntimeOptions::from_env().unwrap_err().to_string();
    assert!(e.contains("KERNELS_PDL") && e.contains("`sometimes`"), "{e}");
    std::env::remove_var("KERNELS_PDL");

    std::env::set_var("KERNELS_CACHE_DIR", "/somewhere/kc");
    assert_eq!(default_cache_dir(), Some(PathBuf::from("/somewhere/kc")));
    std::env::set_var("KERNELS_CACHE_DIR", "");
    assert_eq!(
        default_cache_dir(),
        None,
        "empty KERNELS_CACHE_DIR disables the cache"
    );
    std::env::remove_var("KERNELS_CACHE_DIR");
    std::env::set_var("XDG_CACHE_HOME", "/xdg");
    assert_eq!(default_cache_dir(), Some(PathBuf::from("/xdg/kernels")));
    std::env::remove_var("XDG_CACHE_HOME");
    std::env::set_var("HOME", "/home/u");
    assert_eq!(default_cache_dir(), Some(PathBuf::from("/home/u/.cache/kernels")));

    std::env::remove_var("KERNELS_NVRTC_FLAGS");
    std::env::remove_var("KERNELS_CUDA_INCLUDE");
    assert!(codegen_env().is_empty());
    std::env::set_var("KERNELS_NVRTC_FLAGS", "--use_fast_math");
    assert_eq!(
        codegen_env(),
        [("KERNELS_NVRTC_FLAGS".to_string(), "--use_fast_math".to_string())]
    );

    // KERNELS_REQUIRE_GPU: any true value turns a GPU test's skip into a failure, a
    // false one or none lets it skip, and a value that is no boolean is an error.
    let skip = || {
        std::panic::catch_unwind(|| kernels_core::testing::skip_or_fail("t", "no GPU here"))
            .map_err(|p| p.downcast_ref::<String>().cloned().unwrap_or_default())
    };
    std::env::remove_var("KERNELS_REQUIRE_GPU");
    assert_eq!(skip(), Ok(()));
    for on in ["1", "true", "True", "yes", "ON"] {
        std::env::set_var("KERNELS_REQUIRE_GPU", on);
        let e = skip().expect_err(on);
        assert!(e.contains("KERNELS_REQUIRE_GPU is on but no GPU here"), "{e}");
    }
    for off in ["0", "false", "no", "off", ""] {
        std::env::set_var("KERNELS_REQUIRE_GPU", off);
        assert_eq!(skip(), Ok(()), "KERNELS_REQUIRE_GPU={off}");
    }
    std::env::set_var("KERNELS_REQUIRE_GPU", "please");
    let e = skip().unwrap_err();
    assert!(
        e.contains("KERNELS_REQUIRE_GPU: `please` is not a boolean"),
        "{e}"
    );
    std::env::remove_var("KERNELS_REQUIRE_GPU");
}
