//! `include/kernels.h` and the Rust exports agree: every prototype (name, parameter
//! names and types, return type) against the `extern "C"` functions of `src/ffi.rs`,
//! the status, dtype and op constants against the crate's enums, the shape struct
//! against `KernelsShape`, and the ABI version. Both sides are parsed from source, so
//! an edit to one that is not made to the other fails here.

use std::collections::BTreeMap;

use kernels_capi::raw::gemm::LayoutCode;
use kernels_capi::raw::moe::RoutingCode;
use kernels_capi::{DTypeCode, Op, Status, ABI_VERSION};

const HEADER: &str = include_str!("../include/kernels.h");
const FFI: &str = include_str!("../src/ffi.rs");

/// A prototype: return type and `(name, type)` parameters, types in C spelling.
#[derive(Debug, PartialEq, Eq)]
struct Proto {
    ret: String,
    params: Vec<(String, String)>,
}

/// Strips `/* */` and `//` comments.
fn strip_c_comments(src: &str) -> String {
    let mut out = String::new();
    let mut rest = src;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        rest = rest[i..].split_once("*/").map_or("", |(_, after)| after);
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `const void *x` -> (`x`, `const void*`): the last word is the name, the rest the
/// type, with `*` attached to the type.
fn c_decl(decl: &str) -> (String, String) {
    let spaced = decl.replace('*', " * ");
    let words: Vec<&str> = spaced.split_whitespace().collect();
    let (name, ty) = words.split_last().expect("empty declaration");
    (name.to_string(), normalize_c_type(&ty.join(" ")))
}

fn normalize_c_type(ty: &str) -> String {
    ty.replace('*', " * ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" *", "*")
}

fn header_prototypes() -> BTreeMap<String, Proto> {
    let text = strip_c_comments(HEADER);
    let mut out = BTreeMap::new();
    for stmt in text.split(';') {
        let stmt = stmt.trim();
        let Some(decl) = stmt.strip_prefix("KERNELS_API ") else {
            continue;
        };
        let (head, params) = decl.split_once('(').expect("prototype without (");
        let params = params.trim_end().strip_suffix(')').expect("prototype without )");
        let (name, ret) = c_decl(head);
        let params = match params.trim() {
            "void" => vec![],
            p => p.split(',').map(c_decl).collect(),
        };
        assert!(
            out.insert(name.clone(), Proto { ret, params }).is_none(),
            "{name} declared twice"
        );
    }
    out
}

/// The C spelling of a Rust type in an `extern "C"` signature of `src/ffi.rs`.
fn c_type_of(rust: &str) -> String {
    let c = match rust.split_whitespace().collect::<Vec<_>>().join(" ").as_str() {
        "i32" => "int32_t",
        "u32" => "uint32_t",
        "i64" => "int64_t",
        "f32" => "float",
        "usize" => "size_t",
        "*mut c_void" => "void*",
        "*mut i32" => "int32_t*",
        "*const i32" => "const int32_t*",
        "*mut f32" => "float*",
        "*const f32" => "const float*",
        "*mut usize" => "size_t*",
        "KernelsLayout" => "kernels_layout",
        "*const KernelsGemmShape" => "const kernels_gemm_shape*",
        "*const KernelsMoeShape" => "const kernels_moe_shape*",
        "*const c_void" => "const void*",
        "*const c_char" => "const char*",
        "KernelsStatus" => "kernels_status",
        "KernelsDtype" => "kernels_dtype",
        "KernelsStream" => "kernels_stream",
        "*const KernelsShape" => "const kernels_shape*",
        other => panic!("no C spelling known for Rust type `{other}`: add it to c_type_of"),
    };
    c.to_string()
}

fn rust_exports() -> BTreeMap<String, Proto> {
    let mut out = BTreeMap::new();
    let mut rest = FFI;
    while let Some(i) = rest.find("extern \"C\" fn ") {
        let before = &rest[..i];
        assert!(
            before.trim_end().ends_with("pub unsafe") || before.trim_end().ends_with("pub"),
            "an extern \"C\" fn that is not pub"
        );
        let attrs = before.rsplit("///").next().unwrap_or("");
        let after = &rest[i + "extern \"C\" fn ".len()..];
        let (name, sig) = after.split_once('(').unwrap();
        assert!(attrs.contains("#[no_mangle]"), "`{name}` is not #[no_mangle]");
        let (params, tail) = sig.split_once(')').unwrap();
        let ret = tail.split_once('{').unwrap().0.trim();
        let ret = ret
            .strip_prefix("->")
            .map_or("void".to_string(), |r| c_type_of(r.trim()));
        let params = params
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (n, t) = p.split_once(':').unwrap();
                (n.trim().to_string(), c_type_of(t.trim()))
            })
            .collect();
        out.insert(name.trim().to_string(), Proto { ret, params });
        rest = &after[after.find('{').unwrap()..];
    }
    out
}

/// `NAME = value` constants of the header's enums.
fn header_constants() -> BTreeMap<String, i64> {
    let text = strip_c_comments(HEADER);
    let mut out = BTreeMap::new();
    for block in text.split("enum {").skip(1) {
        let body = block.split('}').next().unwrap();
        for item in body.split(',') {
            if let Some((name, value)) = item.split_once('=') {
                out.insert(name.trim().to_string(), value.trim().parse().unwrap());
            }
        }
    }
    out
}

#[test]
fn every_prototype_matches_its_rust_export() {
    let header = header_prototypes();
    let rust = rust_exports();
    assert!(!rust.is_empty() && !header.is_empty());
    for (name, proto) in &rust {
        let declared = header
            .get(name)
            .unwrap_or_else(|| panic!("`{name}` is exported but not declared in kernels.h"));
        assert_eq!(
            declared, proto,
            "`{name}`: header (left) and src/ffi.rs (right) differ"
        );
    }
    for name in header.keys() {
        assert!(
            rust.contains_key(name),
            "`{name}` is declared in kernels.h but not exported"
        );
    }
}

#[test]
fn constants_match_the_enums() {
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for s in Status::ALL {
        expected.insert(s.c_name().into(), s as i64);
    }
    for d in DTypeCode::ALL {
        expected.insert(d.c_name().into(), d as i64);
    }
    for o in Op::ALL {
        expected.insert(o.c_name().into(), o as i64);
    }
    for l in LayoutCode::ALL {
        expected.insert(l.c_name().into(), l as i64);
    }
    for r in RoutingCode::ALL {
        expected.insert(r.c_name().into(), r as i64);
    }
    assert_eq!(header_constants(), expected);
    let abi = format!("#define KERNELS_ABI_VERSION {ABI_VERSION}\n");
    assert!(HEADER.contains(&abi), "kernels.h must say {abi:?}");
}

#[test]
fn the_shape_structs_match() {
    for (c, rust) in [
        ("kernels_shape", "KernelsShape"),
        ("kernels_gemm_shape", "KernelsGemmShape"),
        ("kernels_moe_shape", "KernelsMoeShape"),
    ] {
        struct_matches(c, rust);
    }
}

/// The fields of C struct `c` and Rust struct `rust`, names and types in order.
fn struct_matches(c: &str, rust: &str) {
    let text = strip_c_comments(HEADER);
    let body = text
        .split(&format!("typedef struct {c} {{"))
        .nth(1)
        .and_then(|b| b.split('}').next())
        .unwrap_or_else(|| panic!("{c} in the header"));
    let c_fields: Vec<(String, String)> = body
        .split(';')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(c_decl)
        .collect();
    let rust_body = FFI
        .split(&format!("pub struct {rust} {{"))
        .nth(1)
        .and_then(|b| b.split('}').next())
        .unwrap_or_else(|| panic!("{rust} in src/ffi.rs"));
    let rust_fields: Vec<(String, String)> = rust_body
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("pub "))
        .map(|l| {
            let (n, t) = l
                .trim_start_matches("pub ")
                .trim_end_matches(',')
                .split_once(':')
                .unwrap();
            (n.trim().to_string(), c_type_of(t.trim()))
        })
        .collect();
    assert!(!c_fields.is_empty(), "{c} has no fields");
    assert_eq!(c_fields, rust_fields, "{c} (left) and {rust} (right) differ");
}

#[test]
fn the_parsers_see_a_difference() {
    // A header with one parameter type changed must not match.
    let (name, ty) = c_decl("const void *x");
    assert_eq!((name.as_str(), ty.as_str()), ("x", "const void*"));
    assert_ne!(c_decl("void *x"), c_decl("const void *x"));
    assert_eq!(c_type_of("*const c_void"), "const void*");
}
