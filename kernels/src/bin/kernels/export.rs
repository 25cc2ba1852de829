//! `kernels tables export --format sglang`: a fused-MoE table in the layout SGLang's
//! Triton fused-MoE reads its tuned configs from, so an engine on SGLang can use our
//! tuning.
//!
//! SGLang looks a config file up by name, `E={experts},N={n},device_name={device}.json`
//! for bf16 and f16 weights (its `dtype=` part names quantized types only; the device
//! name is the driver's, spaces as `_`), and picks the entry whose M (tokens, a string
//! key) is nearest the call's. Each entry holds `BLOCK_SIZE_M`, `BLOCK_SIZE_N`,
//! `BLOCK_SIZE_K`, `GROUP_SIZE_M`, `num_warps` and `num_stages`.
//!
//! Our config maps field by field: block_m, block_n, block_k, warps, stages. `path`
//! (which of our kernels runs the tile: mma.sync, or Hopper wgmma plain or swapped)
//! has no SGLang field and is left out; the tile and depth it was tuned with are still
//! the best measured for the shape.
//! `GROUP_SIZE_M` has no counterpart (our GEMM grid walks row tiles without grouping)
//! and is written as 1, SGLang's "no grouping". A default marker exports the analytic
//! default for its batch, as the lookup serves it. Keys that SGLang's file name cannot
//! tell apart are left out and listed: two hidden sizes or topk values for one (E, N),
//! or f16 entries where bf16 ones exist for the same (E, N) (both read the same file).

use std::collections::BTreeMap;
use std::path::Path;

use kernels::moe::{Moe, MoeConfig};
use tuned::{DType, EntryConfig, TableFile, TunedKernel};

/// The files of an export (name, JSON text) and what was left out, with why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exported {
    pub files: Vec<(String, String)>,
    pub skipped: Vec<String>,
}

/// One SGLang entry's text: our config's fields under SGLang's names.
fn entry_json(c: &MoeConfig) -> String {
    format!(
        "{{\"BLOCK_SIZE_M\": {}, \"BLOCK_SIZE_N\": {}, \"BLOCK_SIZE_K\": {}, \"GROUP_SIZE_M\": 1, \"num_warps\": {}, \"num_stages\": {}}}",
        c.block_m, c.block_n, c.block_k, c.warps, c.stages
    )
}

/// The SGLang files of a fused-MoE table (see the module docs).
pub fn sglang(table: &TableFile) -> Result<Exported, String> {
    if table.header.kernel != Moe::SCHEMA.kernel {
        return Err(format!(
            "--format sglang exports the moe table, not `{}`",
            table.header.kernel
        ));
    }
    let target = table.header.target;
    let device = table.header.device.replace(' ', "_");
    // (E, N) -> dtype -> (hidden, topk) -> tokens -> config.
    type ByShape = BTreeMap<(u64, u64), BTreeMap<u64, MoeConfig>>;
    let mut groups: BTreeMap<(u32, u32), BTreeMap<&'static str, ByShape>> = BTreeMap::new();
    for e in &table.entries {
        let key = Moe::key_from_values(e.key.values())?;
        let config = match &e.config {
            EntryConfig::Default => Moe::analytic_default(target, &key, e.batch),
            EntryConfig::Tuned(values) => MoeConfig::from_values(values)?,
        };
        groups
            .entry((key.experts, key.n))
            .or_default()
            .entry(key.dtype.name())
            .or_default()
            .entry((key.k as u64, key.topk as u64))
            .or_default()
            .insert(e.batch, config);
    }
    let mut out = Exported::default();
    for ((experts, n), by_dtype) in groups {
        let name = format!("E={experts},N={n},device_name={device}.json");
        // bf16 first: both dtypes read the one file.
        let mut chosen = None;
        for dtype in [DType::Bf16.name(), DType::F16.name()] {
            let Some(shapes) = by_dtype.get(dtype) else {
                continue;
            };
            if chosen.is_some() {
                out.skipped.push(format!(
                    "{name} {dtype}: SGLang reads bf16 and f16 weights from the same file; the bf16 entries are exported"
                ));
                continue;
            }
            if shapes.len() > 1 {
                let keys: Vec<String> = shapes.keys().map(|(k, t)| format!("k={k} topk={t}")).collect();
                out.skipped.push(format!(
                    "{name} {dtype}: SGLang's file name does not tell {} apart",
                    keys.join(" and ")
                ));
                continue;
            }
            chosen = shapes.values().next();
        }
        let Some(by_tokens) = chosen else {
            continue;
        };
        let lines: Vec<String> = by_tokens
            .iter()
            .map(|(m, c)| format!("    \"{m}\": {}", entry_json(c)))
            .collect();
        out.files.push((name, format!("{{\n{}\n}}\n", lines.join(",\n"))));
    }
    Ok(out)
}

/// Reads the moe table at `table` and writes its SGLang files into `out` (created if
/// missing), each atomically (a temporary file, then a rename).
pub fn write_sglang(table: &Path, out: &Path) -> Result<Exported, String> {
    let schema = Moe::SCHEMA;
    let file =
        TableFile::read(table, Some(schema)).map_err(|e| format!("{}: {}", table.display(), e.reason))?;
    let exported = sglang(&file)?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (name, text) in &exported.files {
        let path = out.join(name);
        let tmp = out.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(exported)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `tests/fixtures/moe/sm90.json`, a fused-MoE sm90 table as `kernels tune` writes
    /// one: Mixtral (tp 1) tuned at 1 and 64 tokens with a default marker at 4096;
    /// Qwen3 in bf16 (a wgmma_swap config) and f16; two hidden sizes under one (E, N).
    pub(crate) const FIXTURE: &str = include_str!("../../../tests/fixtures/moe/sm90.json");

    /// The fixture at `<dir>/moe/sm90.json`.
    pub(crate) fn write_fixture(dir: &Path) -> std::path::PathBuf {
        let path = dir.join("moe").join("sm90.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, FIXTURE).unwrap();
        path
    }

    #[test]
    fn the_table_maps_to_sglangs_files_and_fields() {
        let dir = std::env::temp_dir().join(format!("kernels-export-{}", std::process::id()));
        let path = write_fixture(&dir);
        let table = TableFile::read(&path, Some(Moe::SCHEMA)).unwrap();
        let e = sglang(&table).unwrap();
        let names: Vec<&str> = e.files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "E=8,N=14336,device_name=NVIDIA_H200.json",
                "E=128,N=768,device_name=NVIDIA_H200.json"
            ]
        );
        let mixtral: serde_json::Value = serde_json::from_str(&e.files[0].1).unwrap();
        assert_eq!(
            mixtral["64"],
            serde_json::json!({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 8, "num_stages": 4})
        );
        // The marker exports the analytic default for its batch.
        let key = kernels::moe::MoeKey {
            dtype: DType::Bf16,
            experts: 8,
            n: 14336,
            k: 4096,
            topk: 2,
        };
        let d = Moe::analytic_default(tuned::Target::Sm90, &key, 4096);
        assert_eq!(mixtral["4096"]["BLOCK_SIZE_M"], d.block_m);
        assert_eq!(mixtral["4096"]["num_stages"], d.stages);
        assert_eq!(mixtral.as_object().unwrap().len(), 3);
        assert_eq!(e.skipped.len(), 2, "{:?}", e.skipped);
        assert!(
            e.skipped[0].contains("E=8,N=7168") && e.skipped[0].contains("k=2048 topk=2 and k=4096 topk=2")
        );
        assert!(e.skipped[1].contains("E=128,N=768") && e.skipped[1].contains("f16"));
        // A wgmma config exports SGLang's fields alone: no `path`.
        let qwen3: serde_json::Value = serde_json::from_str(&e.files[1].1).unwrap();
        assert_eq!(
            qwen3["16"],
            serde_json::json!({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 6})
        );

        // Another kernel's table is refused.
        let mut other = table.clone();
        other.header.kernel = "gemm".into();
        assert!(sglang(&other).unwrap_err().contains("moe table"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
