//! The `kernels` command line end to end: exit codes, one-line errors, JSON shape.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kernels(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kernels"))
        .args(args)
        .output()
        .expect("run kernels")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails, showing the whole stdout, unless `o`'s stdout contains `text`.
#[track_caller]
fn assert_stdout_has(o: &Output, text: &str) {
    assert!(stdout(o).contains(text), "{}", stdout(o));
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

/// The fixture table `rmsnorm/sm90.json` copied into the temporary folder
/// `kernels-TAG-<pid>` with its first `from` replaced by `to`: (folder, file).
fn edited_fixture(tag: &str, from: &str, to: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("kernels-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("rmsnorm")).unwrap();
    let text = std::fs::read_to_string(fixtures().join("tables/rmsnorm/sm90.json"))
        .unwrap()
        .replacen(from, to, 1);
    let file = dir.join("rmsnorm/sm90.json");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// The candidates digest this build's search of `K` computes for `static_key` at
/// `batch` on the device `kernels::core::testing::tuning_key_parts` describes (sm_90a,
/// 132 SMs), as the tuner puts it in a tuning key.
fn digest<K: kernels::core::PlannedKernel>(static_key: &str, batch: u64) -> String {
    let key = tuned::StaticKey::parse(K::SCHEMA, static_key).unwrap();
    let key = K::key_from_values(key.values()).unwrap();
    let h200 = kernels::core::DeviceInfo::nominal(tuned::Target::Sm90).unwrap();
    kernels::core::launch::candidates_digest::<K>(&h200, &key, batch)
}

/// `kernels tables promote --cache CACHE --tables TABLES [--reselect]`.
fn promote(cache: &Path, tables: &Path, reselect: bool) -> Output {
    let mut args = vec![
        "tables",
        "promote",
        "--cache",
        cache.to_str().unwrap(),
        "--tables",
        tables.to_str().unwrap(),
    ];
    if reselect {
        args.push("--reselect");
    }
    kernels(&args)
}

#[test]
fn lookup_json_has_the_documented_shape() {
    let o = kernels(&[
        "lookup",
        "rmsnorm",
        "--target",
        "sm90",
        "--dtype",
        "bf16",
        "--batch",
        "7",
        "cols=4096",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("one JSON object");
    assert_eq!(v["kernel"], "rmsnorm");
    assert_eq!(v["target"], "sm90");
    assert_eq!(v["static_key"], "dtype=bf16,cols=4096");
    assert_eq!(v["batch"], 7);
    let source = v["source"].as_str().unwrap();
    assert!(
        ["table-exact", "table-nearest", "table-default", "default"].contains(&source),
        "{source}"
    );
    let config = v["config"].as_object().unwrap();
    for p in ["threads", "vec", "rows"] {
        assert!(config[p].is_u64(), "config.{p} in {v}");
    }
}

#[test]
fn lookup_resolves_every_kernel() {
    for args in [
        vec!["softmax", "cols=128256"],
        vec!["fused_add_rmsnorm", "cols=8192"],
        vec!["gemm", "layout=nt", "n=6144", "k=4096"],
        vec!["moe", "experts=128", "n=768", "k=2048", "topk=8"],
    ] {
        let mut a = vec![
            "lookup", args[0], "--target", "sm_90a", "--dtype", "bfloat16", "--batch", "64", "--json",
        ];
        a.extend(&args[1..]);
        let o = kernels(&a);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(v["kernel"], args[0]);
        assert!(!v["config"].as_object().unwrap().is_empty());
    }
}

#[test]
fn bad_arguments_exit_2_with_one_line_naming_the_argument() {
    // Each case: the command line (split at spaces) and what its one line must name.
    let cases: &[(&str, &str)] = &[
        (
            "lookup rmsnorm --target sm75 --dtype bf16 --batch 7 cols=4096",
            "--target",
        ),
        (
            "lookup rmsnorm --target sm90 --dtype int8 --batch 7 cols=4096",
            "--dtype",
        ),
        (
            "lookup rmsnorm --target sm90 --dtype bf16 --batch 0 cols=4096",
            "--batch",
        ),
        (
            "lookup rmsnorm --target sm90 --dtype bf16 --batch x cols=4096",
            "--batch",
        ),
        (
            "lookup rmsnorm --target sm90 --dtype bf16 --batch 7 rows=4096",
            "rows",
        ),
        (
            "lookup rmsnorm --target sm90 --dtype bf16 --batch 7 cols=abc",
            "cols",
        ),
        (
            "lookup rmsnorm --target sm90 --dtype bf16 --batch 7 cols=0",
            "cols",
        ),
        ("lookup rmsnorm --target sm90 --dtype bf16 --batch 7", "cols"),
        (
            "lookup rmsnorm --target sm90 --dtype bf16 --batch 7 cols",
            "KEY=VALUE",
        ),
        (
            "lookup attention --target sm90 --dtype bf16 --batch 7 cols=1",
            "attention",
        ),
        ("lookup rmsnorm --dtype bf16 --batch 7 cols=4096", "--target"),
        ("plan --model gpt-5", "--model"),
        ("plan --model Qwen2.5-7B --tp 3", "--tp"),
        ("frobnicate", "frobnicate"),
        ("tune rmsnorm --shapes shapes.json --timing fast", "--timing"),
        ("tables check --timing fast", "--timing"),
        (
            "tune rmsnorm --shapes ../tuned/shapes/rmsnorm.json --only cols",
            "--only",
        ),
        (
            "tune rmsnorm --shapes ../tuned/shapes/rmsnorm.json --only colz=4096",
            "--only",
        ),
        (
            "tune rmsnorm --shapes ../tuned/shapes/rmsnorm.json --only cols=4097",
            "--only",
        ),
        (
            "tune rmsnorm --shapes ../tuned/shapes/rmsnorm.json --only cols=4096 --batch 3",
            "--batch",
        ),
    ];
    for (line, names) in cases {
        let args: Vec<&str> = line.split_whitespace().collect();
        let o = kernels(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {err:?}"
        );
        assert!(err.contains(names), "{args:?}: `{names}` not named in {err:?}");
        assert!(stdout(&o).is_empty(), "{args:?}: nothing on stdout");
    }
}

#[test]
fn plan_lists_a_layer_with_sources() {
    let o = kernels(&["plan", "--model", "Llama-3.1-8B", "--batch", "16", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let calls = v["calls"].as_array().unwrap();
    let steps: Vec<&str> = calls.iter().map(|c| c["step"].as_str().unwrap()).collect();
    assert_eq!(
        steps,
        [
            "input_norm",
            "qkv_proj",
            "o_proj",
            "post_attn_norm",
            "gate_up_proj",
            "down_proj",
            "final_norm",
            "lm_head",
            "sampling_softmax"
        ]
    );
    assert!(calls.iter().all(|c| c["source"].is_string() && c["batch"] == 16));
    let o = kernels(&["plan", "--model", "Mixtral-8x7B", "--tp", "2"]);
    assert!(o.status.success());
    assert_stdout_has(&o, "dtype=bf16,experts=8,n=7168,k=4096,topk=2");
}

#[test]
fn plan_prints_each_config_as_the_config_types_display() {
    use kernels::gemm::{Gemm, GemmKey, Layout};
    use kernels::rmsnorm::{FusedAddRmsNorm, RmsNorm, RmsNormKey};
    use kernels::softmax::{Softmax, SoftmaxKey};
    use kernels::{resolve_serve, DType, Target};

    let o = kernels(&["plan", "--model", "Llama-3.1-8B", "--batch", "16"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let (t, bf16) = (Target::Sm90, DType::Bf16);
    let norm = RmsNormKey {
        dtype: bf16,
        cols: 4096,
    };
    let qkv = GemmKey {
        dtype: bf16,
        layout: Layout::Nt,
        n: 6144,
        k: 4096,
    };
    let sampling = SoftmaxKey {
        dtype: bf16,
        cols: 128256,
    };
    let expected = [
        (
            "input_norm ",
            resolve_serve::<RmsNorm>(t, &norm, 16).config.to_string(),
        ),
        ("qkv_proj ", resolve_serve::<Gemm>(t, &qkv, 16).config.to_string()),
        (
            "post_attn_norm ",
            resolve_serve::<FusedAddRmsNorm>(t, &norm, 16).config.to_string(),
        ),
        (
            "sampling_softmax ",
            resolve_serve::<Softmax>(t, &sampling, 16).config.to_string(),
        ),
    ];
    for (step, config) in expected {
        let line = text
            .lines()
            .find(|l| l.starts_with(step))
            .unwrap_or_else(|| panic!("no step `{step}` in:\n{text}"));
        assert!(
            line.ends_with(&format!(" {config}")),
            "`{line}` does not end with `{config}`"
        );
    }
}

/// `kernels variants` lists what a lookup serves; `--space` adds a covering sample of
/// the search spaces, so CI's NVRTC check compiles the searched code paths a default
/// never takes (on sm_90: MoE tiles besides the defaults', TMA stores of C, clusters of 2,
/// and the code paths only a combination of parameters selects: splits through the
/// workspace).
#[cfg(feature = "cuda")]
#[test]
fn variants_space_adds_the_searched_code_paths() {
    let list = |space: bool| -> Vec<serde_json::Value> {
        let mut args = vec!["variants", "--target", "sm90"];
        if space {
            args.push("--space");
        }
        let o = kernels(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str(&stdout(&o)).expect("a JSON list")
    };
    let has = |list: &[serde_json::Value], source: &str, define: &str| {
        list.iter().any(|v| {
            v["sources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s.as_str().unwrap().ends_with(source))
                && v["defines"].get(define).is_some()
        })
    };
    let (served, space) = (list(false), list(true));
    assert!(space.len() > served.len(), "{} vs {}", space.len(), served.len());
    // Every served variant is still listed.
    for v in &served {
        assert!(
            space
                .iter()
                .any(|w| w["defines"] == v["defines"] && w["kernels"] == v["kernels"]),
            "{v}"
        );
    }
    // sm_90's MoE default takes the wgmma paths; the space adds tiles it does not take.
    assert!(has(&served, "moe.cu", "WGMMA"));
    let moe_count = |list: &[serde_json::Value]| {
        list.iter()
            .filter(|v| {
                v["sources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s == "kernels-moe/cuda/moe.cu")
            })
            .count()
    };
    assert!(moe_count(&space) > moe_count(&served));
    assert!(has(&space, "gemm.cu", "EPILOGUE_TMA"));
    assert!(has(&space, "gemm.cu", "CLUSTER"));
    assert!(has(&space, "gemm.cu", "WS_SPLIT"));
    // The workspace split on each wgmma path: the unswapped tiles' reduction is code of
    // its own, though its define also comes with the swapped splits.
    for wgmma in ["1", "2"] {
        assert!(
            space
                .iter()
                .any(|v| v["defines"]["WGMMA"] == wgmma && v["defines"].get("WS_SPLIT").is_some()),
            "WGMMA={wgmma}"
        );
    }
    // MoE's wgmma code needs the GEMM's wrappers, as its build concatenates them.
    let moe = space
        .iter()
        .find(|v| {
            v["sources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s == "kernels-moe/cuda/moe.cu")
        })
        .unwrap();
    assert!(moe["sources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s == "kernels-gemm/cuda/gemm_wgmma.cuh"));
}

#[test]
fn the_variants_lock_passes_on_the_committed_tree_and_names_a_changed_table() {
    let o = kernels(&["tables", "lock", "--check"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_stdout_has(&o, "serve the locked variants");

    // A lock recording another digest for the softmax table fails, naming it.
    let committed =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuned/variants.lock"))
            .unwrap();
    let softmax = committed
        .lines()
        .find(|l| l.starts_with("softmax sm90 "))
        .unwrap();
    let (head, _) = softmax.rsplit_once(' ').unwrap();
    let altered = committed.replace(softmax, &format!("{head} fnv1a64:0000000000000000"));
    let dir = std::env::temp_dir().join(format!("kernels-cli-lock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("variants.lock");
    std::fs::write(&path, altered).unwrap();
    let o = kernels(&["tables", "lock", "--check", "--path", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert_stdout_has(&o, &format!("locked: {head} fnv1a64:0000000000000000"));

    // Writing the lock to another path records what the tables serve, so it then passes.
    let o = kernels(&["tables", "lock", "--path", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), committed);

    // A lock file that cannot be read is a usage error naming --path.
    let o = kernels(&[
        "tables",
        "lock",
        "--check",
        "--path",
        dir.join("missing").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--path"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tables_validate_and_offline_check() {
    let good = fixtures().join("tables");
    let o = kernels(&["tables", "validate", good.to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_stdout_has(&o, "3 table file(s), 0 with problems");

    let bad = fixtures().join("bad");
    let o = kernels(&["tables", "validate", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_stdout_has(&o, "entry 1: config: unknown parameter `thread`");

    // The fixtures were "tuned" against no source at all: stale for the real kernel.
    let o = kernels(&[
        "tables",
        "check",
        "--offline",
        good.join("rmsnorm/sm90.json").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert_stdout_has(&o, "stale: tuned against kernel source fnv1a64:cbf29ce484222325");
}

#[test]
fn offline_check_fails_on_an_entry_slower_than_default() {
    let (dir, file) = edited_fixture("cli", "\"us\": 2.0", "\"us\": 9.0");
    let o = kernels(&["tables", "check", "--offline", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert_stdout_has(&o, "is slower than the analytic default");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tables_list_runs() {
    let o = kernels(&["tables", "list", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    for t in v.as_array().unwrap() {
        assert!(t["kernel"].is_string() && t["entries"].is_u64() && t["stale"].is_boolean());
        assert!(
            t["markers"].as_u64().unwrap() <= t["entries"].as_u64().unwrap(),
            "{t}"
        );
    }
}

#[test]
fn prune_marks_entries_that_do_not_beat_the_default() {
    // Entry 0 (batch 1): 2.0 vs 2.5 stays; make batch 16 lose (3.49 vs 3.5 is within 2%).
    // The fixture already has one marker (bf16/8192 batch 1024).
    let (dir, file) = edited_fixture("prune", "\"us\": 3.0", "\"us\": 3.49");
    let before = tuned::TableFile::read(&file, None).unwrap();
    let o = kernels(&["tables", "prune", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_stdout_has(&o, "kept 4, marked default 1 (markers already there: 1)");
    assert_stdout_has(
        &o,
        "marked default dtype=bf16,cols=4096 batch 16: 3.490 us vs default 3.500 us",
    );
    let t = tuned::TableFile::read(&file, None).unwrap();
    assert_eq!(t.entries.len(), before.entries.len(), "nothing is deleted");
    for (now, was) in t.entries.iter().zip(&before.entries) {
        if now.key.as_str() == "dtype=bf16,cols=4096" && now.batch == 16 {
            // The batch stays in the table, as "the default wins here", at the default's time.
            assert!(now.config.is_default(), "{now:?}");
            assert_eq!((now.us, now.default_us), (3.5, 3.5));
        } else {
            assert_eq!(
                now, was,
                "entries that beat the default, and markers, are left alone"
            );
        }
    }
    // The pruned file passes validation, and pruning again changes nothing.
    let o = kernels(&["tables", "validate", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stdout(&o));
    let o = kernels(&["tables", "prune", file.to_str().unwrap()]);
    assert_stdout_has(&o, "kept 4, marked default 0 (markers already there: 2)");
    assert_eq!(tuned::TableFile::read(&file, None).unwrap(), t);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pin_turns_default_markers_into_the_configs_they_serve() {
    // The fixture has one marker (bf16/8192 batch 1024); pinning writes the config the
    // analytic default gives there, which is what resolution served for it before.
    let (dir, file) = edited_fixture("pin", "\"us\": 3.0", "\"us\": 3.0");
    let before = tuned::TableFile::read(&file, None).unwrap();
    let marker = before
        .entries
        .iter()
        .find(|e| e.config.is_default())
        .expect("the fixture has a marker")
        .clone();
    let key = kernels::rmsnorm::RmsNormKey {
        dtype: tuned::DType::Bf16,
        cols: 8192,
    };
    let want = <kernels::rmsnorm::RmsNorm as tuned::TunedKernel>::config_values(
        &kernels::rmsnorm::analytic_default(tuned::Target::Sm90, &key, marker.batch),
    );
    let o = kernels(&["tables", "pin", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert_stdout_has(&o, "pinned 1 default marker(s)");
    let t = tuned::TableFile::read(&file, None).unwrap();
    assert_eq!(t.entries.len(), before.entries.len());
    for (now, was) in t.entries.iter().zip(&before.entries) {
        if was.config.is_default() {
            assert_eq!(now.config.tuned(), Some(&want), "{now:?}");
            assert_eq!((now.us, now.default_us), (was.us, was.default_us));
        } else {
            assert_eq!(now, was, "tuned entries are left alone");
        }
    }
    // Pinned entries validate, and pinning again changes nothing.
    let o = kernels(&["tables", "validate", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stdout(&o));
    let o = kernels(&["tables", "pin", file.to_str().unwrap()]);
    assert_stdout_has(&o, "pinned 0 default marker(s)");
    assert_eq!(tuned::TableFile::read(&file, None).unwrap(), t);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn promote_moves_online_results_into_tables() {
    use kernels::core::{
        cache::{cache_key, AlignClass, CacheKeyParts, Component, Section},
        tune::TuneRecord,
        DiskCache,
    };
    use tuned::Value;
    let dir = std::env::temp_dir().join(format!("kernels-promote-{}", std::process::id()));
    let cache = DiskCache::at(dir.join("cache"));
    let store = |fingerprint: &str, cols: u32, align: AlignClass, us: f64| {
        let static_key = format!("dtype=bf16,cols={cols}");
        let candidates = digest::<kernels::rmsnorm::RmsNorm>(&static_key, 64);
        let key = cache_key(&CacheKeyParts {
            alignment: Component::Applies(align),
            candidates: Component::Applies(&candidates),
            ..kernels::core::testing::tuning_key_parts("rmsnorm", fingerprint, &static_key, 64)
        });
        let record = TuneRecord {
            config: vec![
                Value::Int(256),
                Value::Int(8),
                Value::Int(1),
                Value::Int(0),
                Value::Int(1),
                Value::Int(0),
            ],
            us,
            default_us: Some(4.0),
            device: "NVIDIA H200".into(),
            compiler: "nvrtc 13.0".into(),
            tuned_at: "2026-11-30".into(),
            candidates: vec![],
            phases: Default::default(),
        };
        cache
            .store(Section::Tuning, &key, "tune", record.to_json().as_bytes())
            .unwrap();
    };
    let current = kernels::rmsnorm::SOURCE_FINGERPRINT;
    store(current, 5120, AlignClass::A16, 3.0); // promoted
    store(current, 6144, AlignClass::A2, 3.0); // misaligned: skipped
    store("fnv1a64:0000000000000000", 7168, AlignClass::A16, 3.0); // stale: skipped
    store(current, 9216, AlignClass::A16, 4.5); // slower than the default: a marker
    let tables = dir.join("tables");
    let o = promote(&dir.join("cache"), &tables, false);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("2 added"), "{out}");
    assert!(
        out.contains("cols=6144] batch 64: tuned on 2-byte aligned buffers"),
        "{out}"
    );
    assert!(
        out.contains("cols=7168] batch 64: tuned against source fnv1a64:0000000000000000"),
        "{out}"
    );
    assert!(
        out.contains("cols=9216] batch 64: the analytic default was at least as fast"),
        "{out}"
    );
    let t = tuned::TableFile::read(&tables.join("rmsnorm/sm90.json"), None).unwrap();
    assert_eq!(t.entries.len(), 2);
    assert_eq!(t.entries[0].key.as_str(), "dtype=bf16,cols=5120");
    assert_eq!(
        t.entries[0].config,
        tuned::EntryConfig::Tuned([256, 8, 1, 0, 1, 0].map(Value::Int).to_vec())
    );
    // The default won at 9216: its batch serves the default, with the default's time.
    assert_eq!(t.entries[1].key.as_str(), "dtype=bf16,cols=9216");
    assert_eq!(t.entries[1].config, tuned::EntryConfig::Default);
    assert_eq!((t.entries[1].us, t.entries[1].default_us), (4.0, 4.0));
    assert_eq!(t.header.source_fingerprint, current);
    // The promoted file validates against the kernel and passes the offline guard.
    let o = kernels(&[
        "tables",
        "check",
        "--offline",
        tables.join("rmsnorm/sm90.json").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `kernels tune`'s records (keyed `timing=graph`) promote into a graph-timed table,
/// and `--reselect` chooses each winner again from the recorded candidate times by the
/// current rule: a 1.5% gain at 100 us, which a 2% rule left to the default, is taken;
/// a 1.5% gain at 4 us is still noise.
#[test]
fn promote_reselects_from_recorded_candidates_and_keeps_the_timing_method() {
    use kernels::core::{
        cache::{cache_key, CacheKeyParts, Component, Section},
        tune::{CandidateRecord, TuneRecord},
        DiskCache,
    };
    use tuned::Value;
    let dir = std::env::temp_dir().join(format!("kernels-reselect-{}", std::process::id()));
    let cache = DiskCache::at(dir.join("cache"));
    let cfg = |threads: i64, occ: i64| {
        vec![
            Value::Int(threads),
            Value::Int(8),
            Value::Int(1),
            Value::Int(occ),
            Value::Int(1),
            Value::Int(0),
        ]
    };
    let fingerprint = kernels::rmsnorm::SOURCE_FINGERPRINT;
    let store = |cols: u32, default_us: f64, other_us: f64| {
        let static_key = format!("dtype=bf16,cols={cols}");
        let candidates = digest::<kernels::rmsnorm::RmsNorm>(&static_key, 16384);
        let key = cache_key(&CacheKeyParts {
            variant: Component::Applies("timing=graph"),
            candidates: Component::Applies(&candidates),
            ..kernels::core::testing::tuning_key_parts("rmsnorm", fingerprint, &static_key, 16384)
        });
        // As a 2% rule chose: the default, whose time is also `us`.
        let record = TuneRecord {
            config: cfg(256, 0),
            us: default_us,
            default_us: Some(default_us),
            device: "NVIDIA H200".into(),
            compiler: "nvrtc 13.0".into(),
            tuned_at: "2026-11-30".into(),
            candidates: vec![
                CandidateRecord {
                    config: cfg(256, 0),
                    outcome: Ok(default_us),
                },
                CandidateRecord {
                    config: cfg(128, 0),
                    outcome: Err("compile error".into()),
                },
                CandidateRecord {
                    config: cfg(128, 6),
                    outcome: Ok(other_us),
                },
            ],
            phases: Default::default(),
        };
        cache
            .store(Section::Tuning, &key, "tune", record.to_json().as_bytes())
            .unwrap();
    };
    store(4096, 100.0, 98.5);
    store(2048, 4.0, 3.94);
    let tables = dir.join("tables");
    let promote = |reselect: bool| {
        let o = promote(&dir.join("cache"), &tables, reselect);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        stdout(&o)
    };
    // As recorded, neither beats the default: both batches become default markers.
    let out = promote(false);
    assert!(out.contains("2 added"), "{out}");
    // Reselected, the 4096 result beats its default and replaces the marker.
    let out = promote(true);
    assert!(out.contains("0 added, 1 replaced, 1 kept"), "{out}");
    assert!(
        out.contains("cols=2048] batch 16384: the analytic default was at least as fast"),
        "{out}"
    );
    let t = tuned::TableFile::read(&tables.join("rmsnorm/sm90.json"), None).unwrap();
    assert_eq!(t.header.timing, tuned::TIMING_GRAPH);
    assert_eq!(t.entries.len(), 2);
    assert_eq!(t.entries[0].key.as_str(), "dtype=bf16,cols=2048");
    assert_eq!(t.entries[0].config, tuned::EntryConfig::Default);
    let e = &t.entries[1];
    assert_eq!((e.key.as_str(), e.batch), ("dtype=bf16,cols=4096", 16384));
    assert_eq!(e.config, tuned::EntryConfig::Tuned(cfg(128, 6)));
    assert_eq!((e.us, e.default_us), (98.5, 100.0));
    // Prune applies the same rule: the 1.5% entry at 100 us stays.
    let o = kernels(&[
        "tables",
        "prune",
        tables.join("rmsnorm/sm90.json").to_str().unwrap(),
    ]);
    assert_stdout_has(&o, "kept 1, marked default 0");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A record's key carries the digest of the candidates its search compiled and timed.
/// One searched over another candidate list (an older build's space, or another
/// derivation of a config's defines), or keyed with no digest at all, is skipped and
/// named, with and without `--reselect` (whose recorded times would be another
/// search's). A log-softmax result, keyed under the softmax table it shares, is this
/// build's search all the same. An online search timed with programmatic dependent
/// launch is skipped too: tables are tuned with plain launches.
#[test]
fn promote_skips_records_searched_over_another_candidate_list() {
    use kernels::core::{
        cache::{cache_key, CacheKeyParts, Component, Section, PDL_TUNING_VARIANT},
        tune::{CandidateRecord, TuneRecord},
        DiskCache,
    };
    use kernels::rmsnorm::RmsNorm;
    use kernels::softmax::LogSoftmax;
    use tuned::{TunedKernel, Value};
    let dir = std::env::temp_dir().join(format!("kernels-candidates-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = DiskCache::at(dir.join("cache"));
    let batch = 64;
    // Each record: the default first at 4 us, and a config 25% faster.
    let store = |kernel: &str,
                 fingerprint: &str,
                 static_key: &str,
                 candidates: Component<&str>,
                 variant: Component<&str>,
                 best: Vec<Value>,
                 default: Vec<Value>| {
        let key = cache_key(&CacheKeyParts {
            candidates,
            variant,
            ..kernels::core::testing::tuning_key_parts(kernel, fingerprint, static_key, batch)
        });
        let record = TuneRecord {
            config: best.clone(),
            us: 3.0,
            default_us: Some(4.0),
            device: "NVIDIA H200".into(),
            compiler: "nvrtc 13.0".into(),
            tuned_at: "2026-11-30".into(),
            candidates: vec![
                CandidateRecord {
                    config: default,
                    outcome: Ok(4.0),
                },
                CandidateRecord {
                    config: best,
                    outcome: Ok(3.0),
                },
            ],
            phases: Default::default(),
        };
        cache
            .store(Section::Tuning, &key, "tune", record.to_json().as_bytes())
            .unwrap();
    };
    let norm = |threads: i64| {
        vec![
            Value::Int(threads),
            Value::Int(8),
            Value::Int(1),
            Value::Int(0),
            Value::Int(1),
            Value::Int(0),
        ]
    };
    let fingerprint = kernels::rmsnorm::SOURCE_FINGERPRINT;
    let current = |cols: u32| digest::<RmsNorm>(&format!("dtype=bf16,cols={cols}"), batch);
    let (now, older) = (current(5120), "fnv1a64:0000000000000000");
    store(
        "rmsnorm",
        fingerprint,
        "dtype=bf16,cols=5120",
        Component::Applies(&now),
        Component::DoesNotApply,
        norm(256),
        norm(128),
    );
    let pdl_digest = current(8192);
    store(
        "rmsnorm",
        fingerprint,
        "dtype=bf16,cols=8192",
        Component::Applies(&pdl_digest),
        Component::Applies(PDL_TUNING_VARIANT),
        norm(256),
        norm(128),
    );
    store(
        "rmsnorm",
        fingerprint,
        "dtype=bf16,cols=6144",
        Component::Applies(older),
        Component::DoesNotApply,
        norm(256),
        norm(128),
    );
    store(
        "rmsnorm",
        fingerprint,
        "dtype=bf16,cols=7168",
        Component::DoesNotApply,
        Component::DoesNotApply,
        norm(256),
        norm(128),
    );
    // Log-softmax's search, keyed `softmax`: the default's config is in the space.
    let softmax_key = "dtype=bf16,cols=4096";
    let log = digest::<LogSoftmax>(softmax_key, batch);
    let parsed = tuned::StaticKey::parse(LogSoftmax::SCHEMA, softmax_key).unwrap();
    let default = LogSoftmax::config_values(&LogSoftmax::analytic_default(
        tuned::Target::Sm90,
        &LogSoftmax::key_from_values(parsed.values()).unwrap(),
        batch,
    ));
    store(
        "softmax",
        kernels::softmax::SOURCE_FINGERPRINT,
        softmax_key,
        Component::Applies(&log),
        Component::DoesNotApply,
        default.clone(),
        default,
    );
    for reselect in [false, true] {
        let tables = dir.join(format!("tables-{reselect}"));
        let o = promote(&dir.join("cache"), &tables, reselect);
        assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
        let out = stdout(&o);
        assert!(out.contains("rmsnorm/sm90.json: 1 added"), "{out}");
        assert!(out.contains("softmax/sm90.json: 1 added"), "{out}");
        assert!(
            out.contains(&format!(
                "skipped rmsnorm [dtype=bf16,cols=6144] batch 64: searched over another candidate list (digest {older}; this build searches {})",
                current(6144)
            )),
            "{out}"
        );
        assert!(
            out.contains(
                "skipped rmsnorm [dtype=bf16,cols=7168] batch 64: its key records no candidates digest"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "skipped rmsnorm [dtype=bf16,cols=8192] batch 64: timed with programmatic dependent launch"
            ),
            "{out}"
        );
        let t = tuned::TableFile::read(&tables.join("rmsnorm/sm90.json"), None).unwrap();
        let keys: Vec<&str> = t.entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["dtype=bf16,cols=5120"], "{reselect}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lookup_at_a_committed_default_marker_serves_the_default() {
    // The first default marker of the committed sm90 tables (prune leaves them where
    // tuning measured the analytic default best).
    let (kernel, canonical, batch) = kernels::registry()
        .iter()
        .filter_map(|k| k.baked_table(tuned::Target::Sm90))
        .find_map(|t| {
            t.entries.entries().find_map(|(key, list)| {
                list.iter()
                    .find(|e| e.config.is_default())
                    .map(|e| (t.kernel, *key, e.batch))
            })
        })
        .expect("the committed sm90 tables have default markers");
    let batch = batch.to_string();
    let mut args = vec!["lookup", kernel, "--target", "sm90", "--batch", &batch, "--json"];
    for kv in canonical.split(',') {
        match kv.strip_prefix("dtype=") {
            Some(d) => args.extend(["--dtype", d]),
            None => args.push(kv),
        }
    }
    let o = kernels(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["source"], "table-default", "{v}");
    assert_eq!(v["table_batch"].to_string(), batch, "{v}");
    assert_eq!(v["distance"], 0.0, "{v}");
}

/// `kernels tune --backend hip` (and `tables check --backend hip`): a binary built
/// without `rocm` refuses the flag as a usage error saying so; one built with it, on a
/// machine without an AMD GPU, fails with the `no HIP device` error. Either way
/// nothing is written. (On an AMD machine
/// the second half is the real tune, covered by the rocm GPU tests instead.)
#[test]
fn tune_on_hip_without_rocm_or_without_a_device_writes_nothing() {
    let tables = std::env::temp_dir().join(format!("kernels-cli-hip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tables);
    std::fs::create_dir_all(&tables).unwrap();
    let shapes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuned/shapes/rmsnorm.json");
    let o = kernels(&[
        "tune",
        "rmsnorm",
        "--shapes",
        shapes.to_str().unwrap(),
        "--tables",
        tables.to_str().unwrap(),
        "--backend",
        "hip",
    ]);
    let err = stderr(&o);
    if cfg!(feature = "rocm") {
        if kernels_core_has_amd_gpu() {
            eprintln!("SKIPPED tune_on_hip_without_a_device: an AMD GPU is present");
            let _ = std::fs::remove_dir_all(&tables);
            return;
        }
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains("no HIP device"), "{err}");
    } else {
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("--backend") && err.contains("built without") && err.contains("rocm"),
            "{err}"
        );
    }
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let written: Vec<_> = std::fs::read_dir(&tables).unwrap().collect();
    assert!(written.is_empty(), "wrote {written:?}");
    let _ = std::fs::remove_dir_all(&tables);

    let o = kernels(&[
        "tune",
        "rmsnorm",
        "--shapes",
        shapes.to_str().unwrap(),
        "--backend",
        "metal",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--backend: `metal` is not a backend"),
        "{}",
        stderr(&o)
    );
}

/// `kernels tune --carry-from DIR` reads the kernel's old source files before any
/// device is opened: a folder without them is a usage error naming `--carry-from` and
/// the missing file, and nothing is written.
#[test]
fn tune_carry_from_names_a_missing_old_source_file() {
    let dir = std::env::temp_dir().join(format!("kernels-cli-carry-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (old, tables) = (dir.join("old"), dir.join("tables"));
    std::fs::create_dir_all(&old).unwrap();
    std::fs::create_dir_all(&tables).unwrap();
    // The prelude but not the kernel's own file.
    std::fs::write(old.join("prelude.cuh"), kernels::core::PRELUDE).unwrap();
    let shapes = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tuned/shapes/rmsnorm.json");
    let o = kernels(&[
        "tune",
        "rmsnorm",
        "--shapes",
        shapes.to_str().unwrap(),
        "--tables",
        tables.to_str().unwrap(),
        "--carry-from",
        old.to_str().unwrap(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--carry-from") && err.contains("rmsnorm.cu"),
        "{err}"
    );
    let written: Vec<_> = std::fs::read_dir(&tables).unwrap().collect();
    assert!(written.is_empty(), "wrote {written:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether this machine has an AMD GPU the HIP runtime can open.
#[cfg(feature = "rocm")]
fn kernels_core_has_amd_gpu() -> bool {
    kernels::core::HipDevice::count().is_ok()
}

#[cfg(not(feature = "rocm"))]
fn kernels_core_has_amd_gpu() -> bool {
    false
}

/// `tables export --format sglang` on the fixture table: the files SGLang's fused-MoE
/// loader looks up for the fixture's (E, N) on an H200, each mapping tokens to a config
/// with SGLang's fields. Read back as SGLang's loader reads them (python3, where
/// present), and as JSON here.
#[test]
fn the_sglang_export_is_what_sglangs_loader_reads() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/moe/sm90.json");
    let out = std::env::temp_dir().join(format!("kernels-sglang-export-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = kernels(&[
        "tables",
        "export",
        "--format",
        "sglang",
        "--table",
        fixtures.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_stdout_has(&o, "skipped E=8,N=7168");
    let fields = [
        "BLOCK_SIZE_M",
        "BLOCK_SIZE_N",
        "BLOCK_SIZE_K",
        "GROUP_SIZE_M",
        "num_warps",
        "num_stages",
    ];
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "E=128,N=768,device_name=NVIDIA_H200.json",
            "E=8,N=14336,device_name=NVIDIA_H200.json"
        ]
    );
    for name in &names {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(name)).unwrap()).unwrap();
        for (m, c) in v.as_object().unwrap() {
            assert!(m.parse::<u64>().is_ok(), "{name}: key {m}");
            let keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(keys.len(), fields.len(), "{name} {m}");
            assert!(fields.iter().all(|f| c[f].is_u64()), "{name} {m}: {c}");
        }
    }
    // SGLang's lookup: the file named from E, N and the device name with spaces as `_`
    // (no dtype part for bf16), its keys read as ints, the config of the nearest M.
    let script = r#"
import json, os, sys
out = sys.argv[1]
def file_name(E, N, device):
    return f"E={E},N={N},device_name={device.replace(' ', '_')}.json"
with open(os.path.join(out, file_name(8, 14336, "NVIDIA H200"))) as f:
    configs = {int(k): v for k, v in json.load(f).items()}
pick = lambda M: configs[min(configs.keys(), key=lambda x: abs(x - M))]
assert pick(50)["BLOCK_SIZE_M"] == 32 and pick(50)["num_warps"] == 8, pick(50)
assert pick(2)["BLOCK_SIZE_N"] == 64 and pick(2)["num_stages"] == 4, pick(2)
for c in configs.values():
    assert set(c) == {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages"}
print("sglang-ok")
"#;
    match Command::new("python3").arg("-c").arg(script).arg(&out).output() {
        Ok(p) => assert!(
            String::from_utf8_lossy(&p.stdout).contains("sglang-ok"),
            "{}",
            String::from_utf8_lossy(&p.stderr)
        ),
        Err(e) => eprintln!("python3 not run ({e}); the JSON checks above stand"),
    }
    let _ = std::fs::remove_dir_all(&out);

    // An unknown format is a usage error naming the argument.
    let o = kernels(&["tables", "export", "--format", "csv"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--format"), "{}", stderr(&o));
}

#[test]
fn the_defaults_check_names_a_folder_without_shape_files() {
    let empty = std::env::temp_dir().join(format!("kernels-defaults-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = kernels(&["tables", "check", "--defaults", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--defaults: no <kernel>.json shape file"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir(&empty).unwrap();
}
