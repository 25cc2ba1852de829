//! Backend-neutral launches of the GEMM: the problem as device addresses
//! ([`GemmProblem`], validated when built), the config fitted to its alignment, and
//! its launch (variant, dimensions and arguments, [`kernels_core::PlannedKernel`]).

use std::marker::PhantomData;

use kernels_core::kernel_crate::check_device_ptrs;
use kernels_core::launch::{decode, element_at, par_check, row_norms, TensorMap2d, TmaElement, TmaSwizzle};
use kernels_core::{
    cache::AlignClass, check_disjoint, dtype_define, BufferRole, DeviceInfo, Error, Expected, KernelArgs,
    KernelSource, LaunchDims, PlannedKernel, Result, TuneBuffer, Variant,
};
use tuned::{DType, Target, TunedKernel, Vendor};

use crate::config::{Epilogue, GemmConfig, GemmKey, Layout, Path};
use crate::{space, Gemm};

/// The PTX wrappers of the GEMM kernels (`cuda/gemm_ptx.cuh`), compiled after the
/// shared prelude and before `cuda/gemm.cu`.
pub const PTX: &str = include_str!("../cuda/gemm_ptx.cuh");

/// The wgmma wrappers (`cuda/gemm_wgmma.cuh`, generated), compiled after [`PTX`].
pub const WGMMA: &str = include_str!("../cuda/gemm_wgmma.cuh");

/// The device source: `cuda/gemm.cu`, compiled after the shared prelude, [`PTX`] and
/// [`WGMMA`]. Safe under programmatic dependent launch: both kernels wait for the
/// kernel before them before touching A, C, the bias or the workspace (the wgmma
/// path streams its first ring of weights before that wait).
pub static SOURCE: KernelSource =
    KernelSource::new("gemm", include_str!("../cuda/gemm.cu"), crate::SOURCE_FINGERPRINT)
        .with_preamble(&[kernels_core::PRELUDE, PTX, WGMMA])
        .with_files(crate::SOURCE_FILES)
        .programmatic_launch();

/// One dense operand of a problem: device address, length in elements (what the
/// allocation holds from `ptr` on) and leading dimension (elements between rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operand {
    pub ptr: u64,
    pub len: usize,
    pub ld: usize,
}

impl Operand {
    /// A row-major matrix of `rows` rows, `ld` elements apart, at `ptr` holding `len`
    /// elements.
    pub const fn new(ptr: u64, len: usize, ld: usize) -> Operand {
        Operand { ptr, len, ld }
    }
}

/// One GEMM call, `C[m, n] = A[m, k] · op(B) (+ bias[n])`, as device addresses. Build
/// it with [`GemmProblem::raw`].
#[derive(Clone, Copy, Debug)]
pub struct GemmProblem<'a> {
    pub(crate) key: GemmKey,
    pub(crate) m: u64,
    pub(crate) a: Operand,
    pub(crate) b: Operand,
    pub(crate) c: Operand,
    pub(crate) c_dtype: DType,
    /// 0: no bias.
    pub(crate) bias: u64,
    /// 0: no workspace; its length in bytes.
    pub(crate) ws: u64,
    pub(crate) ws_bytes: usize,
    pub(crate) _buffers: PhantomData<&'a mut [u8]>,
}

/// Elements a row-major `rows` x `cols` matrix with rows `ld` apart spans (for operands
/// [`check_matrix`] passed, which refuses a span that does not fit 64 bits).
fn span(rows: u64, cols: u64, ld: u64) -> u64 {
    (rows - 1) * ld + cols
}

/// Checks operand `name` (leading dimension `ld_name`) as a `rows` x `cols` matrix of
/// `size`-byte elements: a row fits its leading dimension, the kernels' signed 64-bit
/// byte offsets reach every element (a larger stride or span would wrap, and the
/// bounds below would pass a matrix the kernel then reads out of bounds), the bytes
/// end inside the address space, and the allocation holds the span.
fn check_matrix(name: &str, ld_name: &str, op: &Operand, rows: u64, cols: u64, size: u64) -> Result<()> {
    let ld = op.ld as u64;
    if ld < cols {
        return Err(Error::invalid(
            ld_name,
            format!("{} is shorter than a row of {cols} elements", op.ld),
        ));
    }
    let max = i64::MAX as u64;
    let need = (rows - 1).checked_mul(ld).and_then(|e| e.checked_add(cols));
    let fits = |elems: Option<u64>| elems.and_then(|e| e.checked_mul(size)).is_some_and(|b| b <= max);
    if !fits(Some(ld)) || !fits(need) {
        return Err(Error::invalid(
            ld_name,
            format!(
                "{ld} elements: [{rows}, {cols}] at that leading dimension spans more bytes than the kernels' 64-bit offsets hold"
            ),
        ));
    }
    let need = span(rows, cols, ld);
    if op.ptr.checked_add(need * size).is_none() {
        return Err(Error::invalid(
            name,
            format!(
                "address {:#x} plus its {} bytes passes the end of the address space",
                op.ptr,
                need * size
            ),
        ));
    }
    if (op.len as u64) < need {
        return Err(Error::invalid(
            name,
            format!(
                "holds {} elements; [{rows}, {cols}] with leading dimension {} needs {need}",
                op.len, op.ld
            ),
        ));
    }
    Ok(())
}

impl<'a> GemmProblem<'a> {
    /// `C = A · op(B) (+ bias)` over device addresses. `dtype` is A's and B's (and
    /// bias's) element type, bf16 or f16; `c_dtype` is C's, `dtype` or f32. `bias` is
    /// `(address, elements)`; `workspace` is `(address, bytes)`, at least
    /// [`crate::workspace_bytes`] for split-K configs, zeroed before its first use (the
    /// kernel leaves its tile counters at zero again), used by one stream at a time. Errors name the
    /// argument: `dtype`, `c_dtype`, `m`, `n`, `k`, `a`, `lda`, `b`, `ldb`, `c`,
    /// `ldc`, `bias`, `workspace`.
    ///
    /// # Safety
    /// Every address must be a device allocation of the runtime's context holding the
    /// lengths given, valid for `'a`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn raw(
        dtype: DType,
        layout: Layout,
        m: usize,
        n: usize,
        k: usize,
        a: Operand,
        b: Operand,
        c: Operand,
        c_dtype: DType,
        bias: Option<(u64, usize)>,
        workspace: Option<(u64, usize)>,
    ) -> Result<GemmProblem<'a>> {
        if !matches!(dtype, DType::Bf16 | DType::F16) {
            return Err(Error::invalid(
                "dtype",
                format!("{dtype}: the GEMM takes bf16 or f16"),
            ));
        }
        if c_dtype != dtype && c_dtype != DType::F32 {
            return Err(Error::invalid(
                "c_dtype",
                format!("{c_dtype}: C is {dtype} (the input type) or f32"),
            ));
        }
        let max = i32::MAX as usize;
        for (name, v) in [("m", m), ("n", n), ("k", k)] {
            if v == 0 || v > max {
                return Err(Error::invalid(name, format!("{v} is outside 1..={max}")));
            }
        }
        let (m64, n64, k64) = (m as u64, n as u64, k as u64);
        let (esize, csize) = (dtype.size() as u64, c_dtype.size() as u64);
        check_matrix("a", "lda", &a, m64, k64, esize)?;
        match layout {
            Layout::Nt => check_matrix("b", "ldb", &b, n64, k64, esize)?,
            Layout::Nn => check_matrix("b", "ldb", &b, k64, n64, esize)?,
        }
        check_matrix("c", "ldc", &c, m64, n64, csize)?;
        check_device_ptrs(dtype, &[("a", a.ptr), ("b", b.ptr)])?;
        check_device_ptrs(c_dtype, &[("c", c.ptr)])?;
        let bytes = |op: &Operand, rows: u64, cols: u64, size: u64| {
            (op.ptr, op.ptr + span(rows, cols, op.ld as u64) * size)
        };
        let c_range = bytes(&c, m64, n64, csize);
        let a_range = bytes(&a, m64, k64, esize);
        let b_range = match layout {
            Layout::Nt => bytes(&b, n64, k64, esize),
            Layout::Nn => bytes(&b, k64, n64, esize),
        };
        check_disjoint(("a", a_range), ("c", c_range))?;
        check_disjoint(("b", b_range), ("c", c_range))?;
        let bias_ptr = match bias {
            None => 0,
            Some((ptr, len)) => {
                if len < n {
                    return Err(Error::invalid("bias", format!("holds {len} elements; n is {n}")));
                }
                check_device_ptrs(dtype, &[("bias", ptr)])?;
                let end = ptr.checked_add(n64 * esize).ok_or_else(|| {
                    Error::invalid(
                        "bias",
                        format!("address {ptr:#x} plus n elements passes the end of the address space"),
                    )
                })?;
                check_disjoint(("bias", (ptr, end)), ("c", c_range))?;
                ptr
            }
        };
        let (ws, ws_bytes) = match workspace {
            None | Some((_, 0)) => (0, 0),
            Some((ptr, len)) => {
                if ptr == 0 || ptr % 16 != 0 {
                    return Err(Error::invalid(
                        "workspace",
                        format!("address {ptr:#x} is not a 16-byte aligned device pointer"),
                    ));
                }
                let end = ptr.checked_add(len as u64).ok_or_else(|| {
                    Error::invalid(
                        "workspace",
                        format!("address {ptr:#x} plus {len} bytes passes the end of the address space"),
                    )
                })?;
                let range = (ptr, end);
                check_disjoint(("c", c_range), ("workspace", range))?;
                check_disjoint(("a", a_range), ("workspace", range))?;
                check_disjoint(("b", b_range), ("workspace", range))?;
                (ptr, len)
            }
        };
        Ok(GemmProblem {
            key: GemmKey {
                dtype,
                layout,
                n: n as u32,
                k: k as u32,
            },
            m: m64,
            a,
            b,
            c,
            c_dtype,
            bias: bias_ptr,
            ws,
            ws_bytes,
            _buffers: PhantomData,
        })
    }

    /// The problem the tuner makes: contiguous A, B and C, no bias, a workspace of
    /// [`crate::workspace_bytes`] for the most split-K any NVIDIA target's space holds.
    pub(crate) fn tuning(key: GemmKey, m: u64, at: &[u64]) -> GemmProblem<'a> {
        let (n, k) = (key.n as usize, key.k as usize);
        let m_us = m as usize;
        let (b_rows, ldb) = match key.layout {
            Layout::Nt => (n, k),
            Layout::Nn => (k, n),
        };
        GemmProblem {
            key,
            m,
            a: Operand::new(at[0], m_us * k, k),
            b: Operand::new(at[1], b_rows * ldb, ldb),
            c: Operand::new(at[2], m_us * n, n),
            c_dtype: key.dtype,
            bias: 0,
            ws: at[3],
            ws_bytes: tuning_workspace_bytes(&key, m).max(16),
            _buffers: PhantomData,
        }
    }

    /// The static key (dtype, layout, n, k).
    pub fn key(&self) -> GemmKey {
        self.key
    }

    /// Rows of A and C.
    pub fn m(&self) -> u64 {
        self.m
    }

    /// The alignment class of A and B (bases and leading dimensions, in bytes): 16-byte
    /// loads need `A16`.
    pub fn operand_alignment(&self) -> AlignClass {
        let e = self.key.dtype.size() as u64;
        AlignClass::of([self.a.ptr, self.b.ptr, self.a.ld as u64 * e, self.b.ld as u64 * e])
    }

    fn b_rows_cols(&self) -> (u64, u64) {
        match self.key.layout {
            Layout::Nt => (u64::from(self.key.n), u64::from(self.key.k)),
            Layout::Nn => (u64::from(self.key.k), u64::from(self.key.n)),
        }
    }
}

/// The workspace the tuner allocates for `m` rows of `key`: enough for every config of
/// the sm_80 and sm_90 spaces and their defaults.
pub(crate) fn tuning_workspace_bytes(key: &GemmKey, m: u64) -> usize {
    [Target::Sm80, Target::Sm90]
        .into_iter()
        .map(|t| crate::workspace_bytes(t, key, m))
        .max()
        .unwrap_or(0)
}

/// The compiled variant of `c` for `key`: entry point and defines (grouping, bias and
/// the output type are run-time arguments and share it; on the wgmma paths a split
/// through the workspace compiles its reduction in, `WS_SPLIT`). `CLUSTER` is
/// defined only for clusters (the kernel reads its absence as 1), `CLUSTER_SPLIT` only
/// for the unswapped cluster splits, `PINGPONG` only on `wgmma_pingpong`,
/// `EPILOGUE_TMA` only for TMA stores of C and `WS_SPLIT` only for workspace splits, so
/// a config with none of them names the same variant as before they existed.
pub fn variant(key: &GemmKey, c: &GemmConfig) -> Variant {
    if c.path.is_wgmma() {
        let (x_rows, y_rows) = c.wgmma_tile();
        let v = Variant::new("gemm_wgmma_kernel")
            .define("DTYPE", dtype_define(key.dtype))
            .define("WGMMA", if c.path == Path::WgmmaSwap { 2 } else { 1 })
            .define("BX", x_rows)
            .define("BY", y_rows)
            .define("CONSUMERS", c.consumers())
            .define("STAGES", c.stages);
        let v = if c.cluster > 1 {
            v.define("CLUSTER", c.cluster)
        } else {
            v
        };
        // Unswapped, a cluster is a pair sharing B unless it is the splits (swapped
        // clusters are always the splits).
        let v = if c.path == Path::Wgmma && c.cluster_splits() {
            v.define("CLUSTER_SPLIT", 1)
        } else {
            v
        };
        let v = if c.path == Path::WgmmaPingpong {
            v.define("PINGPONG", 1)
        } else {
            v
        };
        // Stages of 128 k hold two 64-wide boxes of each operand (swapped only).
        let v = if c.block_k > 64 {
            v.define("KSUB", c.block_k / 64)
        } else {
            v
        };
        // The split-K reduction through the workspace only where the config splits (a
        // third of an unsplit variant's code otherwise).
        let v = if c.split_k > 1 && !c.cluster_splits() {
            v.define("WS_SPLIT", 1)
        } else {
            v
        };
        return match c.epilogue {
            Epilogue::Tma => v.define("EPILOGUE_TMA", 1),
            Epilogue::Direct => v,
        };
    }
    if c.path == Path::Stream {
        let v = Variant::new("gemm_stream_kernel")
            .define("DTYPE", dtype_define(key.dtype))
            .define("STREAM", 1)
            .define("TOK", c.block_m)
            .define("WR", c.warps_n)
            .define("WK", c.warps_m)
            .define("UNROLL", c.stages)
            .define("ALIGNED", u32::from(c.vec == 8));
        return if c.cluster > 1 {
            v.define("CLUSTER", c.cluster)
        } else {
            v
        };
    }
    Variant::new("gemm_mma_kernel")
        .define("DTYPE", dtype_define(key.dtype))
        .define(
            "LAYOUT",
            match key.layout {
                Layout::Nt => 0,
                Layout::Nn => 1,
            },
        )
        .define("BM", c.block_m)
        .define("BN", c.block_n)
        .define("BK", c.block_k)
        .define("WM", c.warps_m)
        .define("WN", c.warps_n)
        .define("STAGES", c.stages)
        .define("ALIGNED", u32::from(c.vec == 8))
}

/// `c` as the problem's alignment allows: unless A and B allow 16-byte loads (bases
/// and row strides multiples of 16 bytes), element loads, and a wgmma config (TMA
/// needs that alignment) becomes [`portable`]'s. The class covers A and B only, and a
/// `tma` epilogue stays: its variant also stores C directly, which [`launch_args`]
/// picks where C's base or row stride is not a multiple of 16 bytes (folding C into
/// the class would move calls whose C alone is misaligned off the wgmma path).
pub fn fit(c: GemmConfig, align: AlignClass) -> GemmConfig {
    if align >= AlignClass::A16 {
        c
    } else if c.path.is_wgmma() {
        portable(&c)
    } else {
        GemmConfig { vec: 1, ..c }
    }
}

/// The mma-path config that stands in for a wgmma config where TMA cannot run: the
/// same output tile up to 128x128, its width rounded down to a power of two (so the same
/// or a smaller workspace: only power-of-two widths split along k), 8 warps from
/// 64x128 up, k steps of 64, 3 stages, the same split-K and raster, element loads, no
/// cluster, direct stores of C. It lies in the space of every key the wgmma config does.
pub fn portable(c: &GemmConfig) -> GemmConfig {
    // The mma path takes power-of-two widths: 80-112 become 64, 160-224 become 128.
    let block_n = 1u32 << c.block_n.min(128).ilog2();
    let (block_m, block_n) = (c.block_m.min(128), block_n);
    let warps = if block_m * block_n >= 64 * 128 { 8 } else { 4 };
    let (warps_m, warps_n) = space::warp_grid(block_m, block_n, warps).unwrap_or((1, warps));
    GemmConfig {
        path: Path::Mma,
        block_m,
        block_n,
        block_k: 64,
        warps_m,
        warps_n,
        stages: 3,
        split_k: c.split_k,
        group_m: c.group_m,
        vec: 1,
        cluster: 1,
        epilogue: Epilogue::Direct,
    }
}

/// Bit 0 of the kernel's `flags`: C allows two-element stores.
const C_PAIRS: i32 = 1;
/// Bit 1: C is f32.
const C_F32: i32 = 2;
/// Bit 2 (`EPILOGUE_TMA` variants): C is stored through its tensor map.
const C_TMA: i32 = 4;

/// The tensor map of C a `tma` epilogue stores through (boxes of 64 rows x 128 bytes,
/// 128-byte swizzle; see `cuda/gemm.cu`), or none where C cannot have one: its base
/// or row stride not a multiple of 16 bytes, or a row of C (`n` elements) not whole
/// 16-byte chunks. The last holds because the H200 clips a store box at n only to a
/// 16-byte chunk: with n = 300 bf16 the store of the last box wrote columns 300..303,
/// past C's row (measured by the covering GPU test).
pub fn c_tensor_map(p: &GemmProblem<'_>) -> Option<TensorMap2d> {
    let element = match p.c_dtype {
        DType::F32 => TmaElement::F32,
        DType::F16 => TmaElement::F16,
        _ => TmaElement::Bf16,
    };
    if !(u64::from(p.key.n) * element.size()).is_multiple_of(16) {
        return None;
    }
    let map = TensorMap2d {
        ptr: p.c.ptr,
        element,
        cols: u64::from(p.key.n),
        rows: p.m,
        row_bytes: p.c.ld as u64 * element.size(),
        box_cols: (128 / element.size()) as u32,
        box_rows: 64,
        swizzle: TmaSwizzle::B128,
    };
    map.check("c").is_ok().then_some(map)
}

/// The dimensions and arguments of a launch of `c` on `p` on `device`.
pub fn launch_args(
    device: &DeviceInfo,
    c: &GemmConfig,
    p: &GemmProblem<'_>,
) -> Result<(LaunchDims, KernelArgs)> {
    if device.amd_arch.is_some() || device.compute_capability < (8, 0) {
        return Err(Error::invalid(
            "device",
            format!(
                "{}: the GEMM kernels need an NVIDIA GPU of compute capability 8.0 or newer",
                device.name
            ),
        ));
    }
    if c.path.is_wgmma() && (device.compute_capability != (9, 0) || p.key.layout != Layout::Nt) {
        let (name, why) = if p.key.layout != Layout::Nt {
            ("layout", "nn: the wgmma paths take layout nt only".to_string())
        } else {
            (
                "device",
                format!(
                    "{}: the wgmma paths run on compute capability 9.0 (sm_90a) only",
                    device.name
                ),
            )
        };
        return Err(Error::invalid(name, why));
    }
    if c.vec == 8 {
        let e = p.key.dtype.size() as u64;
        for (name, ptr, ld_name, ld) in [("a", p.a.ptr, "lda", p.a.ld), ("b", p.b.ptr, "ldb", p.b.ld)] {
            if ptr % 16 != 0 {
                return Err(Error::invalid(
                    name,
                    format!("address {ptr:#x} is not 16-byte aligned, which vec=8 needs"),
                ));
            }
            if !(ld as u64 * e).is_multiple_of(16) {
                return Err(Error::invalid(
                    ld_name,
                    format!("{ld} elements is not a multiple of 16 bytes, which vec=8 needs"),
                ));
            }
        }
    }
    if c.split_k > 1
        && !c.cluster_splits()
        && c.tiles(p.m, p.key.n) > u64::from(crate::config::SPLIT_COUNTERS)
    {
        return Err(Error::invalid(
            "m",
            format!(
                "split_k={} over {} output tiles; split-K takes at most {}",
                c.split_k,
                c.tiles(p.m, p.key.n),
                crate::config::SPLIT_COUNTERS
            ),
        ));
    }
    let need = c.workspace_bytes(p.m, p.key.n);
    if need > p.ws_bytes {
        return Err(Error::invalid(
            "workspace",
            format!(
                "split_k={} needs {need} bytes, got {} (size it with kernels_gemm::workspace_bytes)",
                c.split_k, p.ws_bytes
            ),
        ));
    }
    if c.path.is_wgmma() {
        return wgmma_launch_args(device, c, p);
    }
    if c.path == Path::Stream {
        return stream_launch_args(device, c, p);
    }
    let tiles = c.tiles(p.m, p.key.n);
    let grid = u32::try_from(tiles)
        .ok()
        .filter(|&t| t <= i32::MAX as u32)
        .ok_or_else(|| Error::invalid("m", format!("{tiles} output tiles exceed one launch")))?;
    let smem = u32::try_from(c.smem_bytes(p.key.layout))
        .map_err(|_| Error::invalid("config", "the pipeline exceeds shared memory"))?;
    let mut dims = LaunchDims::linear(grid, c.threads()).with_smem(smem);
    dims.grid.1 = c.split_k;
    Ok((dims, pointer_args(c, p)))
}

/// The launch of a `stream` config (alignment, device and workspace already checked):
/// the weight's row tiles along x, the splits along y (as clusters: each tile's splits
/// side by side along x), the token tiles along z, with the mma kernel's arguments.
fn stream_launch_args(
    device: &DeviceInfo,
    c: &GemmConfig,
    p: &GemmProblem<'_>,
) -> Result<(LaunchDims, KernelArgs)> {
    if p.key.layout != Layout::Nt {
        return Err(Error::invalid(
            "layout",
            "nn: the stream path takes layout nt only (the weight as [n, k] rows)",
        ));
    }
    if c.cluster > 1 && device.compute_capability < (9, 0) {
        return Err(Error::invalid(
            "device",
            format!(
                "{}: thread-block clusters (cluster={}) need compute capability 9.0 or newer",
                device.name, c.cluster
            ),
        ));
    }
    let row_tiles = p.key.n.div_ceil(c.block_n);
    let token_tiles = u32::try_from(p.m.div_ceil(u64::from(c.block_m)))
        .ok()
        .filter(|&t| t <= 65535)
        .ok_or_else(|| {
            Error::invalid(
                "m",
                format!(
                    "{} rows make more than 65535 tiles of {} tokens for the stream path",
                    p.m, c.block_m
                ),
            )
        })?;
    let smem = c.smem_bytes(p.key.layout) as u32;
    let args = pointer_args(c, p);
    let mut dims = if c.cluster_splits() {
        LaunchDims::linear(row_tiles * c.cluster, c.threads())
            .with_smem(smem)
            .with_cluster(c.cluster)
    } else {
        let mut d = LaunchDims::linear(row_tiles, c.threads()).with_smem(smem);
        d.grid.1 = c.split_k;
        d
    };
    dims.grid.2 = token_tiles;
    Ok((dims, args))
}

/// The arguments of the kernels that take their operands by address (`gemm_mma_kernel`,
/// `gemm_stream_kernel`: the ABI in `cuda/gemm.cu`).
fn pointer_args(c: &GemmConfig, p: &GemmProblem<'_>) -> KernelArgs {
    let mut args = KernelArgs::new();
    args.ptr(p.a.ptr)
        .ptr(p.b.ptr)
        .ptr(p.c.ptr)
        .ptr(p.bias)
        .ptr(p.ws)
        .i32(p.m as i32)
        .i32(p.key.n as i32)
        .i32(p.key.k as i32)
        .i64(p.a.ld as i64)
        .i64(p.b.ld as i64)
        .i64(p.c.ld as i64)
        .i32(c.split_k as i32)
        .i32(c.group_m as i32)
        .i32(c_flags(p));
    args
}

/// The `c`-side flags of a launch: two-element stores allowed, f32 output.
fn c_flags(p: &GemmProblem<'_>) -> i32 {
    let c_size = p.c_dtype.size() as u64;
    let pairs = p.c.ptr.is_multiple_of(2 * c_size) && p.c.ld.is_multiple_of(2);
    (if pairs { C_PAIRS } else { 0 }) | if p.c_dtype == DType::F32 { C_F32 } else { 0 }
}

/// The launch of a wgmma config (alignment, layout, device and workspace already
/// checked): tensor maps of A and B with the boxes of the tile (with clusters, B's box
/// is half the tile: each block of a pair loads one half for both), with a `tma`
/// epilogue a third of C ([`c_tensor_map`]; where C has none, A's map stands in, never
/// read, and flag `C_TMA` stays clear, so the kernel stores C directly), and a
/// persistent grid of at most one block per SM over the work units: (tile, split), with
/// clusters of 2 one band of 2 tile rows per cluster, with cluster splits one tile per
/// cluster (its blocks the splits).
///
/// A cluster grid is `cluster` x the clusters, at most `sm_count / cluster` of them
/// (66 pairs, 132 blocks, on an H200). The launch is persistent
/// ([`LaunchDims::persistent`]): the CUDA launch lowers it to the clusters the device
/// holds at once. A cluster's blocks share a GPC, and a GPC holds whole TPCs of 2 SMs,
/// so every pair should find room; a cluster of 4 needs 4 SMs of one GPC, which GPCs of
/// 18 SMs leave 2 of. The kernel never depends on clusters running together.
fn wgmma_launch_args(
    device: &DeviceInfo,
    c: &GemmConfig,
    p: &GemmProblem<'_>,
) -> Result<(LaunchDims, KernelArgs)> {
    let element = match p.key.dtype {
        DType::F16 => TmaElement::F16,
        _ => TmaElement::Bf16,
    };
    let e = p.key.dtype.size() as u64;
    // block_m rows of A and block_n rows of B per tile, whichever side each is on;
    // with clusters of 2 (unswapped) each block loads block_n / 2 rows of B.
    let b_share = if c.path == Path::Wgmma && !c.cluster_splits() {
        c.cluster
    } else {
        1
    };
    let (a_box, b_box) = (c.block_m, c.block_n / b_share);
    let map = |ptr: u64, rows: u64, ld: usize, box_rows: u32| TensorMap2d {
        ptr,
        element,
        cols: u64::from(p.key.k),
        rows,
        row_bytes: ld as u64 * e,
        box_cols: 64, // one 128-byte swizzle row; a stage of block_k takes block_k / 64 boxes
        box_rows,
        swizzle: TmaSwizzle::B128,
    };
    let a_map = map(p.a.ptr, p.m, p.a.ld, a_box);
    let b_map = map(p.b.ptr, u64::from(p.key.n), p.b.ld, b_box);
    a_map.check("a")?;
    b_map.check("b")?;
    let (x, y) = match c.path {
        Path::WgmmaSwap => (b_map, a_map),
        _ => (a_map, b_map),
    };
    let cluster = u64::from(c.cluster);
    let units = if c.cluster_splits() {
        c.tiles(p.m, p.key.n)
    } else {
        let bands = p.m.div_ceil(u64::from(c.block_m) * cluster);
        bands * u64::from(p.key.n).div_ceil(u64::from(c.block_n)) * u64::from(c.split_k)
    };
    if units > i32::MAX as u64 {
        return Err(Error::invalid(
            "m",
            format!("{units} work units exceed one launch"),
        ));
    }
    let clusters = units.min((u64::from(device.sm_count) / cluster).max(1));
    let grid = (clusters * cluster) as u32;
    let smem = u32::try_from(c.smem_bytes(Layout::Nt))
        .map_err(|_| Error::invalid("config", "the pipeline exceeds shared memory"))?;
    let mut args = KernelArgs::new();
    args.tensor_map(x).tensor_map(y);
    let mut flags = c_flags(p);
    if c.epilogue == Epilogue::Tma {
        match c_tensor_map(p) {
            Some(c_map) => {
                args.tensor_map(c_map);
                flags |= C_TMA;
            }
            None => {
                args.tensor_map(a_map);
            }
        }
    }
    args.ptr(p.c.ptr)
        .ptr(p.bias)
        .ptr(p.ws)
        .i32(p.m as i32)
        .i32(p.key.n as i32)
        .i32(p.key.k as i32)
        .i64(p.c.ld as i64)
        .i32(c.split_k as i32)
        .i32(c.group_m as i32)
        .i32(flags);
    Ok((
        LaunchDims::linear(grid, c.threads())
            .with_smem(smem)
            .with_cluster(c.cluster)
            .with_persistent(),
        args,
    ))
}

// Safety: `buffers` lists A, B, C, bias and the workspace with their full spans, and
// `launch_args` passes exactly those to the kernel, which stays within them (rows and
// columns past m, n and k are never read or written).
unsafe impl PlannedKernel for Gemm {
    type Problem<'a> = GemmProblem<'a>;
    const SOURCE: &'static KernelSource = &SOURCE;

    fn search_space(device: &DeviceInfo, key: &GemmKey, batch: u64) -> Vec<GemmConfig> {
        space::search_space(device.tuning_target(), key, batch)
    }

    fn variant(_device: &DeviceInfo, key: &GemmKey, c: &GemmConfig) -> Variant {
        variant(key, c)
    }

    fn problem_shape(p: &GemmProblem<'_>) -> (GemmKey, u64) {
        (p.key, p.m)
    }

    fn buffers(p: &GemmProblem<'_>) -> Vec<TuneBuffer> {
        let e = p.key.dtype.size();
        let (n, k) = (u64::from(p.key.n), u64::from(p.key.k));
        let (b_rows, b_cols) = p.b_rows_cols();
        let mut out = vec![
            TuneBuffer {
                name: "a",
                ptr: p.a.ptr,
                bytes: span(p.m, k, p.a.ld as u64) as usize * e,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "b",
                ptr: p.b.ptr,
                bytes: span(b_rows, b_cols, p.b.ld as u64) as usize * e,
                role: BufferRole::Read,
            },
            TuneBuffer {
                name: "c",
                ptr: p.c.ptr,
                bytes: span(p.m, n, p.c.ld as u64) as usize * p.c_dtype.size(),
                role: BufferRole::Write,
            },
        ];
        if p.bias != 0 {
            out.push(TuneBuffer {
                name: "bias",
                ptr: p.bias,
                bytes: n as usize * e,
                role: BufferRole::Read,
            });
        }
        if p.ws != 0 {
            // Split-K counters must start at zero; every run leaves them so.
            out.push(TuneBuffer {
                name: "workspace",
                ptr: p.ws,
                bytes: p.ws_bytes,
                role: BufferRole::Zero,
            });
        }
        out
    }

    fn alignment(p: &GemmProblem<'_>) -> AlignClass {
        p.operand_alignment()
    }

    /// [`fit`], and a wgmma config becomes [`portable`]'s on a device other than
    /// compute capability 9.0 (sm_90a code runs there only): a Blackwell part is
    /// served from the sm90 table and its defaults, and must not be refused for it.
    fn fit_alignment(device: &DeviceInfo, key: &GemmKey, c: GemmConfig, align: AlignClass) -> GemmConfig {
        if c.path.is_wgmma() && (device.compute_capability != (9, 0) || key.layout != Layout::Nt) {
            return portable(&c);
        }
        fit(c, align)
    }

    fn launch_args(
        device: &DeviceInfo,
        c: &GemmConfig,
        p: &GemmProblem<'_>,
    ) -> Result<(LaunchDims, KernelArgs)> {
        launch_args(device, c, p)
    }

    fn reference(p: &GemmProblem<'_>, before: &[Vec<u8>]) -> Option<Vec<Vec<f32>>> {
        Some(reference_of(p, before))
    }

    fn check_outputs(
        p: &GemmProblem<'_>,
        before: &[Vec<u8>],
        got: &[Vec<u8>],
        expected: Expected<'_>,
    ) -> std::result::Result<(), String> {
        check_outputs(p, before, got, expected)
    }
}

/// Every buffer of `p` ([`PlannedKernel::buffers`] order: A, B, C, then bias and the
/// workspace where there are) after one run on `before`, by the CPU reference: C
/// computed, the split-K counters back at zero, the others as they were.
fn reference_of(p: &GemmProblem<'_>, before: &[Vec<u8>]) -> Vec<Vec<f32>> {
    let (m, n, k) = (p.m as usize, p.key.n as usize, p.key.k as usize);
    let [a, b] = [0, 1].map(|i| decode(p.key.dtype, &before[i]));
    let bias = (p.bias != 0).then(|| decode(p.key.dtype, &before[3]));
    let mut c = decode(p.c_dtype, &before[2]);
    let mut abs_sum = vec![0.0; m * n];
    crate::reference::gemm(
        p.key.layout,
        m,
        n,
        k,
        &a,
        p.a.ld,
        &b,
        p.b.ld,
        bias.as_deref(),
        &mut c,
        p.c.ld,
        &mut abs_sum,
    );
    let mut out = vec![a, b, c];
    out.extend(bias);
    if p.ws != 0 {
        out.push(vec![0.0; p.ws_bytes / 4]);
    }
    out
}

/// C of a run of `p` against the expected C within [`crate::reference::tolerance`],
/// with `sum |A[i, p] B(p, j)|` bounded by `|A[i, :]| |B(:, j)|` (Cauchy-Schwarz: no
/// second k-long product per element), doubled against another run; padding between
/// rows unchanged.
fn check_outputs(
    p: &GemmProblem<'_>,
    before: &[Vec<u8>],
    got: &[Vec<u8>],
    expected: Expected<'_>,
) -> std::result::Result<(), String> {
    let (m, n, k) = (p.m as usize, p.key.n as usize, p.key.k as usize);
    let dtype = p.key.dtype;
    let (c0, c) = (&before[2], &got[2]);
    // The same bytes as another run's, with no padding between rows to have been
    // written: nothing to bound (the norms below cost the tuner a pass over the weights
    // for every finalist it checks).
    if let Expected::Run(w) = expected {
        if p.c.ld == n && w[2] == *c {
            return Ok(());
        }
    }
    // Norms straight from the bytes, over every core: a tuner checks each finalist
    // against weights of up to gigabytes (lm_head), where decoding them into f32
    // copies took seconds a check.
    let a_norms = row_norms(dtype, &before[0], m, p.a.ld, k);
    let b_norms = match p.key.layout {
        Layout::Nt => row_norms(dtype, &before[1], n, p.b.ld, k),
        Layout::Nn => {
            let b = decode(dtype, &before[1]);
            (0..n)
                .map(|j| {
                    (0..k)
                        .map(|q| f64::from(b[q * p.b.ld + j]).powi(2))
                        .sum::<f64>()
                        .sqrt()
                })
                .collect()
        }
    };
    let cd = p.c_dtype;
    // Against another run, its bytes too: a row whose outputs are those bytes exactly
    // passes without its bounds (most candidates sum each output in the default's order
    // and round it the same way).
    type WantAt<'w> = Box<dyn Fn(usize) -> f32 + Sync + 'w>;
    let (want_at, runs, want_bytes): (WantAt<'_>, f64, Option<&Vec<u8>>) = match expected {
        Expected::Run(w) => {
            let w = &w[2];
            (Box::new(move |at| element_at(cd, w, at)), 2.0, Some(w))
        }
        Expected::Reference(w) => {
            let w = &w[2];
            (Box::new(move |at| w[at]), 1.0, None)
        }
    };
    let size = cd.size();
    let (out_ulp, acc) = crate::reference::tolerance(cd);
    let sqrt_k = (k as f64).sqrt();
    let what = format!("gemm {dtype} [{m}, {n}, {k}]");
    let elems = c.len() / size;
    par_check(m, p.c.ld, |rows| {
        for i in rows {
            let row = i * p.c.ld;
            let cols = p.c.ld.min(elems.saturating_sub(row));
            let outputs = (row * size)..((row + n.min(cols)) * size);
            let same = want_bytes.is_some_and(|w| w.get(outputs.clone()) == c.get(outputs));
            for j in (if same { n.min(cols) } else { 0 })..cols {
                let at = row + j;
                let g = element_at(cd, c, at);
                let Some(b_norm) = b_norms.get(j) else {
                    // Padding between rows: never written.
                    if g.to_bits() != element_at(cd, c0, at).to_bits() {
                        return Err(format!("{what}: padding at row {i} col {j} was written ({g})"));
                    }
                    continue;
                };
                let w = want_at(at);
                let bound =
                    runs * (out_ulp * f64::from(w).abs() + sqrt_k * acc * a_norms[i] * b_norm) + 1e-30;
                let ok = if w.is_nan() {
                    g.is_nan()
                } else {
                    (f64::from(g) - f64::from(w)).abs() <= bound
                };
                if !ok {
                    return Err(format!("{what}: C[{i}, {j}] = {g}, want {w} (bound {bound:.3e})"));
                }
            }
        }
        Ok(())
    })
}

/// Whether `target` has a GEMM kernel (NVIDIA sm_80 and newer).
pub fn has_kernel(target: Target) -> bool {
    target.vendor() == Vendor::Nvidia
}

/// Whether `c` is what `Gemm` accepts for `key` on `target` (the space's rules).
pub fn accepts(target: Target, key: &GemmKey, m: u64, c: &GemmConfig) -> bool {
    <Gemm as TunedKernel>::accepts(target, key, m, c)
}

#[cfg(test)]
mod tests {
    //! Argument checks run before anything touches a device, so they are tested here
    //! with made-up (never dereferenced) device addresses.
    use super::*;

    const A: u64 = 0x7f00_0000_0000;
    const B: u64 = 0x7f10_0000_0000;
    const C: u64 = 0x7f20_0000_0000;
    const BIAS: u64 = 0x7f30_0000_0000;
    const WS: u64 = 0x7f40_0000_0000;

    #[allow(clippy::too_many_arguments)]
    fn nt(
        m: usize,
        n: usize,
        k: usize,
        a: Operand,
        b: Operand,
        c: Operand,
        c_dtype: DType,
        bias: Option<(u64, usize)>,
    ) -> Result<GemmProblem<'static>> {
        unsafe {
            GemmProblem::raw(
                DType::Bf16,
                Layout::Nt,
                m,
                n,
                k,
                a,
                b,
                c,
                c_dtype,
                bias,
                Some((WS, 1 << 20)),
            )
        }
    }

    /// A bf16 nt problem of `(m, n, k)` on the operands `(a, b, c)` with bf16 C, no bias
    /// and `workspace` `(address, bytes)`.
    fn nt_ws(
        (m, n, k): (usize, usize, usize),
        (a, b, c): (Operand, Operand, Operand),
        workspace: (u64, usize),
    ) -> Result<GemmProblem<'static>> {
        unsafe {
            GemmProblem::raw(
                DType::Bf16,
                Layout::Nt,
                m,
                n,
                k,
                a,
                b,
                c,
                DType::Bf16,
                None,
                Some(workspace),
            )
        }
    }

    fn bad_arg(r: Result<GemmProblem<'static>>) -> String {
        match r {
            Err(Error::InvalidArgument { name, .. }) => name,
            Err(e) => panic!("not an argument error: {e}"),
            Ok(_) => panic!("bad input was accepted"),
        }
    }

    /// A bf16 nt problem of packed operands at the made-up addresses, bf16 C, no bias
    /// and no workspace.
    fn packed(m: usize, n: usize, k: usize) -> GemmProblem<'static> {
        let (a, b, c) = ok_operands(m, n, k);
        unsafe { GemmProblem::raw(DType::Bf16, Layout::Nt, m, n, k, a, b, c, DType::Bf16, None, None) }
            .unwrap()
    }

    fn ok_operands(m: usize, n: usize, k: usize) -> (Operand, Operand, Operand) {
        (
            Operand::new(A, m * k, k),
            Operand::new(B, n * k, k),
            Operand::new(C, m * n, n),
        )
    }

    #[test]
    fn each_bad_argument_is_named() {
        let (m, n, k) = (3, 100, 64);
        let (a, b, c) = ok_operands(m, n, k);
        assert!(nt(m, n, k, a, b, c, DType::Bf16, Some((BIAS, n))).is_ok());
        assert!(nt(m, n, k, a, b, c, DType::F32, None).is_ok());
        assert_eq!(bad_arg(nt(m, n, k, a, b, c, DType::F16, None)), "c_dtype");
        assert_eq!(bad_arg(nt(0, n, k, a, b, c, DType::Bf16, None)), "m");
        assert_eq!(bad_arg(nt(m, 0, k, a, b, c, DType::Bf16, None)), "n");
        assert_eq!(bad_arg(nt(m, n, 0, a, b, c, DType::Bf16, None)), "k");
        let short = Operand { len: m * k - 1, ..a };
        assert_eq!(bad_arg(nt(m, n, k, short, b, c, DType::Bf16, None)), "a");
        assert_eq!(
            bad_arg(nt(m, n, k, Operand { ld: k - 1, ..a }, b, c, DType::Bf16, None)),
            "lda"
        );
        assert_eq!(
            bad_arg(nt(m, n, k, a, Operand { ld: 63, ..b }, c, DType::Bf16, None)),
            "ldb"
        );
        assert_eq!(
            bad_arg(nt(m, n, k, a, Operand { len: 10, ..b }, c, DType::Bf16, None)),
            "b"
        );
        assert_eq!(
            bad_arg(nt(m, n, k, a, b, Operand { ld: 99, ..c }, DType::Bf16, None)),
            "ldc"
        );
        assert_eq!(
            bad_arg(nt(m, n, k, a, b, Operand { len: 299, ..c }, DType::Bf16, None)),
            "c"
        );
        assert_eq!(
            bad_arg(nt(m, n, k, Operand { ptr: A + 1, ..a }, b, c, DType::Bf16, None)),
            "a"
        );
        assert_eq!(
            bad_arg(nt(m, n, k, a, b, Operand { ptr: C + 2, ..c }, DType::F32, None)),
            "c"
        );
        assert_eq!(
            bad_arg(nt(m, n, k, a, b, c, DType::Bf16, Some((BIAS, n - 1)))),
            "bias"
        );
        assert_eq!(bad_arg(nt(m, n, k, a, b, c, DType::Bf16, Some((0, n)))), "bias");
        // C overlapping an input.
        let c_on_a = Operand { ptr: A + 64, ..c };
        assert_eq!(bad_arg(nt(m, n, k, a, b, c_on_a, DType::Bf16, None)), "c");
        let r = unsafe { GemmProblem::raw(DType::F32, Layout::Nt, m, n, k, a, b, c, DType::F32, None, None) };
        assert_eq!(bad_arg(r), "dtype");
        assert_eq!(bad_arg(nt_ws((m, n, k), (a, b, c), (WS + 8, 64))), "workspace");
        // nn: B is [k, n], so ldb >= n.
        let r = unsafe {
            GemmProblem::raw(
                DType::Bf16,
                Layout::Nn,
                m,
                n,
                k,
                a,
                Operand::new(B, k * n, n - 1),
                c,
                DType::Bf16,
                None,
                None,
            )
        };
        assert_eq!(bad_arg(r), "ldb");
    }

    /// Leading dimensions, addresses and lengths whose spans do not fit 64 bits are
    /// refused naming them, where unchecked arithmetic would wrap (release builds) into a
    /// small span that the length check then passes, or panic (debug builds).
    #[test]
    fn spans_past_64_bits_are_refused_naming_the_argument() {
        let (m, n, k) = (3, 100, 64);
        let (a, b, c) = ok_operands(m, n, k);
        // (m - 1) * lda wraps to 0 in 64 bits: the span would read as k elements.
        let wraps = Operand { ld: 1 << 63, ..a };
        assert_eq!(bad_arg(nt(m, n, k, wraps, b, c, DType::Bf16, None)), "lda");
        // A byte stride past i64::MAX, even for one row, where the kernels take it signed.
        let one_row = Operand {
            ld: usize::MAX / 2,
            len: usize::MAX,
            ..a
        };
        assert_eq!(
            bad_arg(nt(
                1,
                n,
                k,
                one_row,
                b,
                Operand { len: n, ..c },
                DType::Bf16,
                None
            )),
            "lda"
        );
        let wide_b = Operand {
            ld: 1 << 62,
            len: usize::MAX,
            ..b
        };
        assert_eq!(bad_arg(nt(m, n, k, a, wide_b, c, DType::Bf16, None)), "ldb");
        // f32 C: four bytes an element, so a stride that fits as bf16 may not as f32.
        let wide_c = Operand {
            ld: 1 << 62,
            len: usize::MAX,
            ..c
        };
        assert_eq!(
            bad_arg(nt(1, n, k, Operand { len: k, ..a }, b, wide_c, DType::F32, None)),
            "ldc"
        );
        // Addresses whose bytes pass the end of the address space.
        let end = Operand {
            ptr: u64::MAX - 63,
            ..a
        };
        assert_eq!(bad_arg(nt(m, n, k, end, b, c, DType::Bf16, None)), "a");
        assert_eq!(
            bad_arg(nt(m, n, k, a, b, c, DType::Bf16, Some((u64::MAX - 15, n)))),
            "bias"
        );
        assert_eq!(
            bad_arg(nt_ws((m, n, k), (a, b, c), (u64::MAX - 15, 64))),
            "workspace"
        );
    }

    #[test]
    fn the_output_check_passes_the_reference_and_fails_one_percent_off() {
        use kernels_core::launch::{encode, pseudo_random};
        let (m, n, k) = (3usize, 40usize, 256usize);
        let (a, b, c) = (
            Operand::new(A, m * k, k),
            Operand::new(B, n * k, k),
            Operand::new(C, m * n, n),
        );
        let p = nt(m, n, k, a, b, c, DType::Bf16, None).unwrap();
        let host = |len, seed| encode(DType::Bf16, &pseudo_random(len, seed, 1.0, 0.0));
        let before = vec![host(m * k, 1), host(n * k, 2), host(m * n, 3), vec![0u8; 1 << 20]];
        let want = reference_of(&p, &before);
        let mut got = before.clone();
        got[2] = encode(DType::Bf16, &want[2]);
        got[3] = vec![0u8; 1 << 20];
        assert_eq!(
            check_outputs(&p, &before, &got, Expected::Reference(&want)),
            Ok(())
        );
        assert_eq!(check_outputs(&p, &before, &got, Expected::Run(&got)), Ok(()));
        let mut off = got.clone();
        off[2] = encode(DType::Bf16, &want[2].iter().map(|v| v * 1.01).collect::<Vec<_>>());
        let e = check_outputs(&p, &before, &off, Expected::Reference(&want)).unwrap_err();
        assert!(e.contains("C[0, "), "{e}");
    }

    /// Against another run, bytes equal to that run's pass without their bounds, and
    /// nothing else does: a row off by 1% fails among identical rows, a one-unit
    /// difference in the last place passes, and padding between rows written by both
    /// runs still fails.
    #[test]
    fn the_output_check_against_a_run_skips_only_identical_bytes() {
        use kernels_core::launch::{encode, pseudo_random};
        let (m, n, k) = (5usize, 40usize, 256usize);
        let host = |len, seed| encode(DType::Bf16, &pseudo_random(len, seed, 1.0, 0.0));
        for ld in [n, n + 8] {
            let (a, b, c) = (
                Operand::new(A, m * k, k),
                Operand::new(B, n * k, k),
                Operand::new(C, m * ld, ld),
            );
            let p = nt(m, n, k, a, b, c, DType::Bf16, None).unwrap();
            let before = vec![
                host(m * k, 1),
                host(n * k, 2),
                host(m * ld, 3),
                vec![0u8; 1 << 20],
            ];
            let want = reference_of(&p, &before);
            let mut run = before.clone();
            let mut c_run = encode(DType::Bf16, &want[2]);
            // The reference leaves the padding as it was; so does a right run.
            for i in 0..m {
                c_run[(i * ld + n) * 2..(i + 1) * ld * 2]
                    .copy_from_slice(&before[2][(i * ld + n) * 2..(i + 1) * ld * 2]);
            }
            run[2] = c_run;
            assert_eq!(
                check_outputs(&p, &before, &run, Expected::Run(&run)),
                Ok(()),
                "ld {ld}"
            );

            // Row 3 one percent off, every other row identical.
            let mut off = run.clone();
            for j in 0..n {
                let at = 3 * ld + j;
                let v = element_at(DType::Bf16, &run[2], at) * 1.01 + 0.05;
                off[2][at * 2..at * 2 + 2].copy_from_slice(&encode(DType::Bf16, &[v]));
            }
            let e = check_outputs(&p, &before, &off, Expected::Run(&run)).unwrap_err();
            assert!(e.contains("C[3, "), "ld {ld}: {e}");

            // One unit in the last place of one output: within the bound.
            let mut ulp = run.clone();
            let at = 2 * ld + 7;
            let bits = u16::from_le_bytes([ulp[2][at * 2], ulp[2][at * 2 + 1]]) ^ 1;
            ulp[2][at * 2..at * 2 + 2].copy_from_slice(&bits.to_le_bytes());
            assert_eq!(
                check_outputs(&p, &before, &ulp, Expected::Run(&run)),
                Ok(()),
                "ld {ld}"
            );

            if ld > n {
                // Padding written the same way by both runs is still written.
                let mut pad = run.clone();
                pad[2][(ld + n) * 2] ^= 0x40;
                let e = check_outputs(&p, &before, &pad, Expected::Run(&pad)).unwrap_err();
                assert!(e.contains("padding at row 1"), "{e}");
            }
        }
    }

    fn h200() -> DeviceInfo {
        DeviceInfo::nominal(Target::Sm90).unwrap()
    }

    fn config(split_k: u32, vec: u32) -> GemmConfig {
        GemmConfig {
            path: Path::Mma,
            block_m: 16,
            block_n: 64,
            block_k: 64,
            warps_m: 1,
            warps_n: 4,
            stages: 4,
            split_k,
            group_m: 8,
            vec,
            cluster: 1,
            epilogue: Epilogue::Direct,
        }
    }

    #[test]
    fn the_plan_carries_the_kernel_abi() {
        let (m, n, k) = (3, 100, 1024);
        let (a, b, c) = ok_operands(m, n, k);
        let p = nt(m, n, k, a, b, c, DType::F32, Some((BIAS, n))).unwrap();
        let cfg = config(4, 8);
        let plan = <Gemm as PlannedKernel>::plan(&h200(), &cfg, &p).unwrap();
        assert_eq!(
            plan.args.slots(),
            &[A, B, C, BIAS, WS, 3, 100, 1024, 1024, 1024, 100, 4, 8, 3]
        );
        // 2 tiles of 64 columns, 4 splits along grid y, 128 threads.
        assert_eq!(plan.dims.grid, (2, 4, 1));
        assert_eq!(plan.dims.block, (128, 1, 1));
        assert_eq!(plan.dims.smem_bytes as usize, cfg.smem_bytes(Layout::Nt));
        let v = plan.variant.to_string();
        assert!(
            v.starts_with("gemm_mma_kernel -DDTYPE=2 -DLAYOUT=0 -DBM=16"),
            "{v}"
        );
        assert!(v.ends_with("-DSTAGES=4 -DALIGNED=1"), "{v}");
    }

    /// A cluster launch: the `CLUSTER` define (absent without a cluster, so those
    /// variants keep their names), whole pairs of blocks up to one block per SM, one
    /// pair per band of two tile rows where there are fewer, and B's box half a tile.
    #[test]
    fn a_cluster_of_two_launches_pairs_with_half_b_boxes() {
        let one = GemmConfig::wgmma(128, 256, 8, 4);
        let two = GemmConfig { cluster: 2, ..one };
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 4096,
            k: 4096,
        };
        assert!(!variant(&key, &one).to_string().contains("CLUSTER"));
        assert!(variant(&key, &two)
            .to_string()
            .ends_with("-DSTAGES=4 -DCLUSTER=2"));
        let h200 = h200();
        // (m, n, blocks): 3 tile rows make 2 bands; 16 x 16 tiles make 128 bands, more
        // than the 66 pairs of 132 SMs; one tile row still takes a whole pair.
        for (m, n, blocks) in [(300, 512, 8), (2048, 4096, 132), (5, 100, 2)] {
            let p = packed(m, n, 4096);
            let (dims, args) = launch_args(&h200, &two, &p).unwrap();
            assert_eq!((dims.grid, dims.cluster), ((blocks, 1, 1), 2), "m={m} n={n}");
            assert_eq!(dims.block, (384, 1, 1));
            dims.validate(&h200).unwrap();
            let boxes: Vec<_> = args.tensor_maps().map(|(_, t)| (t.ptr, t.box_rows)).collect();
            assert_eq!(boxes, [(A, 128), (B, 128)], "m={m}");
            let (dims, args) = launch_args(&h200, &one, &p).unwrap();
            assert_eq!(dims.cluster, 1);
            let boxes: Vec<_> = args.tensor_maps().map(|(_, t)| (t.ptr, t.box_rows)).collect();
            assert_eq!(boxes, [(A, 128), (B, 256)], "m={m}");
        }
    }

    /// The stream path: row tiles along x, splits along y (as clusters: a tile's splits
    /// side by side along x), token tiles along z; shared memory only for the k shares
    /// and a cluster's partial; clusters refused before sm_90, layout nn refused.
    #[test]
    fn stream_launches_tile_rows_splits_and_token_tiles() {
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 1280,
            k: 8192,
        };
        let plain = GemmConfig::stream(8, 1, 8, 4);
        let split = GemmConfig { split_k: 4, ..plain };
        let four = GemmConfig { cluster: 4, ..split };
        assert!(variant(&key, &plain)
            .to_string()
            .contains("-DSTREAM=1 -DTOK=8 -DWR=1 -DWK=8 -DUNROLL=4"));
        assert!(!variant(&key, &split).to_string().contains("CLUSTER"));
        assert!(variant(&key, &four).to_string().ends_with("-DCLUSTER=4"));
        let h200 = h200();
        // m = 17 in 8-token tiles: 3 token tiles; n = 1280 in 16-row tiles: 80.
        let p = packed(17, 1280, 8192);
        let (dims, _) = launch_args(&h200, &plain, &p).unwrap();
        assert_eq!(
            (dims.grid, dims.block, dims.cluster),
            ((80, 1, 3), (256, 1, 1), 1)
        );
        assert_eq!(dims.smem_bytes as usize, plain.smem_bytes(Layout::Nt));
        assert!(dims.smem_bytes > 0, "8 warps on k sum in shared memory");
        let (dims, _) = launch_args(&h200, &four, &p).unwrap();
        assert_eq!((dims.grid, dims.cluster), ((320, 1, 3), 4));
        assert_eq!(four.workspace_bytes(17, 1280), 0);
        dims.validate(&h200).unwrap();
        let e = launch_args(&h200, &split, &p).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { name, .. } if name == "workspace"),
            "{e}"
        );
        let ampere = DeviceInfo {
            compute_capability: (8, 0),
            ..h200.clone()
        };
        let e = launch_args(&ampere, &four, &p).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { name, .. } if name == "device"),
            "{e}"
        );
        assert!(launch_args(&ampere, &plain, &p).is_ok());
        let one_warp_on_k = GemmConfig::stream(16, 8, 1, 4);
        let (dims, _) = launch_args(&h200, &one_warp_on_k, &packed(16, 1280, 8192)).unwrap();
        assert_eq!((dims.grid, dims.smem_bytes), ((10, 1, 1), 0));
    }

    /// Cluster splits: the `CLUSTER` define on the swapped variant, one cluster of
    /// `split_k` blocks per output tile (whole clusters up to one block per SM), the
    /// whole tile's boxes of both operands (each block loads its own k range, nothing is
    /// multicast), the partial tile in shared memory and no workspace: a launch without
    /// one is taken, where the same split through the workspace is refused.
    #[test]
    fn cluster_splits_launch_one_cluster_per_tile_without_a_workspace() {
        let split = GemmConfig {
            split_k: 4,
            ..GemmConfig::swapped(16, 128, 4, 6)
        };
        let four = GemmConfig { cluster: 4, ..split };
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 4096,
            k: 4096,
        };
        assert!(variant(&key, &four)
            .to_string()
            .ends_with("-DSTAGES=6 -DCLUSTER=4"));
        assert!(!variant(&key, &split).to_string().contains("CLUSTER"));
        let h200 = h200();
        // (m, n, blocks): 1 x 10 tiles make 10 clusters of 4; 2 x 64 tiles are more
        // than the 33 clusters of 4 that 132 SMs hold.
        for (m, n, blocks) in [(3, 1280, 40), (17, 8192, 132)] {
            let p = packed(m, n, 4096);
            let (dims, args) = launch_args(&h200, &four, &p).unwrap();
            assert_eq!((dims.grid, dims.cluster), ((blocks, 1, 1), 4), "m={m} n={n}");
            assert_eq!(dims.block, (256, 1, 1));
            assert_eq!(dims.smem_bytes as usize, four.smem_bytes(Layout::Nt));
            dims.validate(&h200).unwrap();
            // X = B (the weight), Y = A (the tokens), both whole tiles.
            let boxes: Vec<_> = args.tensor_maps().map(|(_, t)| (t.ptr, t.box_rows)).collect();
            assert_eq!(boxes, [(B, 128), (A, 16)], "m={m}");
            let e = launch_args(&h200, &split, &p).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument { name, .. } if name == "workspace"),
                "{e}"
            );
        }
        // Unswapped: `CLUSTER_SPLIT` tells the splits from a pair sharing B, whose B box
        // is half the tile; the splits' is whole. 300 x 1280 in 128 x 64 tiles: 3 x 20
        // tiles, 60 clusters of 2 (more than 66 would be lowered to what fits at once).
        let tile = GemmConfig {
            epilogue: Epilogue::Tma,
            ..GemmConfig::wgmma(128, 64, 8, 4)
        };
        let splits = GemmConfig {
            cluster: 2,
            split_k: 2,
            ..tile
        };
        let pair = GemmConfig { cluster: 2, ..tile };
        assert!(variant(&key, &splits)
            .to_string()
            .ends_with("-DSTAGES=4 -DCLUSTER=2 -DCLUSTER_SPLIT=1 -DEPILOGUE_TMA=1"));
        assert!(!variant(&key, &pair).to_string().contains("CLUSTER_SPLIT"));
        let p = packed(300, 1280, 4096);
        let (dims, args) = launch_args(&h200, &splits, &p).unwrap();
        assert_eq!((dims.grid, dims.cluster, dims.persistent), ((120, 1, 1), 2, true));
        assert_eq!(dims.smem_bytes as usize, splits.smem_bytes(Layout::Nt));
        assert_eq!(
            splits.smem_bytes(Layout::Nt),
            tile.smem_bytes(Layout::Nt) + 128 * 64 * 4
        );
        let boxes: Vec<_> = args.tensor_maps().map(|(_, t)| (t.ptr, t.box_rows)).collect();
        assert_eq!(boxes[..2], [(A, 128), (B, 64)]);
        let (dims, args) = launch_args(&h200, &pair, &p).unwrap();
        assert_eq!((dims.grid, dims.cluster), ((80, 1, 1), 2)); // 2 bands x 20: 40 pairs
        let boxes: Vec<_> = args.tensor_maps().map(|(_, t)| (t.ptr, t.box_rows)).collect();
        assert_eq!(boxes[..2], [(A, 128), (B, 32)]);
    }

    /// A `tma` epilogue: the `EPILOGUE_TMA` define (absent for `direct`, so those
    /// variants keep their names), a third tensor map of C with boxes of 64 rows x 128
    /// bytes in C's type, flag `C_TMA` and the staging buffers in the shared memory;
    /// where C's base or row stride is off 16 bytes, A's map stands in and the flag
    /// stays clear (the kernel stores C directly), and the launch still plans.
    #[test]
    fn a_tma_epilogue_passes_a_map_of_c_or_falls_back_where_c_is_misaligned() {
        let direct = GemmConfig::wgmma(128, 256, 8, 4);
        let tma = GemmConfig {
            epilogue: Epilogue::Tma,
            ..direct
        };
        let (m, n, k) = (300, 1000, 4096);
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: n as u32,
            k: k as u32,
        };
        assert!(!variant(&key, &direct).to_string().contains("EPILOGUE"));
        assert!(variant(&key, &tma)
            .to_string()
            .ends_with("-DSTAGES=4 -DEPILOGUE_TMA=1"));
        let two = GemmConfig { cluster: 2, ..tma };
        assert!(variant(&key, &two)
            .to_string()
            .ends_with("-DCLUSTER=2 -DEPILOGUE_TMA=1"));
        assert_eq!(
            tma.smem_bytes(Layout::Nt),
            direct.smem_bytes(Layout::Nt) + 2 * crate::config::TMA_STAGING_BYTES
        );
        let flags = |args: &KernelArgs| *args.slots().last().unwrap() as i32;
        let maps = |args: &KernelArgs| -> Vec<(u64, u64, u64, u32, u32, TmaElement)> {
            args.tensor_maps()
                .map(|(_, t)| (t.ptr, t.cols, t.row_bytes, t.box_cols, t.box_rows, t.element))
                .collect()
        };
        let h200 = h200();
        // (C's address, ldc, C's type, whether C gets a map).
        for (c_ptr, ldc, c_dtype, aligned) in [
            (C, n, DType::Bf16, true),
            (C, n + 8, DType::Bf16, true),
            (C, n, DType::F32, true),
            (C, n + 4, DType::F32, true),
            (C, n + 2, DType::Bf16, false),
            (C, n + 1, DType::F32, false),
            (C + 8, n, DType::Bf16, false),
            (C + 4, n, DType::F32, false),
        ] {
            let (a, b, _) = ok_operands(m, n, k);
            let c = Operand::new(c_ptr, m * ldc, ldc);
            let p = nt(m, n, k, a, b, c, c_dtype, None).unwrap();
            let what = format!("C at {c_ptr:#x}, ldc {ldc}, {c_dtype}");
            // The alignment class covers A and B only: the wgmma config stays.
            assert_eq!(fit(tma, <Gemm as PlannedKernel>::alignment(&p)), tma, "{what}");
            let (dims, args) = launch_args(&h200, &tma, &p).unwrap();
            assert_eq!(dims.smem_bytes as usize, tma.smem_bytes(Layout::Nt), "{what}");
            dims.validate(&h200).unwrap();
            let got = maps(&args);
            assert_eq!(got.len(), 3, "{what}");
            let f32_out = c_dtype == DType::F32;
            let size = if f32_out { 4 } else { 2 };
            if aligned {
                let element = if f32_out {
                    TmaElement::F32
                } else {
                    TmaElement::Bf16
                };
                assert_eq!(
                    got[2],
                    (
                        c_ptr,
                        n as u64,
                        (ldc * size) as u64,
                        128 / size as u32,
                        64,
                        element
                    ),
                    "{what}"
                );
                assert_eq!(flags(&args) & C_TMA, C_TMA, "{what}");
            } else {
                assert_eq!(got[2].0, A, "{what}: A's map stands in");
                assert_eq!(flags(&args) & C_TMA, 0, "{what}");
                assert!(c_tensor_map(&p).is_none(), "{what}");
            }
            assert_eq!(flags(&args) & C_F32 != 0, f32_out, "{what}");
            // Direct stores: two maps, never the flag.
            let (_, args) = launch_args(&h200, &direct, &p).unwrap();
            assert_eq!(maps(&args).len(), 2, "{what}");
            assert_eq!(flags(&args) & C_TMA, 0, "{what}");
        }
        // A row of C that ends inside a 16-byte chunk stores directly, whatever ldc.
        for (n, c_dtype) in [(998, DType::Bf16), (1002, DType::F32)] {
            let (a, b, _) = ok_operands(m, n, k);
            let c = Operand::new(C, m * 1008, 1008);
            let p = nt(m, n, k, a, b, c, c_dtype, None).unwrap();
            assert!(c_tensor_map(&p).is_none(), "n {n} {c_dtype}");
            let (_, args) = launch_args(&h200, &tma, &p).unwrap();
            assert_eq!(maps(&args)[2].0, A, "n {n} {c_dtype}: A's map stands in");
            assert_eq!(flags(&args) & C_TMA, 0, "n {n} {c_dtype}");
        }
    }

    /// A device other than compute capability 9.0 is served the sm90 table and
    /// defaults (Blackwell resolves to sm90): a wgmma config runs there as its mma
    /// stand-in, a stream config as it is, and the launch takes it.
    #[test]
    fn wgmma_configs_fall_back_to_mma_off_sm_90() {
        let key = GemmKey {
            dtype: DType::Bf16,
            layout: Layout::Nt,
            n: 4096,
            k: 4096,
        };
        let hopper = DeviceInfo::nominal(Target::Sm90).unwrap();
        let blackwell = DeviceInfo {
            compute_capability: (10, 0),
            ..hopper.clone()
        };
        for m in [1, 16, 256, 4096] {
            let c = crate::analytic_default(blackwell.tuning_target(), &key, m);
            // Up to 8 rows the default is the stream path, which runs on any sm_80+
            // device as it is.
            assert_eq!(c.path == Path::Stream, m <= 8, "m={m}: {c}");
            assert!(c.path.is_wgmma() || m <= 8, "m={m}: {c}");
            assert_eq!(Gemm::fit_alignment(&hopper, &key, c, AlignClass::A16), c);
            let f = Gemm::fit_alignment(&blackwell, &key, c, AlignClass::A16);
            let expected = if c.path.is_wgmma() { portable(&c) } else { c };
            assert_eq!(f, expected, "m={m}");
            let (mu, n) = (m as usize, 4096);
            let p = nt(
                mu,
                n,
                n,
                Operand::new(A, mu * n, n),
                Operand::new(B, n * n, n),
                Operand::new(C, mu * n, n),
                DType::Bf16,
                None,
            )
            .unwrap();
            assert!(launch_args(&blackwell, &f, &p).is_ok(), "m={m}: {f}");
            assert_eq!(
                launch_args(&blackwell, &c, &p).is_err(),
                c.path.is_wgmma(),
                "m={m}: {c}"
            );
        }
    }

    #[test]
    fn a_small_workspace_and_unaligned_operands_are_refused_naming_them() {
        let (m, n, k) = (3, 100, 1024);
        let (a, b, c) = ok_operands(m, n, k);
        let p = unsafe {
            GemmProblem::raw(
                DType::Bf16,
                Layout::Nt,
                m,
                n,
                k,
                a,
                b,
                c,
                DType::Bf16,
                None,
                Some((WS, 64)),
            )
        }
        .unwrap();
        let e = <Gemm as PlannedKernel>::plan(&h200(), &config(4, 8), &p).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { name, .. } if name == "workspace"),
            "{e}"
        );
        assert!(<Gemm as PlannedKernel>::plan(&h200(), &config(1, 8), &p).is_ok());
        // A shifted by one element: 16-byte loads refuse it, element loads take it, and
        // the alignment class says so.
        let shifted = Operand {
            ptr: A + 2,
            len: m * k,
            ..a
        };
        let p = nt(m, n, k, shifted, b, c, DType::Bf16, None).unwrap();
        let e = <Gemm as PlannedKernel>::plan(&h200(), &config(1, 8), &p).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { name, .. } if name == "a"),
            "{e}"
        );
        let align = <Gemm as PlannedKernel>::alignment(&p);
        assert_eq!(align, AlignClass::A2);
        let fitted = fit(config(1, 8), align);
        assert_eq!(fitted.vec, 1);
        assert!(<Gemm as PlannedKernel>::plan(&h200(), &fitted, &p).is_ok());
        // An odd ldb with element loads is fine too.
        let p = nt(
            m,
            n,
            k,
            a,
            Operand::new(B, n * (k + 1), k + 1),
            c,
            DType::Bf16,
            None,
        )
        .unwrap();
        assert_eq!(<Gemm as PlannedKernel>::alignment(&p), AlignClass::A2);
    }

    #[test]
    fn amd_and_pre_ampere_devices_are_refused() {
        let (m, n, k) = (3, 100, 1024);
        let (a, b, c) = ok_operands(m, n, k);
        let p = nt(m, n, k, a, b, c, DType::Bf16, None).unwrap();
        let mi300 = DeviceInfo {
            name: "AMD Instinct MI300X".into(),
            amd_arch: Some("gfx942".into()),
            ..h200()
        };
        let e = <Gemm as PlannedKernel>::plan(&mi300, &config(1, 8), &p).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { name, .. } if name == "device"),
            "{e}"
        );
        assert!(!has_kernel(Target::Gfx942));
        assert!(has_kernel(Target::Sm80));
    }

    #[test]
    fn buffers_list_every_operand_with_its_role() {
        let (m, n, k) = (3, 100, 1024);
        let (a, b, c) = ok_operands(m, n, k);
        let p = nt(m, n, k, a, b, c, DType::F32, Some((BIAS, n))).unwrap();
        let bufs = <Gemm as PlannedKernel>::buffers(&p);
        let got: Vec<_> = bufs.iter().map(|b| (b.name, b.bytes, b.role)).collect();
        assert_eq!(
            got,
            [
                ("a", m * k * 2, BufferRole::Read),
                ("b", n * k * 2, BufferRole::Read),
                ("c", m * n * 4, BufferRole::Write),
                ("bias", n * 2, BufferRole::Read),
                ("workspace", 1 << 20, BufferRole::Zero),
            ]
        );
    }
}
