//! Baking: validation failures name file and entry, staleness, reproducible output,
//! target selection.

use std::path::{Path, PathBuf};

use build_tools::{Bake, BakeError, Source};
use tuned::{int_param, Field, KernelSchema, Target, Value};

static NORM: KernelSchema = KernelSchema {
    kernel: "rmsnorm",
    key: &[Field::dtype("dtype"), Field::int("cols")],
    params: &[
        Field::int("threads"),
        Field::int("vec"),
        Field::int("rows"),
        Field::int("occ"),
        Field::int("splits"),
        Field::int("late"),
    ],
};

fn check(values: &[Value]) -> Result<(), String> {
    int_param(&NORM, values, 0, &[32, 64, 128, 256, 512, 1024]).map(|_| ())
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn bake() -> Bake {
    Bake::new().kernel(&NORM, check)
}

#[test]
fn bad_field_fails_naming_file_and_entry() {
    let dir = fixtures().join("bad");
    let err = bake()
        .generate(&dir, &[Target::Sm90], &[], false)
        .err()
        .expect("bad table must fail");
    let msg = err.to_string();
    assert!(msg.contains("bad/rmsnorm/sm90.json"), "{msg}");
    assert!(msg.contains("entry 1"), "{msg}");
    assert!(msg.contains("unknown parameter `thread`"), "{msg}");
}

#[test]
fn config_outside_the_space_fails() {
    let dir = std::env::temp_dir().join(format!("bake-space-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("rmsnorm")).unwrap();
    let text = std::fs::read_to_string(fixtures().join("tables/rmsnorm/sm90.json"))
        .unwrap()
        .replacen("\"threads\": 128", "\"threads\": 96", 1);
    std::fs::write(dir.join("rmsnorm/sm90.json"), text).unwrap();
    let msg = bake()
        .generate(&dir, &[Target::Sm90], &[], false)
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("config outside the search space") && msg.contains("`threads` = 96"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stale_fingerprint_warns_or_fails_when_strict() {
    let dir = fixtures().join("tables");
    // Fingerprint a real file so the fixture's (empty-source) fingerprint no longer matches.
    let src = vec![Source::File(fixtures().join("tables/rmsnorm/sm90.json"))];
    let baked = bake().generate(&dir, &[Target::Sm90], &src, false).unwrap();
    assert_eq!(baked.warnings.len(), 1);
    assert!(baked.warnings[0].contains("stale table"), "{}", baked.warnings[0]);
    let err = bake().generate(&dir, &[Target::Sm90], &src, true).err().unwrap();
    assert!(matches!(err, BakeError::Stale { .. }), "{err}");
    // Fresh when the fingerprint matches (no sources).
    assert!(bake()
        .generate(&dir, &[Target::Sm90], &[], true)
        .unwrap()
        .warnings
        .is_empty());
}

#[test]
fn output_is_reproducible_and_only_for_enabled_targets() {
    let dir = fixtures().join("tables");
    let a = bake()
        .generate(&dir, &[Target::Sm90, Target::Gfx942], &[], false)
        .unwrap()
        .code;
    let b = bake()
        .generate(&dir, &[Target::Sm90, Target::Gfx942], &[], false)
        .unwrap()
        .code;
    assert_eq!(a, b);
    assert!(a.contains("pub static RMSNORM_SM90"));
    assert!(a.contains("pub static RMSNORM_GFX942"));
    assert!(!a.contains("RMSNORM_SM80"), "sm80 was not enabled");
    let only80 = bake().generate(&dir, &[Target::Sm80], &[], false).unwrap().code;
    assert!(only80.contains("RMSNORM_SM80") && !only80.contains("RMSNORM_SM90"));
}

/// A text from a dependency fingerprints as the file it was read from, by its name: so
/// moving a source into a dependency crate leaves the fingerprint (and tables) as they were.
#[test]
fn a_source_text_fingerprints_as_the_file_of_the_same_name() {
    let path = fixtures().join("tables/rmsnorm/sm90.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let as_text = |name: &str| {
        build_tools::source_fingerprint(&[Source::Text {
            name: name.to_string(),
            text: text.clone(),
        }])
        .unwrap()
    };
    let file = build_tools::source_fingerprint(&[Source::File(path.clone())]).unwrap();
    assert_eq!(file, as_text("sm90.json"));
    assert_ne!(file, as_text("sm80.json"));
}

#[test]
fn missing_source_file_is_an_error() {
    let err = bake()
        .generate(
            &fixtures().join("tables"),
            &[Target::Sm90],
            &[Source::File(PathBuf::from("/nonexistent/k.cu"))],
            false,
        )
        .err()
        .unwrap();
    assert!(err.to_string().contains("/nonexistent/k.cu"), "{err}");
}

/// A temporary tables folder holding the sm90 fixture with `edit` applied.
fn edited_fixture(name: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bake-{name}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("rmsnorm")).unwrap();
    let text = std::fs::read_to_string(fixtures().join("tables/rmsnorm/sm90.json")).unwrap();
    std::fs::write(dir.join("rmsnorm/sm90.json"), edit(text)).unwrap();
    dir
}

#[test]
fn a_default_marker_is_baked_without_a_config_check() {
    // Batch 16 of bf16/4096 becomes a marker; `check` would reject its (absent) config.
    let dir = edited_fixture("marker", |t| {
        t.replacen(
            "\"config\": {\n    \"threads\": 256,\n    \"vec\": 8,\n    \"rows\": 1,\n    \"occ\": 0,\n    \"splits\": 1,\n    \"late\": 0\n   },\n   \"us\": 3.0,",
            "\"config\": \"default\",\n   \"us\": 3.5,",
            1,
        )
    });
    let code = bake().generate(&dir, &[Target::Sm90], &[], true).unwrap().code;
    assert!(
        code.contains(
            "::tuned::BakedEntry { batch: 16, config: ::tuned::EntryConfig::Default, us: 3.5, default_us: 3.5 }"
        ),
        "{code}"
    );
    // Its neighbours keep their tuned configs.
    assert!(
        code.contains("batch: 1, config: ::tuned::EntryConfig::Tuned(&[::tuned::Value::Int(128)"),
        "{code}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_marker_whose_time_is_not_the_defaults_fails_naming_the_entry() {
    let dir = edited_fixture("bad-marker", |t| {
        t.replacen(
            "\"config\": {\n    \"threads\": 256,\n    \"vec\": 8,\n    \"rows\": 1,\n    \"occ\": 0,\n    \"splits\": 1,\n    \"late\": 0\n   },\n   \"us\": 3.0,",
            "\"config\": \"default\",\n   \"us\": 3.0,",
            1,
        )
    });
    let msg = bake()
        .generate(&dir, &[Target::Sm90], &[], false)
        .err()
        .expect("a marker faster than the default it stands for must not bake")
        .to_string();
    assert!(msg.contains("rmsnorm/sm90.json: entry 1"), "{msg}");
    assert!(
        msg.contains("a default marker's `us` (3) must equal its `default_us` (3.5)"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
