//! Compiles `tests/c/capi_check.c` against `include/kernels.h` and the built
//! `libkernels_capi.so` with the system C compiler, and runs it: the error paths and
//! the no-device message without a GPU, the ops against a CPU reference with one.
//! Also checks that the header compiles as C++. Skips, saying so, where no `cc` is
//! installed.

use std::path::PathBuf;
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folder holding the library cargo built with this test: `target/<profile>` when
/// the package itself was built, else `target/<profile>/deps`, where a test build
/// leaves it.
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/c_program-<hash>
    let deps = exe.parent().expect("target/<profile>/deps").to_path_buf();
    let profile = deps.parent().expect("target/<profile>").to_path_buf();
    [profile, deps]
        .into_iter()
        .find(|d| d.join("libkernels_capi.so").exists())
        .expect("no libkernels_capi.so next to the test: the cdylib is built with the crate's tests")
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed ({}):\n{text}", out.status);
    text
}

#[test]
fn the_c_program_passes() {
    if !have("cc") {
        eprintln!("SKIPPED: no `cc` on PATH; the C program was not compiled");
        return;
    }
    let lib = library_dir();
    let exe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("capi_check");
    let include = crate_dir().join("include");
    run(Command::new("cc")
        .args([
            "-std=c11",
            "-D_POSIX_C_SOURCE=200809L",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg("-I")
        .arg(&include)
        .arg(crate_dir().join("tests/c/capi_check.c"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", lib.display()))
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lkernels_capi", "-ldl", "-lpthread", "-lm"]));
    let out = run(&mut Command::new(&exe));
    println!("{out}");
    assert!(out.contains("capi_check: ok"), "{out}");
}

#[test]
fn the_header_compiles_as_cpp() {
    if !have("c++") {
        eprintln!("SKIPPED: no `c++` on PATH; the header was not compiled as C++");
        return;
    }
    let probe = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("header_probe.cpp");
    std::fs::write(
        &probe,
        "#include \"kernels.h\"\nstatic_assert(sizeof(kernels_shape) == 24, \"kernels_shape layout\");\n\
         static_assert(sizeof(kernels_gemm_shape) == 32, \"kernels_gemm_shape layout\");\n\
         static_assert(sizeof(kernels_moe_shape) == 48, \"kernels_moe_shape layout\");\n\
         int main() { return kernels_abi_version() == KERNELS_ABI_VERSION ? 0 : 1; }\n",
    )
    .unwrap();
    run(Command::new("c++")
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
        .arg(crate_dir().join("include"))
        .arg(&probe));
}
