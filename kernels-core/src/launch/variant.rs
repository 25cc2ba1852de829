//! What gets compiled: a kernel family's embedded source and one variant of it.

use std::borrow::Cow;
use std::fmt::{self, Display};

use crate::{Error, Result};

/// A kernel family's device source, embedded in the binary with `include_str!` so a
/// deployed engine needs no source tree. Sources must be self-contained: NVRTC on a
/// serving machine finds no CUDA toolkit headers. Shared text reaches a source in one
/// of two ways: compiled before it as one program (the [`crate::PRELUDE`], with
/// [`KernelSource::with_preamble`]), or passed in `headers` to resolve
/// `#include "name"`.
///
/// ```
/// use kernels_core::KernelSource;
/// static SOURCE: KernelSource = KernelSource::new(
///     "scale",
///     "extern \"C\" __global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }",
///     "fnv1a64:0000000000000000",
/// )
/// .with_preamble(&["#define KD_EXAMPLE 1\n"]);
/// assert_eq!(SOURCE.name, "scale");
/// assert!(SOURCE.text().starts_with("#define KD_EXAMPLE 1\nextern"));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// The kernel family (cache files and NVRTC logs are named after it).
    pub name: &'static str,
    /// Texts compiled before `code`, in order, as one program with it (the prelude).
    pub preamble: &'static [&'static str],
    /// The family's own CUDA C++ source text, compiled after the preamble.
    pub code: &'static str,
    /// Headers the source includes, as (include name, text).
    pub headers: &'static [(&'static str, &'static str)],
    /// Fingerprint of the preamble, `code` and `headers` (the crate's
    /// `SOURCE_FINGERPRINT`, from `build-tools`), part of every cache key.
    pub fingerprint: &'static str,
    /// Whether every entry point waits for the previous grid (`griddepcontrol.wait`,
    /// the prelude's `kd::pdl_wait()`) before its first global memory access, so a
    /// runtime with [`crate::RuntimeOptions::pdl`] may launch it with programmatic
    /// dependent launch. Set it with [`KernelSource::programmatic_launch`]; never on a
    /// source that reads or writes global memory before that wait.
    pub pdl: bool,
    /// The file names the fingerprint covers, in its order: one per preamble part, then
    /// one for `code` (the crate's `SOURCE_FILES`, from `build-tools`). Empty where
    /// unknown. Tools that compare this source with another version of its files
    /// ([`crate::tune::OldSource`]) need them.
    pub files: &'static [&'static str],
}

impl KernelSource {
    /// A source with no preamble and no headers.
    pub const fn new(name: &'static str, code: &'static str, fingerprint: &'static str) -> KernelSource {
        KernelSource {
            name,
            preamble: &[],
            code,
            headers: &[],
            fingerprint,
            pdl: false,
            files: &[],
        }
    }

    /// The same source with the names of its files, as its fingerprint covers them:
    /// the preamble's parts, then `code` (see [`KernelSource::files`]).
    pub const fn with_files(self, files: &'static [&'static str]) -> KernelSource {
        KernelSource { files, ..self }
    }

    /// The same source, marked safe to launch with programmatic dependent launch (see
    /// [`KernelSource::pdl`]).
    pub const fn programmatic_launch(self) -> KernelSource {
        KernelSource { pdl: true, ..self }
    }

    /// The same source compiled after `preamble` (e.g. `&[kernels_core::PRELUDE]`), the
    /// texts joined with nothing between them.
    pub const fn with_preamble(self, preamble: &'static [&'static str]) -> KernelSource {
        KernelSource { preamble, ..self }
    }

    /// The same source with `headers` available to `#include "name"`.
    pub const fn with_headers(self, headers: &'static [(&'static str, &'static str)]) -> KernelSource {
        KernelSource { headers, ..self }
    }

    /// The program text the compiler is given: the preamble, then `code`.
    pub fn text(&self) -> Cow<'static, str> {
        if self.preamble.is_empty() {
            return Cow::Borrowed(self.code);
        }
        let mut text =
            String::with_capacity(self.preamble.iter().map(|p| p.len()).sum::<usize>() + self.code.len());
        for part in self.preamble {
            text.push_str(part);
        }
        text.push_str(self.code);
        Cow::Owned(text)
    }
}

/// One compiled variant of a source: the entry point, the `-D` defines that specialise
/// it, and compiler hints. Each distinct variant is its own module.
///
/// ```
/// use kernels_core::Variant;
/// let v = Variant::new("rmsnorm_kernel").define("THREADS", 128).define("T", "bf16").max_registers(64);
/// assert_eq!(v.to_string(), "rmsnorm_kernel -DTHREADS=128 -DT=bf16 maxrregcount=64");
/// assert!(v.validate().is_ok());
/// assert!(Variant::new("k").define("BAD NAME", 1).validate().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    entry: String,
    defines: Vec<(String, String)>,
    max_registers: Option<u32>,
    chained: bool,
}

impl Variant {
    /// A variant launching the `extern "C"` function `entry`.
    pub fn new(entry: impl Into<String>) -> Variant {
        Variant {
            entry: entry.into(),
            defines: Vec::new(),
            max_registers: None,
            chained: false,
        }
    }

    /// Adds `-D name=value`.
    pub fn define(mut self, name: impl Into<String>, value: impl Display) -> Variant {
        self.defines.push((name.into(), value.to_string()));
        self
    }

    /// Caps registers per thread (`--maxrregcount`), a compiler hint some configs carry.
    pub fn max_registers(mut self, n: u32) -> Variant {
        self.max_registers = Some(n);
        self
    }

    /// Marks a launch that comes right after another kernel of the same call, one of
    /// this library's, which lets its dependents start (`kd::pdl_launch_dependents`):
    /// where the device and backend have programmatic dependent launch and the source
    /// allows it ([`KernelSource::pdl`]), the runtime launches it that way whatever
    /// [`crate::RuntimeOptions::pdl`] says, so its launch overlaps the tail of the kernel
    /// before. The code compiled is the same; the module is cached apart from the
    /// unmarked variant's, as it is loaded to launch differently.
    pub fn chained(mut self) -> Variant {
        self.chained = true;
        self
    }

    /// Whether the variant is [`Variant::chained`].
    pub fn is_chained(&self) -> bool {
        self.chained
    }

    /// The entry point's name.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// The defines, in the order given.
    pub fn defines(&self) -> &[(String, String)] {
        &self.defines
    }

    /// The register cap, if any.
    pub fn register_cap(&self) -> Option<u32> {
        self.max_registers
    }

    /// Checks the entry and define names are C identifiers, values have no control
    /// characters, no define repeats and a register cap is in 16..=255. The error
    /// names the bad part.
    pub fn validate(&self) -> Result<()> {
        if !is_ident(&self.entry) {
            return Err(Error::invalid(
                "variant.entry",
                format!("`{}` is not a C identifier", self.entry),
            ));
        }
        for (i, (name, value)) in self.defines.iter().enumerate() {
            if !is_ident(name) {
                return Err(Error::invalid(
                    "variant.define",
                    format!("`{name}` is not a C identifier"),
                ));
            }
            if value.is_empty() || value.chars().any(char::is_control) {
                return Err(Error::invalid(
                    "variant.define",
                    format!("value of `{name}` is empty or has control characters: {value:?}"),
                ));
            }
            if self.defines[..i].iter().any(|(n, _)| n == name) {
                return Err(Error::invalid(
                    "variant.define",
                    format!("`{name}` is defined twice"),
                ));
            }
        }
        if let Some(r) = self.max_registers {
            if !(16..=255).contains(&r) {
                return Err(Error::invalid(
                    "variant.max_registers",
                    format!("{r} is outside 16..=255"),
                ));
            }
        }
        Ok(())
    }

    /// The NVRTC options for this variant on `arch`: the arch, C++17, the defines, the
    /// register cap, then the codegen environment (`KERNELS_CUDA_INCLUDE` as `-I`,
    /// `KERNELS_NVRTC_FLAGS` split on whitespace). This list is exactly what is compiled
    /// and is part of the module cache key.
    pub fn nvrtc_options(&self, arch: &str, codegen_env: &[(String, String)]) -> Vec<String> {
        let mut o = vec![format!("--gpu-architecture={arch}"), "-std=c++17".to_string()];
        o.extend(self.defines.iter().map(|(n, v)| format!("-D{n}={v}")));
        if let Some(r) = self.max_registers {
            o.push(format!("--maxrregcount={r}"));
        }
        for (name, value) in codegen_env {
            match name.as_str() {
                "KERNELS_CUDA_INCLUDE" if !value.is_empty() => o.push(format!("-I{value}")),
                "KERNELS_NVRTC_FLAGS" => o.extend(value.split_whitespace().map(str::to_string)),
                _ => {}
            }
        }
        o
    }
}

impl Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.entry)?;
        for (n, v) in &self.defines {
            write!(f, " -D{n}={v}")?;
        }
        if let Some(r) = self.max_registers {
            write!(f, " maxrregcount={r}")?;
        }
        if self.chained {
            f.write_str(" chained")?;
        }
        Ok(())
    }
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_exact_and_ordered() {
        let v = Variant::new("k")
            .define("A", 1)
            .define("B", "x")
            .max_registers(32);
        let env = vec![
            (
                "KERNELS_NVRTC_FLAGS".to_string(),
                " --use_fast_math  -lineinfo ".to_string(),
            ),
            (
                "KERNELS_CUDA_INCLUDE".to_string(),
                "/usr/local/cuda/include".to_string(),
            ),
        ];
        assert_eq!(
            v.nvrtc_options("sm_90a", &env),
            [
                "--gpu-architecture=sm_90a",
                "-std=c++17",
                "-DA=1",
                "-DB=x",
                "--maxrregcount=32",
                "--use_fast_math",
                "-lineinfo",
                "-I/usr/local/cuda/include"
            ]
        );
    }

    #[test]
    fn a_chained_variant_says_so_and_compiles_the_same() {
        let plain = Variant::new("k").define("A", 1);
        let chained = plain.clone().chained();
        assert!(chained.is_chained() && !plain.is_chained());
        assert_eq!(chained.to_string(), "k -DA=1 chained");
        assert_ne!(plain, chained);
        assert_eq!(
            plain.nvrtc_options("sm_90a", &[]),
            chained.nvrtc_options("sm_90a", &[])
        );
    }

    #[test]
    fn text_is_the_preamble_then_the_code_with_nothing_between() {
        let plain = KernelSource::new("k", "int k;\n", "fnv1a64:0");
        assert!(matches!(plain.text(), Cow::Borrowed("int k;\n")));
        let after = plain.with_preamble(&["// a\n", "int a;"]);
        assert_eq!(after.text(), "// a\nint a;int k;\n");
        assert_eq!(after.code, "int k;\n");
    }

    #[test]
    fn validation_names_the_bad_part() {
        let cases = [
            (Variant::new("1k"), "variant.entry"),
            (Variant::new("k").define("", 1), "variant.define"),
            (Variant::new("k").define("A", ""), "variant.define"),
            (Variant::new("k").define("A", "x\ny"), "variant.define"),
            (Variant::new("k").define("A", 1).define("A", 2), "defined twice"),
            (Variant::new("k").max_registers(8), "variant.max_registers"),
        ];
        for (v, want) in cases {
            let e = v.validate().unwrap_err().to_string();
            assert!(e.contains(want), "{v}: {e}");
        }
    }
}
