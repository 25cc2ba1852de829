//! GEMM on raw addresses: `C[m, n] = A[m, k] · op(B) (+ bias[n])`, its workspace size
//! and its warm-up.

use std::ffi::c_void;

use kernels::core::{Error, Result};
use kernels::gemm::ops::{GemmProblem, Operand};
use kernels::gemm::{self, Gemm, GemmKey, Layout};

use super::{on_stream, ordinal, positive, runtime, warmed_as, DTypeCode, Warmed};

/// B's layout codes (`kernels_layout` in the C header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum LayoutCode {
    /// B is `[n, k]` row-major: `nn.Linear`'s weight, `C = A · Bᵀ`.
    Nt = 0,
    /// B is `[k, n]` row-major: `C = A · B`.
    Nn = 1,
}

impl LayoutCode {
    /// Every code, in value order.
    pub const ALL: [LayoutCode; 2] = [LayoutCode::Nt, LayoutCode::Nn];

    /// The constant's name in the C header.
    pub const fn c_name(self) -> &'static str {
        match self {
            LayoutCode::Nt => "KERNELS_LAYOUT_NT",
            LayoutCode::Nn => "KERNELS_LAYOUT_NN",
        }
    }

    /// The layout.
    pub const fn layout(self) -> Layout {
        match self {
            LayoutCode::Nt => Layout::Nt,
            LayoutCode::Nn => Layout::Nn,
        }
    }

    /// The code `code`, or an error naming `name`.
    pub fn parse(name: &str, code: i32) -> Result<LayoutCode> {
        LayoutCode::ALL
            .into_iter()
            .find(|l| *l as i32 == code)
            .ok_or_else(|| Error::invalid(name, format!("unknown layout code {code} (0 nt, 1 nn)")))
    }
}

/// A matrix operand as a foreign caller holds it: a device address and its leading
/// dimension (elements between the starts of its rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matrix {
    pub ptr: u64,
    pub ld: i64,
}

/// `[m, n, k]` as a foreign caller holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmShape {
    pub m: i64,
    pub n: i64,
    pub k: i64,
}

impl GemmShape {
    fn sizes(self) -> Result<(usize, usize, usize)> {
        Ok((
            positive("m", self.m)?,
            positive("n", self.n)?,
            positive("k", self.k)?,
        ))
    }
}

/// Operand `name` of `rows` x `cols` with leading dimension `ld` (named `ld_name`): the
/// kernel crate's operand, whose length is the elements the shape spans (the caller's
/// promise). A leading dimension below `cols` is left to the problem's check, which
/// names it.
fn operand(name: &str, ld_name: &str, m: Matrix, rows: usize, cols: usize) -> Result<Operand> {
    let ld = usize::try_from(m.ld)
        .map_err(|_| Error::invalid(ld_name, format!("must not be negative, got {}", m.ld)))?;
    let len = if ld < cols {
        rows.saturating_mul(cols)
    } else {
        (rows - 1)
            .checked_mul(ld)
            .and_then(|v| v.checked_add(cols))
            .ok_or_else(|| {
                Error::invalid(
                    name,
                    format!("[{rows}, {cols}] with leading dimension {ld} overflows"),
                )
            })?
    };
    Ok(Operand::new(m.ptr, len, ld))
}

/// `C = A · op(B) (+ bias)` on `stream` of device `device`: `a` `[m, k]`, `b` `[n, k]`
/// (`layout` nt) or `[k, n]` (nn), `c` `[m, n]` of `c_dtype` (`dtype` or f32), `bias`
/// (0: none) `n` elements of `dtype`. `workspace` is `(address, bytes)`, `(0, 0)` for
/// none: split-K configs need [`gemm_workspace_bytes`], zeroed before first use.
///
/// # Safety
/// Every address must be a device allocation of device `device` covering its operand,
/// alive until the kernel has run on `stream`; `stream` as for [`super::rmsnorm()`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    c: Matrix,
    c_dtype: i32,
    a: Matrix,
    b: Matrix,
    layout: i32,
    bias: u64,
    shape: GemmShape,
    dtype: i32,
    workspace: (u64, usize),
    device: i32,
    stream: *mut c_void,
) -> Result<()> {
    let dtype = DTypeCode::parse("dtype", dtype)?.dtype();
    let c_dtype = DTypeCode::parse("c_dtype", c_dtype)?.dtype();
    let layout = LayoutCode::parse("layout", layout)?.layout();
    let (m, n, k) = shape.sizes()?;
    let a = operand("a", "lda", a, m, k)?;
    let b = match layout {
        Layout::Nt => operand("b", "ldb", b, n, k)?,
        Layout::Nn => operand("b", "ldb", b, k, n)?,
    };
    let c = operand("c", "ldc", c, m, n)?;
    let workspace = match workspace {
        (0, 0) => None,
        (0, bytes) => {
            return Err(Error::invalid(
                "workspace",
                format!("is null with workspace_bytes {bytes}"),
            ))
        }
        w => Some(w),
    };
    let bias = (bias != 0).then_some((bias, n));
    let device = ordinal(device)?;
    // SAFETY: the caller's promise on every address.
    let p = unsafe { GemmProblem::raw(dtype, layout, m, n, k, a, b, c, c_dtype, bias, workspace) }?;
    // SAFETY: the caller's promise on stream.
    unsafe { on_stream(device, stream, |rt, s| gemm::ops::gemm(rt, s, &p).map(|_| ())) }
}

/// The workspace bytes a GEMM of `shape` may need on device `device` (the most any
/// config its policy can pick takes; 0 when none splits k).
pub fn gemm_workspace_bytes(shape: GemmShape, dtype: i32, layout: i32, device: i32) -> Result<usize> {
    let key = key_of(shape, dtype, layout)?;
    let rt = runtime(ordinal(device)?)?;
    Ok(gemm::workspace_bytes(rt.info().tuning_target(), &key.0, key.1))
}

/// The static key and `m` of a shape, each bad field named.
fn key_of(shape: GemmShape, dtype: i32, layout: i32) -> Result<(GemmKey, u64)> {
    let dtype = DTypeCode::parse("dtype", dtype)?.dtype();
    let layout = LayoutCode::parse("layout", layout)?.layout();
    let (m, n, k) = shape.sizes()?;
    let max = i32::MAX as usize;
    for (name, v) in [("m", m), ("n", n), ("k", k)] {
        if v > max {
            return Err(Error::invalid(name, format!("{v} is outside 1..={max}")));
        }
    }
    if !matches!(dtype, kernels::DType::Bf16 | kernels::DType::F16) {
        return Err(Error::invalid(
            "dtype",
            format!("{dtype}: the GEMM takes bf16 or f16"),
        ));
    }
    Ok((
        GemmKey {
            dtype,
            layout,
            n: n as u32,
            k: k as u32,
        },
        m as u64,
    ))
}

/// One GEMM shape to warm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmWarmShape {
    pub dtype: i32,
    pub layout: i32,
    pub m: i64,
    pub n: i64,
    pub k: i64,
}

/// Resolves and compiles every GEMM shape on device `device` (every alignment class,
/// variants in parallel); a bad shape is an error naming `shapes[i].<field>`.
///
/// # Safety
/// `stream` as for [`super::rmsnorm()`].
pub unsafe fn warm_gemm(shapes: &[GemmWarmShape], device: i32, stream: *mut c_void) -> Result<Vec<Warmed>> {
    super::check_count(shapes.len())?;
    let keys = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            key_of(
                GemmShape {
                    m: s.m,
                    n: s.n,
                    k: s.k,
                },
                s.dtype,
                s.layout,
            )
            .map_err(|e| super::at_shape(i, e))
        })
        .collect::<Result<Vec<_>>>()?;
    let device = ordinal(device)?;
    // SAFETY: the caller's promise on stream.
    unsafe {
        on_stream(device, stream, |rt, s| {
            rt.warm::<Gemm>(s, &keys)
                .into_iter()
                .map(|p| p.map(|p| warmed_as("gemm", &p.resolved)))
                .collect()
        })
    }
}
