//! Table files: schema round trip, every validation error on a fixture, merging.

use tuned::{EntryConfig, Field, KernelSchema, ServeError, TableEntry, TableFile, Target, Value};

static NORM: KernelSchema = KernelSchema {
    kernel: "rmsnorm",
    key: &[Field::dtype("dtype"), Field::int("cols")],
    params: &[Field::int("threads"), Field::int("vec"), Field::name("mode")],
};

const GOOD: &str = r#"{
  "schema": 1,
  "kernel": "rmsnorm",
  "target": "sm90",
  "device": "NVIDIA H200",
  "compiler": "nvrtc 13.0",
  "source_fingerprint": "fnv1a64:0000000000000001",
  "tuned_at": "2026-11-30",
  "key_fields": ["dtype", "cols"],
  "params": ["threads", "vec", "mode"],
  "entries": [
    {"key": {"dtype": "bf16", "cols": 4096}, "batch": 64, "config": {"threads": 256, "vec": 8, "mode": "reg"}, "us": 3.5, "default_us": 4.0},
    {"key": {"dtype": "bf16", "cols": 4096}, "batch": 1, "config": {"threads": 128, "vec": 8, "mode": "reg"}, "us": 2.25, "default_us": 2.5}
  ]
}"#;

fn parse(text: &str) -> Result<TableFile, tuned::TableError> {
    TableFile::parse(text, "rmsnorm/sm90.json", "rmsnorm", Target::Sm90, Some(&NORM))
}

/// Replaces the first occurrence of `from` in the good fixture.
fn variant(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "fixture has no `{from}`");
    GOOD.replacen(from, to, 1)
}

fn error_of(text: &str) -> String {
    parse(text).expect_err("fixture should not validate").to_string()
}

#[test]
fn round_trip_is_stable_and_sorted() {
    let t = parse(GOOD).unwrap();
    assert_eq!(t.entries.len(), 2);
    // Sorted by (key, batch) whatever the file order.
    assert_eq!(t.entries[0].batch, 1);
    assert_eq!(
        t.entries[1].config,
        EntryConfig::Tuned(vec![Value::Int(256), Value::Int(8), Value::str("reg")])
    );
    let text = t.to_json_string();
    let again = parse(&text).unwrap();
    assert_eq!(again, t);
    assert_eq!(again.to_json_string(), text, "writing is deterministic");
}

#[test]
fn each_validation_error_names_file_entry_and_reason() {
    let cases: Vec<(String, &str)> = vec![
        ("{".into(), "rmsnorm/sm90.json: not valid JSON"),
        (variant("\"schema\": 1", "\"schema\": 2"), "`schema` is 2"),
        (variant("\"device\"", "\"devise\""), "unknown field `devise`"),
        (
            variant("  \"tuned_at\": \"2026-11-30\",\n", ""),
            "missing field `tuned_at`",
        ),
        (
            variant("\"kernel\": \"rmsnorm\"", "\"kernel\": \"softmax\""),
            "`kernel` is `softmax` but the file's folder says `rmsnorm`",
        ),
        (
            variant("\"target\": \"sm90\"", "\"target\": \"sm80\""),
            "`target` is `sm80` but the file name says `sm90`",
        ),
        (
            variant("\"compiler\": \"nvrtc 13.0\"", "\"compiler\": 13"),
            "`compiler` must be a string, got a number",
        ),
        (
            variant("[\"threads\", \"vec\", \"mode\"]", "[\"threads\", \"vec\"]"),
            "`params` is [\"threads\", \"vec\"], kernel `rmsnorm` declares",
        ),
        (
            variant("[\"dtype\", \"cols\"]", "[\"cols\", \"dtype\"]"),
            "`key_fields` is [\"cols\", \"dtype\"]",
        ),
        (
            variant("\"batch\": 64", "\"batch\": 0"),
            "entry 0: `batch` must be a positive integer, got 0",
        ),
        (
            variant("\"batch\": 64", "\"batch\": -3"),
            "entry 0: `batch` must be a positive integer",
        ),
        (
            variant("\"batch\": 64", "\"batch\": \"64\""),
            "entry 0: `batch` must be a positive integer, got a string",
        ),
        (
            variant("\"us\": 3.5", "\"us\": 0"),
            "entry 0: `us` must be a positive number",
        ),
        (
            variant("\"default_us\": 4.0", "\"default_us\": -1"),
            "entry 0: `default_us` must be a positive number",
        ),
        (
            variant("\"vec\": 8, \"mode\"", "\"vec\": 8, \"unroll\": 2, \"mode\""),
            "entry 0: config: unknown parameter `unroll`",
        ),
        (
            variant("\"threads\": 256, ", ""),
            "entry 0: config: missing parameter `threads`",
        ),
        (
            variant("\"threads\": 256", "\"threads\": \"many\""),
            "entry 0: config: `threads` must be an integer, got `many`",
        ),
        (
            variant("\"threads\": 256", "\"threads\": 2.5"),
            "entry 0: config: `threads` must be an integer, got 2.5",
        ),
        (
            variant("\"mode\": \"reg\"", "\"mode\": 3"),
            "entry 0: config: `mode` must be a lowercase name",
        ),
        (
            variant(
                "\"cols\": 4096}, \"batch\": 64",
                "\"cols\": 4096, \"rows\": 1}, \"batch\": 64",
            ),
            "entry 0: key: unknown field `rows`",
        ),
        (
            variant(
                "\"dtype\": \"bf16\", \"cols\": 4096}, \"batch\": 64",
                "\"dtype\": \"int8\", \"cols\": 4096}, \"batch\": 64",
            ),
            "entry 0: key: `dtype` must be a dtype",
        ),
        (
            variant(
                "\"batch\": 64, \"config\": {\"threads\": 256",
                "\"batch\": 1, \"config\": {\"threads\": 256",
            ),
            "entry 1: duplicate of entry 0: key `dtype=bf16,cols=4096` batch 1",
        ),
        (
            variant(
                "\"us\": 3.5, \"default_us\": 4.0",
                "\"us\": 3.5, \"default_us\": 4.0, \"note\": 1",
            ),
            "entry 0: unknown field `note`",
        ),
    ];
    for (text, want) in cases {
        let got = error_of(&text);
        assert!(got.contains(want), "want `{want}` in `{got}`");
        assert!(
            got.starts_with("rmsnorm/sm90.json"),
            "error must name the file: {got}"
        );
    }
}

#[test]
fn without_a_schema_the_file_checks_itself() {
    let t = TableFile::parse(GOOD, "x/rmsnorm/sm90.json", "rmsnorm", Target::Sm90, None).unwrap();
    assert_eq!(t.entries.len(), 2);
    let bad = variant("\"vec\": 8, \"mode\"", "\"mode\"");
    let e = TableFile::parse(&bad, "f", "rmsnorm", Target::Sm90, None).unwrap_err();
    assert!(e.to_string().contains("missing parameter `vec`"), "{e}");
}

#[test]
fn path_names_kernel_and_target() {
    use std::path::Path;
    assert_eq!(
        tuned::origin_of_path(Path::new("t/softmax/sm90.json")).unwrap(),
        ("softmax".into(), Target::Sm90)
    );
    assert!(tuned::origin_of_path(Path::new("t/softmax/sm_90.json"))
        .unwrap_err()
        .contains("should be `sm90.json`"));
    assert!(tuned::origin_of_path(Path::new("t/softmax/h200.json"))
        .unwrap_err()
        .contains("unknown target `h200`"));
    assert!(tuned::origin_of_path(Path::new("t/softmax/sm90.txt")).is_err());
}

#[test]
fn merge_keeps_the_faster_entry_and_reports() {
    let mut old = parse(GOOD).unwrap();
    let newer_text = GOOD
        .replace("\"us\": 3.5", "\"us\": 3.0") // batch 64 got faster
        .replace("\"us\": 2.25", "\"us\": 2.4") // batch 1 got slower
        .replace("2026-11-30", "2026-12-01");
    let mut newer = parse(&newer_text).unwrap();
    let mut extra = newer.entries[0].clone();
    extra.batch = 4096;
    newer.entries.push(extra);
    let report = old.merge(newer);
    assert_eq!(report.added.len(), 1);
    assert_eq!(report.replaced.len(), 1);
    assert_eq!(report.replaced[0].0 .1, 64);
    assert_eq!(report.kept.len(), 1);
    assert_eq!(old.entries.len(), 3);
    let b1 = old.entries.iter().find(|e| e.batch == 1).unwrap();
    assert_eq!(b1.us, 2.25, "the faster existing entry stays");
    assert_eq!(old.header.tuned_at, "2026-12-01");
}

#[test]
fn write_is_atomic_and_reads_back() {
    let dir = std::env::temp_dir().join(format!("tuned-write-{}", std::process::id()));
    let path = dir.join("rmsnorm").join("sm90.json");
    let t = parse(GOOD).unwrap();
    t.write(&path).unwrap();
    let back = TableFile::read(&path, Some(&NORM)).unwrap();
    assert_eq!(back, t);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn merge_drops_entries_of_another_source() {
    let mut old = parse(GOOD).unwrap();
    let newer = parse(
        &GOOD
            .replace("fnv1a64:0000000000000001", "fnv1a64:0000000000000002")
            .replace("\"us\": 3.5", "\"us\": 9.0"),
    )
    .unwrap();
    let mut newer_one = newer.clone();
    newer_one.entries.truncate(1);
    let report = old.merge(newer_one);
    assert_eq!(
        report.stale_dropped.len(),
        2,
        "both old entries were measured against the old source"
    );
    assert_eq!(old.entries.len(), 1);
    assert_eq!(old.header.source_fingerprint, "fnv1a64:0000000000000002");
}

#[test]
fn timing_is_read_defaulted_checked_and_written() {
    // Files from before the field: single-launch timing.
    let t = parse(GOOD).unwrap();
    assert_eq!(t.header.timing, "single");
    let graph = parse(&GOOD.replace(
        "\"tuned_at\": \"2026-11-30\",",
        "\"tuned_at\": \"2026-11-30\",\n  \"timing\": \"graph\",",
    ))
    .unwrap();
    assert_eq!(graph.header.timing, "graph");
    // Written, and read back the same.
    let text = graph.to_json_string();
    assert!(text.contains("\"timing\": \"graph\""), "{text}");
    assert_eq!(parse(&text).unwrap(), graph);
    let bad = parse(&GOOD.replace(
        "\"tuned_at\": \"2026-11-30\",",
        "\"tuned_at\": \"2026-11-30\",\n  \"timing\": \"fast\",",
    ))
    .unwrap_err()
    .to_string();
    assert!(bad.contains("`timing`") && bad.contains("\"fast\""), "{bad}");
}

#[test]
fn merge_drops_entries_timed_another_way() {
    // Old entries timed single-launch (2.25 and 3.5 us, launch latency included); a
    // graph-timed run of one shape must not be compared with them, nor kept beside them.
    let mut old = parse(GOOD).unwrap();
    let mut newer = parse(&GOOD.replace(
        "\"tuned_at\": \"2026-11-30\",",
        "\"tuned_at\": \"2026-12-01\",\n  \"timing\": \"graph\",",
    ))
    .unwrap();
    newer.entries.retain(|e| e.batch == 64);
    newer.entries[0].us = 4.0; // slower than the old 3.5: would have been "kept"
    let report = old.merge(newer);
    assert_eq!(report.retimed_dropped.len(), 2, "{report:?}");
    assert!(report.stale_dropped.is_empty() && report.kept.is_empty());
    assert_eq!(report.added.len(), 1);
    assert_eq!(old.entries.len(), 1);
    assert_eq!(old.entries[0].us, 4.0);
    assert_eq!(old.header.timing, "graph");
    assert_eq!(old.header.tuned_at, "2026-12-01");
}

#[test]
fn merge_drops_entries_of_another_device() {
    // The old entries were measured on an H200 (2.25 and 3.5 us). A run of one shape on an
    // H100 timed 4.0 us: slower, but another device's figure, so it is neither compared
    // with them nor kept beside them under a header naming one device.
    let mut old = parse(GOOD).unwrap();
    let mut newer = parse(&GOOD.replace("\"NVIDIA H200\"", "\"NVIDIA H100 80GB HBM3\"")).unwrap();
    newer.entries.retain(|e| e.batch == 64);
    newer.entries[0].us = 4.0;
    let report = old.merge(newer);
    assert_eq!(report.device_dropped.len(), 2, "{report:?}");
    assert!(report.kept.is_empty() && report.stale_dropped.is_empty() && report.retimed_dropped.is_empty());
    assert_eq!(report.added.len(), 1);
    assert_eq!(old.entries.len(), 1);
    assert_eq!(old.entries[0].us, 4.0);
    assert_eq!(old.header.device, "NVIDIA H100 80GB HBM3");
}

/// The good fixture plus a default marker at batch 256.
fn with_marker(us: &str, default_us: &str) -> String {
    let marker = format!(
        "{{\"key\": {{\"dtype\": \"bf16\", \"cols\": 4096}}, \"batch\": 256, \"config\": \"default\", \"us\": {us}, \"default_us\": {default_us}}},\n    "
    );
    variant(
        "{\"key\": {\"dtype\": \"bf16\", \"cols\": 4096}, \"batch\": 64",
        &format!("{marker}{{\"key\": {{\"dtype\": \"bf16\", \"cols\": 4096}}, \"batch\": 64"),
    )
}

#[test]
fn a_default_marker_round_trips() {
    let t = parse(&with_marker("7.25", "7.25")).unwrap();
    assert_eq!(t.entries.len(), 3);
    let m = &t.entries[2];
    assert_eq!(
        (m.batch, &m.config, m.us, m.default_us),
        (256, &EntryConfig::Default, 7.25, 7.25)
    );
    let text = t.to_json_string();
    assert!(
        text.contains(
            "{\"key\": {\"cols\":4096,\"dtype\":\"bf16\"}, \"batch\": 256, \"config\": \"default\", \"us\": 7.25, \"default_us\": 7.25}"
        ),
        "{text}"
    );
    let again = parse(&text).unwrap();
    assert_eq!(again, t);
    assert_eq!(again.to_json_string(), text);
    // Without a schema too.
    let untyped = TableFile::parse(&text, "f", "rmsnorm", Target::Sm90, None).unwrap();
    assert!(untyped.entries[2].config.is_default());
}

#[test]
fn a_bad_default_marker_is_rejected_naming_the_entry() {
    let e = error_of(&with_marker("7.0", "7.25"));
    assert!(
        e.starts_with(
            "rmsnorm/sm90.json: entry 0: a default marker's `us` (7) must equal its `default_us` (7.25)"
        ),
        "{e}"
    );
    let e = error_of(&variant(
        "\"config\": {\"threads\": 256, \"vec\": 8, \"mode\": \"reg\"}",
        "\"config\": \"fast\"",
    ));
    assert!(
        e.contains("entry 0: `config` must be an object or \"default\", got \"fast\""),
        "{e}"
    );
    // A marker's key validates like any entry's.
    let e = error_of(&with_marker("7.25", "7.25").replacen("\"bf16\"", "\"int8\"", 1));
    assert!(e.contains("entry 0: key: `dtype` must be a dtype"), "{e}");
}

#[test]
fn merge_replaces_a_marker_with_a_faster_tuned_entry() {
    let mut old = parse(&with_marker("7.25", "7.25")).unwrap();
    let mut newer = parse(&GOOD.replace("2026-11-30", "2026-12-01")).unwrap();
    let mut tuned_256 = newer.entries[1].clone();
    tuned_256.batch = 256;
    tuned_256.us = 6.5;
    tuned_256.default_us = 7.3;
    let tuned_256_config = tuned_256.config.clone();
    // A run that measured the default best at 256 again changes nothing.
    let mut again = newer.clone();
    again.entries = vec![TableEntry::default_marker(tuned_256.key.clone(), 256, 7.3)];
    let report = old.clone().merge(again);
    assert_eq!(report.kept.len(), 1, "{report:?}");
    newer.entries = vec![tuned_256];
    let report = old.merge(newer);
    assert_eq!(report.replaced.len(), 1, "{report:?}");
    assert_eq!(report.replaced[0], ((old.entries[2].key.clone(), 256), 7.25, 6.5));
    let at_256 = old.entries.iter().find(|e| e.batch == 256).unwrap();
    assert_eq!(at_256.config, tuned_256_config);
    assert!(!at_256.config.is_default());
    assert_eq!(old.entries.len(), 3);
    assert_eq!(old.header.tuned_at, "2026-12-01");
}

/// A table file served in place of the baked one (a bench timing a table just tuned):
/// its entries grouped by static key in batch order, refused for another target or, unless
/// asked, another kernel source.
#[test]
fn a_table_file_serves_by_key_and_refuses_another_source_unless_asked() {
    let dir = std::env::temp_dir().join(format!("tuned-serve-{}", std::process::id()));
    let path = dir.join("rmsnorm").join("sm90.json");
    parse(GOOD).unwrap().write(&path).unwrap();
    let ours = "fnv1a64:0000000000000001";

    let t = TableFile::to_serve(&path, &NORM, Target::Sm90, ours, false).unwrap();
    assert_eq!(t.other_source, None);
    let entries = t.key_entries("dtype=bf16,cols=4096");
    assert_eq!(entries.iter().map(|e| e.batch).collect::<Vec<_>>(), [1, 64]);
    assert_eq!(
        entries[1].config.tuned().copied(),
        Some(&[Value::Int(256), Value::Int(8), Value::str("reg")][..])
    );
    assert!(t.key_entries("dtype=bf16,cols=8192").is_empty());

    let other = "fnv1a64:0000000000000002";
    let e = TableFile::to_serve(&path, &NORM, Target::Sm90, other, false).unwrap_err();
    assert!(
        matches!(&e, ServeError::OtherSource(m) if m.contains(ours) && m.contains(other)),
        "{e}"
    );
    let anyway = TableFile::to_serve(&path, &NORM, Target::Sm90, other, true).unwrap();
    assert!(anyway.other_source.as_deref().is_some_and(|m| m.contains(other)));
    assert_eq!(anyway.key_entries("dtype=bf16,cols=4096").len(), 2);

    let e = TableFile::to_serve(&path, &NORM, Target::Sm80, ours, true).unwrap_err();
    assert!(matches!(&e, ServeError::File(m) if m.contains("sm80")), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
