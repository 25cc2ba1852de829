//! The GEMM key and launch configuration.

use tuned::{DType, Value};

use crate::schema::{
    check_config, BLOCK_K_AT, BLOCK_M_AT, BLOCK_N_AT, CLUSTER_AT, EPILOGUE_AT, GEMM, GROUP_M_AT, LAYOUTS,
    PATH_AT, SPLIT_K_AT, STAGES_AT, VEC_AT, WARPS_M_AT, WARPS_N_AT,
};

/// Operand layout. See [`crate::schema::GEMM`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    Nt,
    Nn,
}

impl Layout {
    pub const fn name(self) -> &'static str {
        match self {
            Layout::Nt => "nt",
            Layout::Nn => "nn",
        }
    }
}

/// The static part of a GEMM: dtype, layout and the weight's n and k.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmKey {
    pub dtype: DType,
    pub layout: Layout,
    pub n: u32,
    pub k: u32,
}

impl GemmKey {
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        let dtype = tuned::dtype_key(&GEMM, values, "dtype")?;
        let layout = match values.get(1).and_then(Value::as_str) {
            Some("nt") => Layout::Nt,
            Some("nn") => Layout::Nn,
            other => {
                return Err(format!(
                    "key field `layout` must be one of {LAYOUTS:?}, got `{}`",
                    other.unwrap_or("?")
                ))
            }
        };
        let n = tuned::int_key(&GEMM, values, "n", 1, i32::MAX as i64)? as u32;
        let k = tuned::int_key(&GEMM, values, "k", 1, i32::MAX as i64)? as u32;
        Ok(GemmKey { dtype, layout, n, k })
    }
}

/// The kernel a config runs. See [`crate::schema::PATHS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Path {
    Mma,
    Wgmma,
    WgmmaSwap,
    WgmmaPingpong,
    Stream,
}

impl Path {
    pub const fn name(self) -> &'static str {
        match self {
            Path::Mma => "mma",
            Path::Wgmma => "wgmma",
            Path::WgmmaSwap => "wgmma_swap",
            Path::WgmmaPingpong => "wgmma_pingpong",
            Path::Stream => "stream",
        }
    }

    /// Whether this is a Hopper (wgmma + TMA) path.
    pub const fn is_wgmma(self) -> bool {
        matches!(self, Path::Wgmma | Path::WgmmaSwap | Path::WgmmaPingpong)
    }
}

/// How C is stored. See [`crate::schema::EPILOGUES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    Direct,
    Tma,
}

impl Epilogue {
    pub const fn name(self) -> &'static str {
        match self {
            Epilogue::Direct => "direct",
            Epilogue::Tma => "tma",
        }
    }
}

/// Shared memory of the staging buffers of a `tma` epilogue, per consumer warpgroup:
/// two sub-tiles of 64 rows x 128 bytes (see `cuda/gemm.cu`).
pub const TMA_STAGING_BYTES: usize = 2 * 64 * 128;

/// A GEMM launch configuration: the block tile (`block_m` x `block_n`, stepping
/// `block_k` along k), its warps (`warps_m` x `warps_n`), the shared-memory pipeline
/// depth, split-K, the tile-grouping factor along m (L2 reuse of B tiles), the
/// global load width, the blocks per thread-block cluster and how C is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmConfig {
    pub path: Path,
    pub block_m: u32,
    pub block_n: u32,
    pub block_k: u32,
    pub warps_m: u32,
    pub warps_n: u32,
    pub stages: u32,
    pub split_k: u32,
    pub group_m: u32,
    /// 8: 16-byte loads (aligned operands); 1: element loads.
    pub vec: u32,
    /// Blocks per cluster: 1; 2 on the `wgmma` path with `split_k` 1, where the pair
    /// computes two vertically adjacent tiles (`2 * block_m` rows) and each block loads
    /// half of their shared B tile, multicast into both; `split_k` (2, 3, 4, 6 or 8) on
    /// `wgmma` or `wgmma_swap`, where the blocks are the splits of one tile, each
    /// summing a share of it from all of them through distributed shared memory (see [`crate::schema::CLUSTERS`] and
    /// [`GemmConfig::cluster_splits`]).
    pub cluster: u32,
    /// `Tma` on the `wgmma` path only: C staged in shared memory and stored by TMA.
    pub epilogue: Epilogue,
}

/// Split-K tile counters at the head of a workspace (`cuda/gemm.cu`): a fixed region,
/// so partials of one config never land on the counters of another sharing the
/// workspace. A split-K launch takes at most this many output tiles.
pub const SPLIT_COUNTERS: u32 = 16384;

/// Padding of each shared-memory row, elements (16 bytes; see `cuda/gemm.cu`).
pub const SMEM_PAD: u32 = 8;

impl GemmConfig {
    /// The unswapped Hopper tile `block_m` x `block_n` over `warps_m` / 4 consumer
    /// warpgroups with a ring of `stages`: 64-wide k steps, no split, grouped raster of
    /// 8, no cluster, C stored directly. Other choices are struct updates of it.
    pub const fn wgmma(block_m: u32, block_n: u32, warps_m: u32, stages: u32) -> GemmConfig {
        GemmConfig {
            path: Path::Wgmma,
            block_m,
            block_n,
            block_k: 64,
            warps_m,
            warps_n: 1,
            stages,
            split_k: 1,
            group_m: 8,
            vec: 8,
            cluster: 1,
            epilogue: Epilogue::Direct,
        }
    }

    /// The swapped Hopper tile (`wgmma_swap`): `block_m` token columns by `block_n`
    /// weight rows over `warps_n` / 4 consumer warpgroups, a ring of `stages`, 64-wide
    /// k steps, no split, no cluster. Other choices are struct updates of it.
    pub const fn swapped(block_m: u32, block_n: u32, warps_n: u32, stages: u32) -> GemmConfig {
        GemmConfig {
            path: Path::WgmmaSwap,
            block_m,
            block_n,
            warps_m: 1,
            warps_n,
            ..GemmConfig::wgmma(block_m, block_n, 4, stages)
        }
    }

    /// [`GemmConfig::wgmma`]'s `block_m` x `block_n` tile on `wgmma_pingpong`: two
    /// consumer warpgroups, each computing whole tiles in turn.
    pub const fn pingpong(block_m: u32, block_n: u32, stages: u32) -> GemmConfig {
        GemmConfig {
            path: Path::WgmmaPingpong,
            ..GemmConfig::wgmma(block_m, block_n, 8, stages)
        }
    }

    /// The decode path (`stream`): `block_m` tokens (8 or 16), `warps_n` warps of 16
    /// weight rows each, `warps_m` warps splitting the block's k, `stages` blocks of 32 k
    /// in flight a warp, no split. Other choices are struct updates of it.
    pub const fn stream(block_m: u32, warps_n: u32, warps_m: u32, stages: u32) -> GemmConfig {
        GemmConfig {
            path: Path::Stream,
            block_k: 32,
            warps_m,
            warps_n,
            ..GemmConfig::wgmma(block_m, 16 * warps_n, 4, stages)
        }
    }

    /// Decodes and checks a config (values in parameter order).
    pub fn from_values(values: &[Value]) -> Result<Self, String> {
        check_config(values)?;
        let v = |i: usize| values[i].as_int().unwrap_or(0) as u32;
        let path = match values[PATH_AT].as_str() {
            Some("mma") => Path::Mma,
            Some("wgmma") => Path::Wgmma,
            Some("wgmma_swap") => Path::WgmmaSwap,
            Some("wgmma_pingpong") => Path::WgmmaPingpong,
            Some("stream") => Path::Stream,
            other => return Err(format!("unknown path {other:?}")),
        };
        let epilogue = match values[EPILOGUE_AT].as_str() {
            Some("direct") => Epilogue::Direct,
            Some("tma") => Epilogue::Tma,
            other => return Err(format!("unknown epilogue {other:?}")),
        };
        Ok(GemmConfig {
            path,
            block_m: v(BLOCK_M_AT),
            block_n: v(BLOCK_N_AT),
            block_k: v(BLOCK_K_AT),
            warps_m: v(WARPS_M_AT),
            warps_n: v(WARPS_N_AT),
            stages: v(STAGES_AT),
            split_k: v(SPLIT_K_AT),
            group_m: v(GROUP_M_AT),
            vec: v(VEC_AT),
            cluster: v(CLUSTER_AT),
            epilogue,
        })
    }

    pub fn values(&self) -> Vec<Value> {
        let mut v = vec![Value::str(self.path.name())];
        v.extend(
            [
                self.block_m,
                self.block_n,
                self.block_k,
                self.warps_m,
                self.warps_n,
                self.stages,
                self.split_k,
                self.group_m,
                self.vec,
                self.cluster,
            ]
            .into_iter()
            .map(|x| Value::Int(x as i64)),
        );
        v.push(Value::str(self.epilogue.name()));
        v
    }

    /// Whether the splits of each tile run as one cluster (`cluster` = `split_k` > 1, on
    /// `wgmma`, `wgmma_swap` or `stream`): each rank adds its share of the tile from every rank's
    /// partial in their shared memory, in split order, so no workspace is used and C has
    /// the bits the workspace split gives.
    pub fn cluster_splits(&self) -> bool {
        self.cluster > 1 && self.cluster == self.split_k
    }

    /// Threads per block (the wgmma paths add a producer warpgroup).
    pub fn threads(&self) -> u32 {
        let extra = if self.path.is_wgmma() { 128 } else { 0 };
        self.warps_m * self.warps_n * 32 + extra
    }

    /// Consumer warpgroups of a wgmma path (4 warps each).
    pub fn consumers(&self) -> u32 {
        self.warps_m * self.warps_n / 4
    }

    /// The wgmma kernel's tile as (rows of X, rows of Y): X is the operand on wgmma's
    /// 64-row side (A for `wgmma`, B for `wgmma_swap`), Y the one on its N side.
    pub fn wgmma_tile(&self) -> (u32, u32) {
        match self.path {
            Path::WgmmaSwap => (self.block_n, self.block_m),
            _ => (self.block_m, self.block_n),
        }
    }

    /// fp32 accumulators each thread holds (one per output of its warp tile / 32; on
    /// `wgmma_pingpong` each consumer warpgroup holds a whole tile).
    pub fn accumulators(&self) -> u32 {
        match self.path {
            Path::WgmmaPingpong => return self.block_m * self.block_n / 128,
            // 16 rows x block_m tokens a warp.
            Path::Stream => return self.block_m / 2,
            _ => {}
        }
        (self.block_m / self.warps_m) * (self.block_n / self.warps_n) / 32
    }

    /// Dynamic shared memory of the pipeline, bytes: `stages` copies of the A and B
    /// tiles (16-bit elements), padded rows on the mma path; unpadded 128-byte-swizzled
    /// rows plus 1 KiB to realign them on the wgmma paths, with a `tma` epilogue
    /// [`TMA_STAGING_BYTES`] per consumer warpgroup, and with [cluster
    /// splits](GemmConfig::cluster_splits) one fp32 partial tile; on `stream` no ring,
    /// only the accumulators of every warp where `warps_m` > 1 (the block's k shares,
    /// summed there).
    pub fn smem_bytes(&self, layout: Layout) -> usize {
        if self.path == Path::Stream {
            // The k shares' accumulators, summed in shared memory, and a cluster split's
            // partial tile (none with one share and no cluster).
            return if self.warps_m > 1 || self.cluster > 1 {
                (self.threads() * self.accumulators()) as usize * 4
            } else {
                0
            };
        }
        if self.path.is_wgmma() {
            let rows = (self.block_m + self.block_n) as usize;
            let staging = match self.epilogue {
                Epilogue::Tma => self.consumers() as usize * TMA_STAGING_BYTES,
                Epilogue::Direct => 0,
            };
            let partial = if self.cluster_splits() {
                (self.block_m * self.block_n) as usize * 4
            } else {
                0
            };
            return rows * self.block_k as usize * 2 * self.stages as usize + 1024 + staging + partial;
        }
        let (bm, bn, bk, pad) = (self.block_m, self.block_n, self.block_k, SMEM_PAD);
        let b = match layout {
            Layout::Nt => bn * (bk + pad),
            Layout::Nn => bk * (bn + pad),
        };
        (bm * (bk + pad) + b) as usize * 2 * self.stages as usize
    }

    /// Output tiles of an `m` x `n` problem.
    pub fn tiles(&self, m: u64, n: u32) -> u64 {
        m.div_ceil(u64::from(self.block_m))
            .saturating_mul(u64::from(n).div_ceil(u64::from(self.block_n)))
    }

    /// Workspace a launch of `m` rows needs, bytes: with split-K, [`SPLIT_COUNTERS`]
    /// tile counters then the fp32 partial tiles of every split; else none, as for
    /// [cluster splits](GemmConfig::cluster_splits), whose mma stand-in where TMA cannot
    /// run ([`crate::plan::portable`]) does split through a workspace
    /// ([`crate::workspace_bytes`] counts it).
    pub fn workspace_bytes(&self, m: u64, n: u32) -> usize {
        if self.split_k <= 1 || self.cluster_splits() {
            return 0;
        }
        let tile_bytes = self.split_k as usize * (self.block_m * self.block_n) as usize * 4;
        let partials = usize::try_from(self.tiles(m, n)).map_or(usize::MAX, |t| t.saturating_mul(tile_bytes));
        partials.saturating_add(SPLIT_COUNTERS as usize * 4)
    }
}

impl std::fmt::Display for GemmConfig {
    /// The parameters by name, as `kernels plan` prints them:
    /// `path=mma block_m=64 block_n=128 block_k=64 warps_m=2 warps_n=2 stages=3 split_k=1 group_m=8 vec=8 cluster=1 epilogue=direct`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        tuned::write_config(f, GEMM.param_names().zip(&self.values()))
    }
}

impl std::str::FromStr for GemmConfig {
    type Err = String;

    /// Reads a config in its display form (every parameter once, as `name=value`,
    /// separated by whitespace, in any order) and checks it against the schema, so a
    /// config printed by `kernels plan` or a bench can be given back to a bench or a
    /// table tool. The error names the parameter at fault.
    fn from_str(text: &str) -> Result<Self, String> {
        let pairs = text
            .split_whitespace()
            .map(|item| {
                item.split_once('=')
                    .ok_or_else(|| format!("`{item}` is not NAME=VALUE"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        GemmConfig::from_values(&tuned::config_values_from_pairs(&GEMM, pairs)?)
    }
}

#[cfg(test)]
mod display_tests {
    use tuned::{resolve_serve, DynKernel, StaticKey, Target};

    use super::*;
    use crate::{Gemm, GEMM as GEMM_KERNEL};

    #[test]
    fn a_config_displays_as_kernels_plan_prints_it() {
        let c = GemmConfig {
            path: Path::Mma,
            block_m: 64,
            block_n: 128,
            block_k: 64,
            warps_m: 2,
            warps_n: 2,
            stages: 3,
            split_k: 1,
            group_m: 8,
            vec: 8,
            cluster: 1,
            epilogue: Epilogue::Direct,
        };
        assert_eq!(
            c.to_string(),
            "path=mma block_m=64 block_n=128 block_k=64 warps_m=2 warps_n=2 stages=3 split_k=1 group_m=8 vec=8 cluster=1 epilogue=direct"
        );
        // And reads back from it, in any order; bad text is refused by parameter.
        assert_eq!(c.to_string().parse::<GemmConfig>(), Ok(c));
        let shuffled = "epilogue=direct cluster=1 vec=8 group_m=8 split_k=1 stages=3 warps_n=2 warps_m=2 block_k=64 block_n=128 block_m=64 path=mma";
        assert_eq!(shuffled.parse::<GemmConfig>(), Ok(c));
        let text = c.to_string();
        let err = |t: &str| t.parse::<GemmConfig>().unwrap_err();
        assert!(err(&text.replace(" vec=8", "")).contains("missing parameter `vec`"));
        assert!(err(&format!("{text} vec=8")).contains("`vec` given twice"));
        assert!(err(&format!("{text} tile=3")).contains("no parameter `tile`"));
        assert!(err(&text.replace("stages=3", "stages=three")).contains("`stages` must be an integer"));
        assert!(err(&text.replace("stages=3", "stages")).contains("`stages` is not NAME=VALUE"));
        assert!(err(&text.replace("path=mma", "path=simt")).contains("path"));
        // A config the schema refuses (a cluster of 2 on the mma path) is refused here too.
        assert!(err(&text.replace("cluster=1", "cluster=2")).contains("cluster"));
        // What `kernels plan` prints for a call (the resolution by name) is the resolved
        // config's Display.
        for (n, k, m) in [(6144, 4096, 1), (4096, 4096, 16), (28672, 4096, 4096)] {
            let key = GemmKey {
                dtype: DType::Bf16,
                layout: Layout::Nt,
                n,
                k,
            };
            let (n_text, k_text) = (n.to_string(), k.to_string());
            let pairs = [
                ("dtype", "bf16"),
                ("layout", "nt"),
                ("n", &n_text),
                ("k", &k_text),
            ];
            let by_name = StaticKey::from_pairs(&GEMM, pairs).unwrap();
            let plan = GEMM_KERNEL.resolve(Target::Sm90, &by_name, m).unwrap();
            let config = resolve_serve::<Gemm>(Target::Sm90, &key, m).config;
            assert_eq!(config.to_string(), plan.config_text(), "n {n} k {k} m {m}");
        }
    }
}
