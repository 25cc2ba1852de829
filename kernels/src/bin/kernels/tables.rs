//! Table maintenance for `kernels tables`: what is baked, validating files on
//! disk, and the offline regression guard.

use std::collections::{btree_map::Entry, BTreeMap};
use std::path::{Path, PathBuf};

use tuned::{origin_of_path, table_files, EntryConfig, TableEntry, TableFile, Target};

/// One baked table, as `kernels tables list` shows it.
#[derive(Clone, Debug)]
pub struct BakedInfo {
    pub kernel: &'static str,
    pub target: Target,
    /// Entries over all keys, default markers included.
    pub entries: usize,
    /// Default markers: batches where tuning measured the analytic default best.
    pub markers: usize,
    pub device: &'static str,
    pub tuned_at: &'static str,
    /// How the entries were timed (`graph` or `single`).
    pub timing: &'static str,
    pub fingerprint: &'static str,
    pub stale: bool,
}

/// Every table baked into this binary.
pub fn baked() -> Vec<BakedInfo> {
    let mut out = Vec::new();
    for k in kernels::registry() {
        for t in Target::ALL {
            if let Some(b) = k.baked_table(t) {
                out.push(BakedInfo {
                    kernel: b.kernel,
                    target: t,
                    entries: b.len,
                    markers: b.markers(),
                    device: b.device,
                    tuned_at: b.tuned_at,
                    timing: b.timing,
                    fingerprint: b.source_fingerprint,
                    stale: b.is_stale(),
                });
            }
        }
    }
    out
}

/// One problem found in a table file.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub file: String,
    pub entry: Option<usize>,
    pub reason: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.entry {
            Some(i) => write!(f, "{}: entry {i}: {}", self.file, self.reason),
            None => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

/// The table files named by `paths` (files, or folders searched for `<kernel>/<target>.json`).
pub fn collect(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Finding> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let found = table_files(p).map_err(|e| Finding {
                file: p.display().to_string(),
                entry: None,
                reason: format!("cannot list: {e}"),
            })?;
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

/// Validates one file against its kernel's schema and search space (default markers
/// have no config to check). With `offline_check`, also the regression guard: a
/// fingerprint that is not the current kernel source's, or an entry slower than its
/// analytic default, is a finding.
pub fn check_file(path: &Path, offline_check: bool) -> Vec<Finding> {
    let file = path.display().to_string();
    let finding = |entry, reason: String| Finding {
        file: file.clone(),
        entry,
        reason,
    };
    let (kernel_name, _target) = match origin_of_path(path) {
        Ok(o) => o,
        Err(e) => return vec![finding(None, e)],
    };
    let Some(kernel) = kernels::kernel(&kernel_name) else {
        return vec![finding(
            None,
            format!("no kernel named `{kernel_name}` (the folder names the kernel)"),
        )];
    };
    let table = match TableFile::read(path, Some(kernel.schema())) {
        Ok(t) => t,
        Err(e) => return vec![finding(e.entry, e.reason)],
    };
    let mut out = Vec::new();
    for (i, e) in table.entries.iter().enumerate() {
        if let Some(Err(r)) = e.config.tuned().map(|c| kernel.check_config(c)) {
            out.push(finding(Some(i), format!("config outside the search space: {r}")));
        }
        if offline_check && e.us > e.default_us {
            out.push(finding(
                Some(i),
                format!(
                    "key `{}` batch {}: tuned config ({:.3} us) is slower than the analytic default ({:.3} us)",
                    e.key, e.batch, e.us, e.default_us
                ),
            ));
        }
    }
    if offline_check {
        let shapes = crate::variants::default_shapes_dir().join(format!("{kernel_name}.json"));
        if let Ok(text) = std::fs::read_to_string(&shapes) {
            match kernels::core::tune::parse_shapes(kernel.schema(), &text, &shapes.display().to_string()) {
                Ok(wanted) => {
                    for (key, batch, nearest) in uncovered(&table.entries, &wanted) {
                        out.push(finding(
                            None,
                            format!(
                                "key `{key}` batch {batch} (tuned/shapes): its nearest entry is batch {nearest}, more than \
                                 {MAX_COVER_DISTANCE} doubling away, so the nearest-batch lookup would serve it a config \
                                 tuned for another regime; tune the key's batches or drop its entries"
                            ),
                        ));
                    }
                }
                Err(e) => out.push(finding(None, format!("cannot read the shape file: {e}"))),
            }
        }
    }
    if offline_check && table.header.source_fingerprint != kernel.source_fingerprint() {
        out.push(finding(
            None,
            format!(
                "stale: tuned against kernel source {}, the source is now {}",
                table.header.source_fingerprint,
                kernel.source_fingerprint()
            ),
        ));
    }
    out
}

/// Most doublings between a shape-file batch and the nearest entry of its key: one, so a
/// key tuned at 1..8192 serves 16384 from 8192, while a key tuned at one decode batch does
/// not serve prefill from it (8B lm_head tuned at m = 1 only served that swapped decode tile
/// at m = 64-8192, 0.21-0.56x cuBLAS on the H200).
pub const MAX_COVER_DISTANCE: f64 = 1.0;

/// The (static key, batch, nearest entry batch) of every batch of `wanted` (a shape file's
/// pairs) whose key has entries in `entries`, none of them within
/// [`MAX_COVER_DISTANCE`] doublings. Keys without entries serve the analytic default and
/// are not reported.
pub fn uncovered(entries: &[TableEntry], wanted: &[(tuned::StaticKey, u64)]) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for (key, batch) in wanted {
        let nearest = entries
            .iter()
            .filter(|e| &e.key == key)
            .map(|e| e.batch)
            .min_by(|a, b| log2_distance(*a, *batch).total_cmp(&log2_distance(*b, *batch)));
        if let Some(n) = nearest {
            if log2_distance(n, *batch) > MAX_COVER_DISTANCE + 1e-9 {
                out.push((key.to_string(), *batch, n));
            }
        }
    }
    out
}

fn log2_distance(a: u64, b: u64) -> f64 {
    ((a.max(1) as f64).log2() - (b.max(1) as f64).log2()).abs()
}

/// What [`prune`] did to one file.
#[derive(Clone, Debug, PartialEq)]
pub struct Pruned {
    /// Tuned entries kept: they beat the default by more than the margin.
    pub kept: usize,
    /// (static key, batch, us, default_us) of each entry turned into a default marker.
    pub marked: Vec<(String, u64, f64, f64)>,
    /// Default markers the file already had (left as they are).
    pub markers_before: usize,
}

/// Turns every tuned entry whose time does not beat its analytic default's by more
/// than `margin` (a fraction: 0.02 is 2%; half of it where the default takes
/// [`kernels_core::tune::LONG_KERNEL_US`] or more, the tuner's rule,
/// [`kernels_core::tune::noise_margin`]) into a default marker, and rewrites the file
/// atomically. Such a config buys nothing over the default, and a kept entry is a
/// promise that the table is faster. The marker keeps the batch in the table: deleting
/// the entry would let the nearest-batch lookup hand that batch a neighbour's config,
/// where tuning measured the default best.
pub fn prune(path: &Path, margin: f64) -> Result<Pruned, Finding> {
    let file = path.display().to_string();
    let finding = |entry, reason: String| Finding {
        file: file.clone(),
        entry,
        reason,
    };
    let (kernel_name, _) = origin_of_path(path).map_err(|e| finding(None, e))?;
    let kernel = kernels::kernel(&kernel_name)
        .ok_or_else(|| finding(None, format!("no kernel named `{kernel_name}`")))?;
    let mut table = TableFile::read(path, Some(kernel.schema())).map_err(|e| finding(e.entry, e.reason))?;
    let mut pruned = Pruned {
        kept: 0,
        marked: Vec::new(),
        markers_before: 0,
    };
    for e in &mut table.entries {
        match e.config {
            EntryConfig::Default => pruned.markers_before += 1,
            EntryConfig::Tuned(_)
                if e.us < e.default_us * (1.0 - kernels_core::tune::noise_margin(margin, e.default_us)) =>
            {
                pruned.kept += 1
            }
            EntryConfig::Tuned(_) => {
                pruned
                    .marked
                    .push((e.key.to_string(), e.batch, e.us, e.default_us));
                *e = TableEntry::default_marker(e.key.clone(), e.batch, e.default_us);
            }
        }
    }
    table
        .write(path)
        .map_err(|e| finding(None, format!("cannot write: {e}")))?;
    Ok(pruned)
}

/// Replaces every default marker of the table at `path` with the config the analytic
/// default gives for its key and batch now, and rewrites the file atomically; returns how
/// many were pinned. Run before changing a heuristic: a marker records that the default
/// of the heuristic it was tuned with won, so it would otherwise serve whatever the new
/// heuristic picks, which tuning never measured there. A pinned entry keeps its times
/// (`us` equal to `default_us`, the default's measured time).
pub fn pin(path: &Path) -> Result<usize, Finding> {
    let file = path.display().to_string();
    let finding = |entry, reason: String| Finding {
        file: file.clone(),
        entry,
        reason,
    };
    let (kernel_name, target) = origin_of_path(path).map_err(|e| finding(None, e))?;
    let kernel = kernels::kernel(&kernel_name)
        .ok_or_else(|| finding(None, format!("no kernel named `{kernel_name}`")))?;
    let mut table = TableFile::read(path, Some(kernel.schema())).map_err(|e| finding(e.entry, e.reason))?;
    let mut pinned = 0;
    for (i, e) in table.entries.iter_mut().enumerate() {
        if e.config.tuned().is_some() {
            continue;
        }
        let values = kernel
            .analytic_default_values(target, &e.key, e.batch)
            .map_err(|r| finding(Some(i), r))?;
        kernel
            .check_config(&values)
            .map_err(|r| finding(Some(i), format!("the analytic default is outside the space: {r}")))?;
        e.config = EntryConfig::Tuned(values);
        pinned += 1;
    }
    table
        .write(path)
        .map_err(|e| finding(None, format!("cannot write: {e}")))?;
    Ok(pinned)
}

/// Chooses `record`'s winner again from its candidates (the analytic default first, as
/// every search records them) by [`kernels_core::tune::select`]; an error when no candidate
/// ran or the record holds none.
fn reselect_record(record: &mut kernels_core::tune::TuneRecord) -> Result<(), String> {
    use kernels_core::tune::{select, Measured, NOISE_THRESHOLD};
    let measured: Vec<Measured> = record
        .candidates
        .iter()
        .map(|c| match &c.outcome {
            Ok(us) => Measured::Time(*us),
            Err(e) => Measured::Failed(e.clone()),
        })
        .collect();
    let i =
        select(&measured, 0, NOISE_THRESHOLD).ok_or("no candidate of the record ran; nothing to reselect")?;
    let (Some(chosen), Some(us)) = (record.candidates.get(i), measured[i].time()) else {
        return Err("no candidate of the record ran; nothing to reselect".into());
    };
    record.config = chosen.config.clone();
    record.us = us;
    Ok(())
}

/// What [`promote`] did with each online tuning result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Promoted {
    /// Table files written, with (added, replaced, kept, dropped) counts; dropped are the
    /// file's entries measured against another source, timing method or device.
    pub written: Vec<(PathBuf, usize, usize, usize, usize)>,
    /// (cache file or key, why it was left out).
    pub skipped: Vec<(String, String)>,
    /// Results written as default markers: the analytic default was at least as fast.
    pub markers: Vec<String>,
}

/// One `name = value` line of a cache key's text; string values are JSON-quoted.
fn key_field<'a>(text: &'a str, name: &str) -> Option<std::borrow::Cow<'a, str>> {
    let raw = text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim_start().strip_prefix('='))?
        .trim();
    if raw.starts_with('"') {
        serde_json::from_str::<String>(raw)
            .ok()
            .map(std::borrow::Cow::Owned)
    } else {
        Some(std::borrow::Cow::Borrowed(raw))
    }
}

/// The candidates digest a search of one kernel type computes
/// ([`kernels_core::launch::candidates_digest`]), for a key in its table's form; an error when
/// the kernel does not take the key.
type DigestFn = fn(&kernels_core::DeviceInfo, &tuned::StaticKey, u64) -> Result<String, String>;

/// The [`DigestFn`] of kernel type `K`.
fn digest_of<K: kernels_core::PlannedKernel>(
    device: &kernels_core::DeviceInfo,
    key: &tuned::StaticKey,
    batch: u64,
) -> Result<String, String> {
    let k = K::key_from_values(key.values())?;
    Ok(kernels_core::launch::candidates_digest::<K>(device, &k, batch))
}

/// The searches whose results the table of kernel `kernel` holds, as their digest
/// functions: softmax's tables serve softmax and log-softmax, whose searches compile
/// different variants. Empty for a kernel this build cannot search.
fn searches_of(kernel: &str) -> Vec<DigestFn> {
    use kernels_rmsnorm::{FusedAddRmsNorm, RmsNorm};
    use kernels_softmax::{LogSoftmax, Softmax};
    use tuned::TunedKernel;
    let all: [(&str, DigestFn); 6] = [
        (Softmax::SCHEMA.kernel, digest_of::<Softmax>),
        (LogSoftmax::SCHEMA.kernel, digest_of::<LogSoftmax>),
        (RmsNorm::SCHEMA.kernel, digest_of::<RmsNorm>),
        (FusedAddRmsNorm::SCHEMA.kernel, digest_of::<FusedAddRmsNorm>),
        (kernels_gemm::Gemm::SCHEMA.kernel, digest_of::<kernels_gemm::Gemm>),
        (kernels_moe::Moe::SCHEMA.kernel, digest_of::<kernels_moe::Moe>),
    ];
    all.into_iter()
        .filter(|(name, _)| *name == kernel)
        .map(|(_, f)| f)
        .collect()
}

/// The device a tuning key describes: its arch's target, its name and SM count (the
/// key's `device` and `sm_count`), the other limits those of the target's nominal
/// device. Searches read no more of a device than that today (the target, and the SM
/// count and shared memory per SM of a Hopper part, which every sm90 part has alike),
/// so the digest computed for it is the one the tuner computed on the real device.
fn recorded_device(target: Target, name: &str, sm_count: u32) -> Option<kernels_core::DeviceInfo> {
    use kernels_core::DeviceInfo;
    // For AMD targets, as a HIP device's launch limits describe it.
    let info = DeviceInfo::nominal(target)?;
    Some(DeviceInfo {
        name: name.to_string(),
        sm_count,
        ..info
    })
}

/// Whether the record under the tuning key `text` (of `kernel`, for `key` at `batch`
/// on `target`) was searched over the candidates this build would search: the key's
/// `candidates` digest must be one this build computes for the same problem on the
/// same device. A record searched over another space (an older or newer build, another
/// derivation of a config's defines) is not this build's result, even where its
/// winner is still in the space. The error says why, for the skipped list.
fn check_candidates(
    text: &str,
    kernel: &str,
    target: Target,
    key: &tuned::StaticKey,
    batch: u64,
) -> Result<(), String> {
    let recorded = key_field(text, "candidates").unwrap_or_default();
    if !recorded.starts_with("fnv1a64:") {
        return Err(
            "its key records no candidates digest (a result of an older build): tune it again".into(),
        );
    }
    let searches = searches_of(kernel);
    if searches.is_empty() {
        return Err(format!(
            "this build has no search for `{kernel}` to check the record's candidates digest {recorded} against"
        ));
    }
    let sm_count = key_field(text, "sm_count").and_then(|n| n.parse::<u32>().ok());
    let device = sm_count.and_then(|n| recorded_device(target, &key_field(text, "device")?, n));
    let Some(device) = device else {
        return Err("its key records no device and SM count to check its candidates digest for".into());
    };
    let current = searches
        .iter()
        .map(|digest| digest(&device, key, batch))
        .collect::<Result<Vec<String>, String>>()?;
    if current.iter().any(|d| *d == recorded) {
        return Ok(());
    }
    Err(format!(
        "searched over another candidate list (digest {recorded}; this build searches {}): tune it again",
        current.join(" or ")
    ))
}

/// A table's results: (kernel, target, device, timing method).
type TableGroup = (String, Target, String, String);

/// A table holds one device's times, taken one way (`TableFile::merge` drops the others):
/// where results measured on several devices, or timed several ways, would fill the same
/// table, the group with the most results is promoted (on a tie, the first by device name
/// and method) and each result of the others is listed in `skipped` with the reason.
fn one_group_per_table(
    groups: BTreeMap<TableGroup, (tuned::TableHeader, Vec<TableEntry>)>,
    skipped: &mut Vec<(String, String)>,
) -> BTreeMap<(String, Target), (tuned::TableHeader, Vec<TableEntry>)> {
    let mut out = BTreeMap::new();
    let mut others = Vec::new();
    // BTreeMap order: device, then method, within a table; a later group replaces the
    // kept one only with strictly more results.
    for ((kernel, target, _, _), group) in groups {
        match out.entry((kernel, target)) {
            Entry::Vacant(v) => {
                v.insert(group);
            }
            Entry::Occupied(mut o) => {
                if group.1.len() > o.get().1.len() {
                    others.push(o.insert(group));
                } else {
                    others.push(group);
                }
            }
        }
    }
    for (header, entries) in others {
        let kept = &out[&(header.kernel.clone(), header.target)].0;
        for e in entries {
            skipped.push((
                format!("{} [{}] batch {}", header.kernel, e.key, e.batch),
                format!(
                    "measured on {} ({} timing), and more of this table's results on {} ({} timing): a table holds one device's times, taken one way",
                    header.device, header.timing, kept.device, kept.timing
                ),
            ));
        }
    }
    out
}

/// Moves tuning results from the disk cache (the online tuner's, or `kernels tune`'s)
/// into committed tables (`<tables>/<kernel>/<target>.json`, merged: the faster entry
/// of each (key, batch) wins; a table holds one timing method, the record's key says
/// which). Only results that can serve from a table are promoted: measured on 16-byte
/// aligned buffers, against the kernel source this binary was built from, with the
/// analytic default timed beside them, and searched over the candidates this build
/// searches (the key's candidates digest, see
/// [`kernels_core::cache::CacheKeyParts::candidates`]); the rest are listed with the
/// reason. A result no faster than the analytic default becomes a default marker with
/// the default's time (as `kernels tune` then `tables prune` would write it), so its
/// batch serves the default rather than a neighbouring batch's config.
///
/// With `reselect`, each record's winner is chosen again from its candidates' recorded
/// medians by this build's rule ([`kernels_core::tune::select`] at
/// [`kernels_core::tune::NOISE_THRESHOLD`]), as a search would now choose from the same
/// measurements; nothing is timed.
pub fn promote(
    cache: &kernels_core::DiskCache,
    tables: Option<&Path>,
    reselect: bool,
) -> Result<Promoted, Finding> {
    use tuned::{StaticKey, TableHeader};

    let mut out = Promoted::default();
    let (entries, corrupt) = cache
        .entries(kernels_core::cache::Section::Tuning)
        .map_err(|e| Finding {
            file: "cache".into(),
            entry: None,
            reason: e.to_string(),
        })?;
    for (path, reason) in corrupt {
        out.skipped.push((path.display().to_string(), reason));
    }
    // By table and by the (device, timing method) the results were measured with.
    let mut by_table: BTreeMap<TableGroup, (TableHeader, Vec<TableEntry>)> = BTreeMap::new();
    for (text, entry) in entries {
        let field = |n: &str| key_field(&text, n).map(|v| v.into_owned()).unwrap_or_default();
        let (kernel_name, static_key, batch) = (field("kernel"), field("static_key"), field("batch"));
        let label = format!("{kernel_name} [{static_key}] batch {batch}");
        let mut skip = |why: String| out.skipped.push((label.clone(), why));
        let Some(kernel) = kernels::kernel(&kernel_name) else {
            skip(format!("no kernel named `{kernel_name}`"));
            continue;
        };
        if field("alignment") != "16" {
            skip(format!(
                "tuned on {}-byte aligned buffers; tables serve 16-byte aligned ones",
                field("alignment")
            ));
            continue;
        }
        if field("variant") == kernels_core::cache::PDL_TUNING_VARIANT {
            skip("timed with programmatic dependent launch; tables are tuned with plain launches".into());
            continue;
        }
        let fingerprint = field("source_fingerprint");
        if fingerprint != kernel.source_fingerprint() {
            skip(format!(
                "tuned against source {fingerprint}, the kernel is now {}",
                kernel.source_fingerprint()
            ));
            continue;
        }
        let Ok(target) = field("arch").parse::<Target>() else {
            skip(format!("arch `{}` has no table target", field("arch")));
            continue;
        };
        let (key, batch) = (
            StaticKey::parse(kernel.schema(), &static_key),
            batch.parse::<u64>(),
        );
        // Before the record is read or reselected: its candidate times are of another
        // search. (A key or batch that does not parse is skipped below.)
        if let (Ok(key), Ok(batch)) = (&key, &batch) {
            if let Err(why) = check_candidates(&text, &kernel_name, target, key, *batch) {
                skip(why);
                continue;
            }
        }
        let mut record = match std::str::from_utf8(&entry.payload)
            .map_err(|e| e.to_string())
            .and_then(kernels_core::tune::TuneRecord::from_json)
        {
            Ok(r) => r,
            Err(e) => {
                skip(format!("unreadable record: {e}"));
                continue;
            }
        };
        if reselect {
            if let Err(e) = reselect_record(&mut record) {
                skip(e);
                continue;
            }
        }
        let Some(default_us) = record.default_us else {
            skip("the analytic default was not timed beside it".into());
            continue;
        };
        let beats = record.us < default_us;
        let key = match key {
            Ok(k) => k,
            Err(e) => {
                skip(e);
                continue;
            }
        };
        let (Ok(batch), Ok(())) = (batch, kernel.check_config(&record.config)) else {
            skip("bad batch or a config outside the current search space".into());
            continue;
        };
        let schema = kernel.schema();
        // `kernels tune` keys its records by its method (`timing=graph` or
        // `timing=single`); the online tuner's keys have no variant and time single
        // launches on the caller's buffers.
        let timing = match field("variant").strip_prefix("timing=") {
            Some(m) if tuned::TIMINGS.contains(&m) => m.to_string(),
            _ => tuned::TIMING_SINGLE.to_string(),
        };
        let group = (kernel_name.clone(), target, record.device.clone(), timing.clone());
        let slot = by_table.entry(group).or_insert_with(|| {
            (
                TableHeader {
                    kernel: kernel_name.clone(),
                    target,
                    device: record.device.clone(),
                    compiler: record.compiler.clone(),
                    source_fingerprint: fingerprint.clone(),
                    tuned_at: record.tuned_at.clone(),
                    timing,
                    key_fields: schema.key_names().map(str::to_string).collect(),
                    params: schema.param_names().map(str::to_string).collect(),
                },
                Vec::new(),
            )
        });
        slot.0.tuned_at = slot.0.tuned_at.clone().max(record.tuned_at.clone());
        let (config, us) = if beats {
            (EntryConfig::Tuned(record.config), record.us)
        } else {
            (EntryConfig::Default, default_us)
        };
        slot.1.push(TableEntry {
            key,
            batch,
            config,
            us,
            default_us,
        });
    }
    for ((kernel, target), (header, mut entries)) in one_group_per_table(by_table, &mut out.skipped) {
        // Listed for the results promoted, not those of a group left out above.
        for e in entries.iter().filter(|e| e.config == EntryConfig::Default) {
            out.markers
                .push(format!("{kernel} [{}] batch {}", e.key, e.batch));
        }
        let Some(root) = tables
            .map(Path::to_path_buf)
            .or_else(|| kernels::runtime_cmd::tables_dir(&kernel))
        else {
            out.skipped.push((
                format!("{kernel} {target}"),
                "no crate bakes this kernel's tables".into(),
            ));
            continue;
        };
        let path = root.join(&kernel).join(format!("{}.json", target.name()));
        let file = path.display().to_string();
        entries.sort_by(|a, b| (&a.key, a.batch).cmp(&(&b.key, b.batch)));
        entries.dedup_by(|a, b| a.key == b.key && a.batch == b.batch);
        let newer = TableFile { header, entries };
        let (table, added, replaced, kept, dropped) = if path.exists() {
            let schema = kernels::kernel(&kernel).map(|k| k.schema());
            let mut existing = TableFile::read(&path, schema).map_err(|e| Finding {
                file: file.clone(),
                entry: e.entry,
                reason: e.reason,
            })?;
            let r = existing.merge(newer);
            let dropped = r.stale_dropped.len() + r.retimed_dropped.len() + r.device_dropped.len();
            (existing, r.added.len(), r.replaced.len(), r.kept.len(), dropped)
        } else {
            let n = newer.entries.len();
            (newer, n, 0, 0, 0)
        };
        table.write(&path).map_err(|e| Finding {
            file: file.clone(),
            entry: None,
            reason: format!("cannot write: {e}"),
        })?;
        out.written.push((path, added, replaced, kept, dropped));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kernels_core::{
        cache::{cache_key, CacheKeyParts, Component},
        DeviceInfo,
    };
    use kernels_softmax::Softmax;
    use tuned::StaticKey;

    /// The tuning key text of a result found on `device` (compiling for `arch`) whose
    /// search had the candidates digest `digest`.
    fn key_text(
        device: &DeviceInfo,
        arch: &str,
        kernel: &str,
        key: &StaticKey,
        batch: u64,
        digest: &str,
    ) -> String {
        cache_key(&CacheKeyParts {
            arch,
            device_name: &device.name,
            sm_count: device.sm_count,
            candidates: Component::Applies(digest),
            ..kernels_core::testing::tuning_key_parts(kernel, "fnv1a64:1", key.as_str(), batch)
        })
        .text()
        .to_string()
    }

    /// Results of two devices for one table: the device with more of them is promoted and
    /// each result of the other is skipped naming both devices; another table is untouched.
    #[test]
    fn a_table_is_promoted_from_one_device_and_timing() {
        let key = StaticKey::parse(&kernels_softmax::schema::SOFTMAX, "dtype=bf16,cols=4096").unwrap();
        let header = |kernel: &str, device: &str| tuned::TableHeader {
            kernel: kernel.into(),
            target: Target::Sm90,
            device: device.into(),
            compiler: "nvrtc 13.0".into(),
            source_fingerprint: "fnv1a64:1".into(),
            tuned_at: "2026-12-07".into(),
            timing: "graph".into(),
            key_fields: vec![],
            params: vec![],
        };
        let entries = |batches: &[u64]| -> Vec<TableEntry> {
            batches
                .iter()
                .map(|&b| TableEntry::default_marker(key.clone(), b, 1.0))
                .collect()
        };
        let (h100, h200) = ("NVIDIA H100 80GB HBM3", "NVIDIA H200");
        let mut groups = std::collections::BTreeMap::new();
        let g = |kernel: &str, device: &str| {
            (
                kernel.to_string(),
                Target::Sm90,
                device.to_string(),
                "graph".to_string(),
            )
        };
        groups.insert(g("softmax", h100), (header("softmax", h100), entries(&[1])));
        groups.insert(g("softmax", h200), (header("softmax", h200), entries(&[1, 64])));
        groups.insert(g("rmsnorm", h100), (header("rmsnorm", h100), entries(&[8])));
        let mut skipped = Vec::new();
        let tables = one_group_per_table(groups, &mut skipped);
        assert_eq!(tables.len(), 2);
        let softmax = &tables[&("softmax".to_string(), Target::Sm90)];
        assert_eq!((softmax.0.device.as_str(), softmax.1.len()), (h200, 2));
        assert_eq!(tables[&("rmsnorm".to_string(), Target::Sm90)].0.device, h100);
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(
            skipped[0].0.contains("softmax") && skipped[0].0.contains("batch 1"),
            "{skipped:?}"
        );
        assert!(
            skipped[0].1.contains(h100) && skipped[0].1.contains(h200),
            "{skipped:?}"
        );
    }

    /// A key tuned at one decode batch leaves every shape-file batch more than one doubling
    /// away uncovered; a key tuned on the whole grid up to 8192 covers 16384; keys without
    /// entries are not reported.
    #[test]
    fn a_partly_tuned_key_is_reported_batch_by_batch() {
        let key = |cols: u32| {
            StaticKey::parse(
                &kernels_softmax::schema::SOFTMAX,
                &format!("dtype=bf16,cols={cols}"),
            )
            .unwrap()
        };
        let grid: Vec<u64> = (0..=14).map(|i| 1u64 << i).collect();
        let mut entries: Vec<TableEntry> = grid[..14]
            .iter()
            .map(|&b| TableEntry::default_marker(key(4096), b, 1.0))
            .collect();
        entries.push(TableEntry::default_marker(key(128256), 1, 1.0));
        let wanted: Vec<(StaticKey, u64)> = [4096, 128256, 151936]
            .into_iter()
            .flat_map(|c| grid.iter().map(move |&b| (key(c), b)))
            .collect();
        let gaps = uncovered(&entries, &wanted);
        let want: Vec<(String, u64, u64)> = grid[2..]
            .iter()
            .map(|&b| ("dtype=bf16,cols=128256".to_string(), b, 1))
            .collect();
        assert_eq!(gaps, want);
    }

    /// The staged softmax's variants follow the SM count (its prefetch span), so the
    /// digest is checked for the device the key names: an H100's result (114 SMs, less L2
    /// than the nominal H200) passes, the same digest keyed as an H200's does not.
    #[test]
    fn the_digest_is_checked_on_the_device_the_key_names() {
        let h200 = DeviceInfo::nominal(Target::Sm90).unwrap();
        let h100 = DeviceInfo {
            name: "NVIDIA H100 80GB HBM3".into(),
            sm_count: 114,
            l2_bytes: 50 << 20,
            total_memory: 80 << 30,
            ..h200.clone()
        };
        let key = StaticKey::parse(&kernels_softmax::schema::SOFTMAX, "dtype=bf16,cols=65536").unwrap();
        let digest = digest_of::<Softmax>(&h100, &key, 4096).unwrap();
        assert_ne!(digest, digest_of::<Softmax>(&h200, &key, 4096).unwrap());
        let text = key_text(&h100, "sm_90a", "softmax", &key, 4096, &digest);
        check_candidates(&text, "softmax", Target::Sm90, &key, 4096).unwrap();
        let text = key_text(&h200, "sm_90a", "softmax", &key, 4096, &digest);
        let e = check_candidates(&text, "softmax", Target::Sm90, &key, 4096).unwrap_err();
        assert!(e.contains("another candidate list") && e.contains(&digest), "{e}");
    }

    /// GEMM and MoE records are checked like the row kernels': the digest this build
    /// computes for the problem passes, another is refused naming it.
    #[test]
    fn gemm_and_moe_records_have_their_digest_checked() {
        let h200 = DeviceInfo::nominal(Target::Sm90).unwrap();
        for (kernel, key, batch) in [
            ("gemm", "dtype=bf16,layout=nt,n=6144,k=4096", 64),
            ("moe", "dtype=bf16,experts=128,n=768,k=2048,topk=8", 16),
        ] {
            let key = StaticKey::parse(kernels::kernel(kernel).unwrap().schema(), key).unwrap();
            let digest = searches_of(kernel)[0](&h200, &key, batch).unwrap();
            let text = key_text(&h200, "sm_90a", kernel, &key, batch, &digest);
            check_candidates(&text, kernel, Target::Sm90, &key, batch).unwrap();
            let text = key_text(&h200, "sm_90a", kernel, &key, batch, "fnv1a64:0000000000000001");
            let e = check_candidates(&text, kernel, Target::Sm90, &key, batch).unwrap_err();
            assert!(e.contains("another candidate list"), "{kernel}: {e}");
        }
    }

    /// An AMD result's digest, computed on the launch limits a HIP device reports,
    /// passes the check on the device its key names.
    #[cfg(feature = "rocm")]
    #[test]
    fn an_amd_result_passes_on_its_launch_limits() {
        for target in [Target::Gfx90a, Target::Gfx942, Target::Gfx950] {
            let hip = kernels_core::backend::hip::HipDeviceInfo::nominal(target).unwrap();
            let limits = hip.launch_limits();
            for (kernel, key, digest) in [
                (
                    "softmax",
                    "dtype=bf16,cols=65536",
                    digest_of::<Softmax> as DigestFn,
                ),
                (
                    "rmsnorm",
                    "dtype=bf16,cols=4096",
                    digest_of::<kernels_rmsnorm::RmsNorm>,
                ),
            ] {
                let schema = kernels::kernel(kernel).unwrap().schema();
                let key = StaticKey::parse(schema, key).unwrap();
                let d = digest(&limits, &key, 64).unwrap();
                let text = key_text(&limits, hip.arch(), kernel, &key, 64, &d);
                check_candidates(&text, kernel, target, &key, 64).unwrap();
            }
        }
    }
}
