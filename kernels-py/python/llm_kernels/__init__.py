"""Tuned softmax, RMSNorm, GEMM and fused-MoE CUDA kernels for torch-based serving
engines.

Each op takes torch tensors (or any CUDA array with ``__cuda_array_interface__`` or
DLPack), checks them (device, dtype, shape, strides, overlap), and launches on the
operands' device and on torch's current stream, so it orders with the surrounding
torch work and can be captured in ``torch.cuda.graph`` once its shapes are warmed
(:func:`warm`); the stream rules for other arrays are in ``llm_kernels._arrays``. Launch configurations come from tuning tables
baked into the library; nothing is searched at run time.

    import torch, llm_kernels
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    llm_kernels.warm([("rmsnorm", torch.bfloat16, 16, 4096)])
    y = llm_kernels.rmsnorm(x, w, eps=1e-6)

The calling conventions are sgl_kernel's (``rmsnorm(input, weight, eps, out)``,
``fused_add_rmsnorm(input, residual, weight, eps)`` in place,
``topk_softmax(topk_weights, topk_ids, gating_output, renormalize)``) with vLLM's
spellings beside them (``rms_norm(out, input, weight, epsilon)``,
``fused_add_rms_norm``, ``fused_topk``, ``grouped_topk``, ``fused_experts``);
``gemm(a, b, bias, out_dtype)`` is ``F.linear`` (``b`` in ``nn.Linear`` layout) and
``fused_moe(hidden_states, w1, w2, topk_weights, topk_ids)`` is vLLM's and SGLang's
``fused_experts`` with SiLU.

Row operands are ``[..., cols]`` tensors with unit stride in the last dimension whose
leading dimensions flatten into rows of one stride (slices of wider rows are fine).
Outputs and workspaces are allocated (with torch) when not given; an engine that
captures CUDA graphs preallocates them, sized by :func:`gemm_workspace_bytes` and
:func:`moe_workspace_bytes`.
A bad argument raises ``TypeError`` or ``ValueError`` naming it; a device, compiler
or driver failure raises :class:`KernelsError`. torch is imported if installed; it
is not needed to import this package.
"""

import math
import re

from . import _arrays, _ext
from ._arrays import read as _read
from ._ext import KernelsError

__version__ = _ext.version()

__all__ = [
    "KernelsError",
    "softmax",
    "log_softmax",
    "rmsnorm",
    "fused_add_rmsnorm",
    "rms_norm",
    "fused_add_rms_norm",
    "gemm",
    "gemm_workspace_bytes",
    "fused_moe",
    "fused_experts",
    "moe_workspace_bytes",
    "topk_softmax",
    "fused_topk",
    "grouped_topk",
    "warm",
]

torch = _arrays.torch  # None where torch is not installed: the checks work without it

# dtype names -> the extension's codes.
_CODE = {"bf16": _ext.BF16, "f16": _ext.F16, "f32": _ext.F32}
_NAME = {v: k for k, v in _CODE.items()}
_DTYPE_NAMES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "f16": "f16",
    "fp16": "f16",
    "float16": "f16",
    "half": "f16",
    "torch.float16": "f16",
    "f32": "f32",
    "fp32": "f32",
    "float32": "f32",
    "float": "f32",
    "torch.float32": "f32",
}
_SUPPORTED = "torch.bfloat16, torch.float16 or torch.float32"
_TORCH_DTYPE = {}
if torch is not None:
    _TORCH_DTYPE = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i32": torch.int32}


def _rows(a, name):
    """(address, rows, cols, row stride, dtype code, device) of a [..., cols] operand."""
    code = _CODE.get(a.dtype)
    if code is None:
        raise ValueError(f"`{name}` has dtype {a.dtype}; expected {_SUPPORTED}")
    shape, strides = a.shape, a.strides
    if not shape:
        raise ValueError(f"`{name}` is 0-dimensional; it needs a last dimension of columns")
    cols = shape[-1]
    if cols == 0:
        raise ValueError(f"`{name}` has 0 columns (shape {list(shape)})")
    if strides[-1] != 1 and cols != 1:
        raise ValueError(
            f"`{name}` must have unit stride in its last dimension, got strides {list(strides)}; "
            "call .contiguous()"
        )
    rows, stride, outer = 1, cols, None
    for size, step in zip(reversed(shape[:-1]), reversed(strides[:-1])):
        if size == 1:
            continue
        if outer is None:
            stride = step
        elif step != outer:
            raise ValueError(
                f"`{name}` (shape {list(shape)}, strides {list(strides)}) does not flatten into rows "
                "of one stride; call .contiguous()"
            )
        outer = step * size
        rows *= size
    if rows == 0:
        return a.ptr, 0, cols, cols, code, a.device
    if rows > 1 and stride < cols:
        raise ValueError(f"`{name}` has row stride {stride}, less than its {cols} columns: its rows overlap")
    return a.ptr, rows, cols, stride, code, a.device


def _like(a, a_name, b, b_name):
    """`b` matches `a` (an operand from _rows) in shape, dtype and device; names `b` if not."""
    if b[1:3] != a[1:3]:
        raise ValueError(f"`{b_name}` is [{b[1]}, {b[2]}] as rows x cols but `{a_name}` is [{a[1]}, {a[2]}]")
    if b[4] != a[4]:
        raise ValueError(f"`{b_name}` has another dtype than `{a_name}`; every operand needs one dtype")
    if b[5] is not None and a[5] is not None and b[5] != a[5]:
        raise ValueError(f"`{b_name}` is on cuda:{b[5]} but `{a_name}` is on cuda:{a[5]}")


def _span(op):
    ptr, rows, cols, stride, code, _ = op
    return ptr, ptr + ((rows - 1) * stride + cols) * _arrays.SIZE[_NAME[code]]


def _disjoint(a, a_name, b, b_name):
    (a0, a1), (b0, b1) = _span(a), _span(b)
    if a0 < b1 and b0 < a1:
        raise ValueError(f"`{b_name}` overlaps `{a_name}`; the kernel needs them disjoint")


def _writable(a):
    if a.readonly:
        raise ValueError(f"`{a.name}` is read-only; it is written")


def _weight(w, x):
    op = _rows(w, "weight")
    if len(w.shape) != 1 or op[2] != x[2]:
        raise ValueError(f"`weight` must be a vector of {x[2]} elements (the columns), got shape {list(w.shape)}")
    if op[4] != x[4]:
        raise ValueError("`weight` has another dtype than `input`; every operand needs one dtype")
    if op[5] is not None and x[5] is not None and op[5] != x[5]:
        raise ValueError(f"`weight` is on cuda:{op[5]} but `input` is on cuda:{x[5]}")
    return op


def _number(value, name):
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}") from None


def _positive(value, name):
    v = _number(value, name)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"`{name}` must be finite and > 0, got {value}")
    return v


def _finite(value, name):
    v = _number(value, name)
    if not math.isfinite(v):
        raise ValueError(f"`{name}` must be finite, got {value}")
    return v


def _count(value, name, low=1):
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = value.__index__()
        except (AttributeError, TypeError):
            raise TypeError(f"`{name}` must be an integer, got {type(value).__name__}") from None
    if value < low:
        raise ValueError(f"`{name}` must be at least {low}, got {value}")
    return value


def _need_torch(name):
    if torch is None:
        raise ValueError(f"`{name}`: torch is not installed, so it cannot be allocated; pass {name}=")


def _empty(shape, dtype, arrays, name):
    """A new torch tensor on the call's device, for an output not given."""
    _need_torch(name)
    return torch.empty(shape, dtype=_TORCH_DTYPE[dtype], device=f"cuda:{_arrays.device_of(arrays)}")


def _output(out, input, a, name="out"):
    if out is not None:
        return out
    _need_torch(name)
    if a.kind == _arrays.TORCH:
        return torch.empty_like(input)
    return _empty(a.shape, a.dtype, [a], name)


def _contiguous(a, name, dims, dtypes):
    """Checks a contiguous operand of `dims` dimensions and one of `dtypes`."""
    if len(a.shape) != dims:
        raise ValueError(f"`{name}` must be {dims}-dimensional, got shape {list(a.shape)}")
    if a.dtype not in dtypes:
        expected = " or ".join(str(_TORCH_DTYPE.get(d, d)) for d in dtypes)
        raise ValueError(f"`{name}` has dtype {a.dtype}; expected {expected}")
    expect = _arrays._contiguous_strides(a.shape)
    if any(size > 1 and s != e for size, s, e in zip(a.shape, a.strides, expect)):
        raise ValueError(f"`{name}` must be contiguous, got strides {list(a.strides)}; call .contiguous()")


def _named(call, names, *args):
    """`call(*args)`, with the library's argument names in a ValueError replaced by the
    Python function's (`names`: library name -> Python name)."""
    try:
        return call(*args)
    except ValueError as e:
        message = str(e)
        for lib, py in names.items():
            message = message.replace(f"`{lib}`", f"`{py}`")
        raise ValueError(message) from None


_GEMM_NAMES = {"c": "out", "ldc": "out", "lda": "a", "ldb": "b"}
_MOE_NAMES = {"hidden": "hidden_states", "w13": "w1"}
_ROUTING_NAMES = {
    "logits": "gating_output",
    "bias": "e_score_correction_bias",
    "n_group": "num_expert_group",
    "scale": "routed_scaling_factor",
}


def _softmax(log, input, out, scale, stream):
    xa = _read(input, "input")
    ya = _read(out, "out") if out is not None else None
    stream = _arrays.bind([xa, ya], stream)
    x = _rows(xa, "input")
    scale = _finite(scale, "scale")
    if ya is None:
        out = _output(out, input, xa)
        ya = _read(out, "out")
    y = _rows(ya, "out")
    _like(x, "input", y, "out")
    _writable(ya)
    if x[1] == 0:
        return out
    if not (y[0] == x[0] and y[3] == x[3]):  # in place (same rows) is allowed
        _disjoint(x, "input", y, "out")
    device, stream = _arrays.launch([xa, ya], stream)
    _ext.softmax(log, y[0], y[3], x[0], x[3], x[1], x[2], x[4], scale, device, stream)
    return out


def softmax(input, out=None, scale=1.0, *, stream=None):
    """``softmax(input * scale)`` over the last dimension; returns ``out``.

    ``out`` (allocated like ``input`` when not given) may be ``input`` itself.
    ``stream`` is a raw CUDA stream handle (an int); the default is torch's current
    stream on ``input``'s device.
    """
    return _softmax(False, input, out, scale, stream)


def log_softmax(input, out=None, scale=1.0, *, stream=None):
    """``log_softmax(input * scale)`` over the last dimension; as :func:`softmax`."""
    return _softmax(True, input, out, scale, stream)


def rmsnorm(input, weight, eps=1e-6, out=None, *, stream=None):
    """``input / sqrt(mean(input**2, -1) + eps) * weight``; returns ``out``.

    sgl_kernel's ``rmsnorm``. ``weight`` is a vector of ``input.shape[-1]`` elements;
    ``out`` (allocated like ``input`` when not given) must not overlap ``input``.
    """
    xa, wa = _read(input, "input"), _read(weight, "weight")
    ya = _read(out, "out") if out is not None else None
    stream = _arrays.bind([xa, wa, ya], stream)
    x = _rows(xa, "input")
    w = _weight(wa, x)
    eps = _positive(eps, "eps")
    if ya is None:
        out = _output(out, input, xa)
        ya = _read(out, "out")
    y = _rows(ya, "out")
    _like(x, "input", y, "out")
    _writable(ya)
    if x[1] == 0:
        return out
    _disjoint(x, "input", y, "out")
    _disjoint(w, "weight", y, "out")
    device, stream = _arrays.launch([xa, wa, ya], stream)
    _ext.rmsnorm(y[0], y[3], x[0], x[3], w[0], x[1], x[2], x[4], eps, device, stream)
    return out


def fused_add_rmsnorm(input, residual, weight, eps=1e-6, *, stream=None):
    """In place: ``residual += input; input = rmsnorm(residual) * weight``.

    sgl_kernel's ``fused_add_rmsnorm``; returns None. ``input`` and ``residual`` have
    one shape and must not overlap each other or ``weight``.
    """
    xa, ra, wa = _read(input, "input"), _read(residual, "residual"), _read(weight, "weight")
    stream = _arrays.bind([xa, ra, wa], stream)
    x = _rows(xa, "input")
    r = _rows(ra, "residual")
    _like(x, "input", r, "residual")
    w = _weight(wa, x)
    eps = _positive(eps, "eps")
    _writable(xa)
    _writable(ra)
    if x[1] == 0:
        return None
    _disjoint(x, "input", r, "residual")
    _disjoint(x, "input", w, "weight")
    _disjoint(r, "residual", w, "weight")
    device, stream = _arrays.launch([xa, ra, wa], stream)
    _ext.fused_add_rmsnorm(x[0], x[3], r[0], r[3], w[0], x[1], x[2], x[4], eps, device, stream)
    return None


def rms_norm(out, input, weight, epsilon, *, stream=None):
    """vLLM's ``rms_norm(out, input, weight, epsilon)``: :func:`rmsnorm` into ``out``."""
    rmsnorm(input, weight, epsilon, out, stream=stream)


def fused_add_rms_norm(input, residual, weight, epsilon, *, stream=None):
    """vLLM's ``fused_add_rms_norm(input, residual, weight, epsilon)``: :func:`fused_add_rmsnorm`."""
    fused_add_rmsnorm(input, residual, weight, epsilon, stream=stream)


# ---- GEMM -------------------------------------------------------------------------

_LAYOUTS = {"nt": _ext.LAYOUT_NT, "nn": _ext.LAYOUT_NN}
_gemm_ws_memo = {}


def gemm_workspace_bytes(m, n, k, dtype, layout="nt", device=None):
    """Bytes of the workspace a GEMM of ``[m, n, k]`` may need on ``device`` (the most
    any config the tuning policy can pick takes; 0 when none splits k). Allocate it
    once, zeroed, for the largest ``m`` and pass it as ``workspace=``; each call leaves
    its split-K tile counters at zero again (the partial sums stay), so it is reused
    as it is. Opens the device; compiles nothing."""
    if layout not in _LAYOUTS:
        raise ValueError(f"`layout` is {layout!r}; expected 'nt' (b is [n, k]) or 'nn' (b is [k, n])")
    code = _CODE[_dtype_name(dtype, "dtype")]
    key = (_device_index(device), int(m), int(n), int(k), code, _LAYOUTS[layout])
    bytes_ = _gemm_ws_memo.get(key)
    if bytes_ is None:
        bytes_ = _ext.gemm_workspace_bytes(key[1], key[2], key[3], code, key[5], key[0])
        _gemm_ws_memo[key] = bytes_
    return bytes_


def _workspace(ws, name, need, arrays, stream, zeroed):
    """(address, bytes) of a given workspace, or a new one of `need` bytes (zeroed when
    `zeroed`) on torch's current stream; (0, 0) when none is needed."""
    if ws is not None:
        w = _read(ws, name)
        _arrays.bind([w], stream)
        _contiguous(w, name, len(w.shape), list(_arrays.SIZE))
        _writable(w)
        size = _arrays.SIZE[w.dtype]
        for s in w.shape:
            size *= s
        if size < need:
            raise ValueError(f"`{name}` holds {size} bytes; this call needs {need}")
        arrays.append(w)
        return w.ptr, size
    if need == 0:
        return 0, 0
    _need_torch(name)
    device = _arrays.device_of(arrays)
    if stream is not None and stream != _arrays.torch_stream(device):
        raise ValueError(f"`{name}` must be given with a `stream` other than torch's current one")
    new = (torch.zeros if zeroed else torch.empty)(need, dtype=torch.uint8, device=f"cuda:{device}")
    arrays.append(_read(new, name))
    return new.data_ptr(), need


def gemm(a, b, bias=None, out_dtype=None, *, out=None, workspace=None, stream=None):
    """``a @ b.T + bias`` (``F.linear``): ``a`` ``[..., k]``, ``b`` ``[n, k]`` (the
    ``nn.Linear`` weight; a transposed view of a ``[k, n]`` matrix, ``w.t()``, runs
    as ``a @ w`` without a copy), ``bias`` ``[n]`` or None; bf16 or f16 in, fp32
    accumulation. Returns ``out``, ``[..., n]`` of ``out_dtype`` (``a``'s dtype, or
    ``torch.float32``), allocated when not given.

    ``workspace`` (a contiguous tensor of :func:`gemm_workspace_bytes` bytes, zeroed
    once) is needed by shapes whose config splits k; without it one is allocated and
    zeroed per call, which a CUDA graph then captures.
    """
    aa, ba = _read(a, "a"), _read(b, "b")
    bias_a = _read(bias, "bias") if bias is not None else None
    oa = _read(out, "out") if out is not None else None
    arrays = [aa, ba, bias_a, oa]
    stream = _arrays.bind(arrays, stream)
    x = _rows(aa, "a")
    if aa.dtype not in ("bf16", "f16"):
        raise ValueError(f"`a` has dtype {aa.dtype}; the GEMM takes torch.bfloat16 or torch.float16")
    k = x[2]
    if len(ba.shape) != 2:
        raise ValueError(f"`b` must be 2-dimensional [n, k], got shape {list(ba.shape)}")
    if ba.dtype != aa.dtype:
        raise ValueError(f"`b` has dtype {ba.dtype} but `a` has {aa.dtype}")
    n, kb = ba.shape
    if kb != k:
        raise ValueError(f"`b` is [{n}, {kb}] but `a` has {k} columns: b must be [n, k] (nn.Linear layout)")
    if n == 0:
        raise ValueError("`b` has 0 rows: n must be at least 1")
    s0, s1 = ba.strides
    if s1 == 1 or k == 1:
        layout, ldb = _ext.LAYOUT_NT, max(s0, k) if n > 1 else k
    elif s0 == 1 or n == 1:
        layout, ldb = _ext.LAYOUT_NN, max(s1, n) if k > 1 else n
    else:
        raise ValueError(f"`b` needs unit stride in one dimension, got strides {[s0, s1]}; call .contiguous()")
    bias_ptr = 0
    if bias_a is not None:
        if bias_a.shape != (n,) and not (len(bias_a.shape) == 1 and bias_a.shape[0] == n):
            raise ValueError(f"`bias` must be a vector of n = {n} elements, got shape {list(bias_a.shape)}")
        if bias_a.dtype != aa.dtype:
            raise ValueError(f"`bias` has dtype {bias_a.dtype} but `a` has {aa.dtype}")
        if n > 1 and bias_a.strides[0] != 1:
            raise ValueError(f"`bias` must be contiguous, got stride {bias_a.strides[0]}")
        bias_ptr = bias_a.ptr
    if out_dtype is None:
        c_dtype = oa.dtype if oa is not None and oa.dtype == "f32" else aa.dtype
    else:
        c_dtype = _dtype_name(out_dtype, "out_dtype")
        if c_dtype not in (aa.dtype, "f32"):
            raise ValueError(f"`out_dtype` is {out_dtype}; the output is `a`'s dtype or torch.float32")
    if oa is None:
        out = _empty(tuple(aa.shape[:-1]) + (n,), c_dtype, arrays, "out")
        oa = arrays[3] = _read(out, "out")
    y = _rows(oa, "out")
    if y[1:3] != (x[1], n):
        raise ValueError(f"`out` is [{y[1]}, {y[2]}] as rows x cols but the product is [{x[1]}, {n}]")
    if oa.dtype != c_dtype:
        raise ValueError(f"`out` has dtype {oa.dtype}; expected {c_dtype}")
    _writable(oa)
    _arrays.check_devices(arrays)
    if x[1] == 0:
        return out
    _disjoint(x, "a", y, "out")
    b_rows, b_cols = (n, k) if layout == _ext.LAYOUT_NT else (k, n)
    _disjoint((ba.ptr, b_rows, b_cols, ldb, x[4], None), "b", y, "out")
    if bias_ptr:
        _disjoint((bias_ptr, 1, n, n, x[4], None), "bias", y, "out")
    device = _arrays.device_of(arrays)
    need = gemm_workspace_bytes(x[1], n, k, aa.dtype, "nt" if layout == _ext.LAYOUT_NT else "nn", device)
    ws = _workspace(workspace, "workspace", need, arrays, stream, zeroed=True)
    device, stream = _arrays.launch(arrays, stream)
    _named(_ext.gemm, _GEMM_NAMES, y[0], y[3], _CODE[c_dtype], x[0], x[3], ba.ptr, ldb, layout, bias_ptr,
           x[1], n, k, x[4], ws[0], ws[1], device, stream)
    return out


# ---- fused MoE ----------------------------------------------------------------------


def moe_workspace_bytes(tokens, experts, n, k, topk, dtype):
    """Bytes of the workspace :func:`fused_moe` needs for ``tokens`` tokens, ``experts``
    experts of intermediate size ``n`` and hidden size ``k``, and ``topk``. Allocate it
    once for the most tokens a step has; it needs no initialisation. No GPU needed."""
    code = _CODE[_dtype_name(dtype, "dtype")]
    return _ext.moe_workspace_bytes(int(tokens), int(experts), int(n), int(k), int(topk), code)


def fused_moe(hidden_states, w1, w2, topk_weights, topk_ids, *, out=None, workspace=None, stream=None):
    """Fused mixture-of-experts with SiLU, vLLM's and SGLang's ``fused_experts``:

    ``out[t] = sum_j topk_weights[t, j] * w2[e] @ (silu(w1[e, :I] @ x_t) * (w1[e, I:] @ x_t))``,
    ``e = topk_ids[t, j]``, for ``hidden_states`` ``[T, H]``, ``w1`` ``[E, 2I, H]`` (gate
    rows then up rows), ``w2`` ``[E, H, I]``, all contiguous bf16 or f16 (``H`` and ``I``
    multiples of 8), ``topk_weights`` ``[T, topk]`` float32 and ``topk_ids`` ``[T, topk]``
    int32 (from :func:`fused_topk`, :func:`grouped_topk` or the engine). An id outside
    ``[0, E)`` adds nothing to its token; duplicate ids each count. The sum over the
    choices is in fp32 in a fixed order: the same bits on every run.

    Returns ``out`` (``[T, H]``, allocated when not given; it must not overlap the
    inputs). ``workspace``: :func:`moe_workspace_bytes` bytes, allocated per call when
    not given.
    """
    ha, w1a, w2a = _read(hidden_states, "hidden_states"), _read(w1, "w1"), _read(w2, "w2")
    wa, ia = _read(topk_weights, "topk_weights"), _read(topk_ids, "topk_ids")
    oa = _read(out, "out") if out is not None else None
    arrays = [ha, w1a, w2a, wa, ia, oa]
    stream = _arrays.bind(arrays, stream)
    _contiguous(ha, "hidden_states", 2, ("bf16", "f16"))
    dtype = ha.dtype
    tokens, hidden = ha.shape
    _contiguous(w1a, "w1", 3, (dtype,))
    experts, two_inter, h1 = w1a.shape
    if h1 != hidden or two_inter % 2:
        raise ValueError(f"`w1` must be [E, 2I, H] with H = {hidden}, got shape {list(w1a.shape)}")
    inter = two_inter // 2
    if inter % 8 or hidden % 8:
        raise ValueError(f"`w1` is {list(w1a.shape)}: H and I must be multiples of 8 (rows move in 16-byte pieces)")
    _contiguous(w2a, "w2", 3, (dtype,))
    if w2a.shape != (experts, hidden, inter):
        raise ValueError(f"`w2` must be [E, H, I] = {[experts, hidden, inter]}, got shape {list(w2a.shape)}")
    _contiguous(wa, "topk_weights", 2, ("f32",))
    if wa.shape[0] != tokens:
        raise ValueError(f"`topk_weights` must be [T, topk] with T = {tokens}, got shape {list(wa.shape)}")
    topk = wa.shape[1]
    _contiguous(ia, "topk_ids", 2, ("i32",))
    if ia.shape != wa.shape:
        raise ValueError(f"`topk_ids` must be [T, topk] = {list(wa.shape)} like `topk_weights`, got {list(ia.shape)}")
    if oa is None:
        out = _empty((tokens, hidden), dtype, arrays, "out")
        oa = arrays[5] = _read(out, "out")
    _contiguous(oa, "out", 2, (dtype,))
    if oa.shape != (tokens, hidden):
        raise ValueError(f"`out` must be [T, H] = {[tokens, hidden]}, got shape {list(oa.shape)}")
    _writable(oa)
    _arrays.check_devices(arrays)
    if tokens == 0:
        return out
    code = _CODE[dtype]
    need = _named(_ext.moe_workspace_bytes, _MOE_NAMES, tokens, experts, inter, hidden, topk, code)
    ws = _workspace(workspace, "workspace", need, arrays, stream, zeroed=False)
    device, stream = _arrays.launch(arrays, stream)
    _named(_ext.fused_moe, _MOE_NAMES, oa.ptr, ha.ptr, w1a.ptr, w2a.ptr, ia.ptr, wa.ptr, tokens, experts,
           inter, hidden, topk, code, ws[0], ws[1], device, stream)
    return out


def fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, *, out=None, workspace=None, stream=None):
    """vLLM's and SGLang's name for :func:`fused_moe`."""
    return fused_moe(hidden_states, w1, w2, topk_weights, topk_ids, out=out, workspace=workspace, stream=stream)


def _routing_operands(topk_weights, topk_ids, gating_output, stream):
    wa, ia, ga = _read(topk_weights, "topk_weights"), _read(topk_ids, "topk_ids"), _read(gating_output, "gating_output")
    stream = _arrays.bind([wa, ia, ga], stream)
    _contiguous(ga, "gating_output", 2, ("bf16", "f16", "f32"))
    tokens, experts = ga.shape
    _contiguous(wa, "topk_weights", 2, ("f32",))
    _contiguous(ia, "topk_ids", 2, ("i32",))
    if wa.shape[0] != tokens or ia.shape != wa.shape:
        raise ValueError(
            f"`topk_weights` {list(wa.shape)} and `topk_ids` {list(ia.shape)} must both be [T, topk] with T = {tokens}"
        )
    _writable(wa)
    _writable(ia)
    return (wa, ia, ga), stream


def topk_softmax(topk_weights, topk_ids, gating_output, renormalize=False, *, stream=None):
    """sgl_kernel's ``topk_softmax``: fills ``topk_weights`` (float32) and ``topk_ids``
    (int32), ``[T, topk]``, with each token's ``topk`` largest softmax probabilities of
    ``gating_output`` ``[T, E]`` (bf16, f16 or f32), best first, ties to the lower
    expert; ``renormalize`` rescales them to sum to 1. ``topk`` <= 64. Returns None."""
    (wa, ia, ga), stream = _routing_operands(topk_weights, topk_ids, gating_output, stream)
    tokens, experts = ga.shape
    if tokens == 0:
        return None
    device, stream = _arrays.launch([wa, ia, ga], stream)
    _named(_ext.topk_softmax, _ROUTING_NAMES, ia.ptr, wa.ptr, ga.ptr, tokens, experts, wa.shape[1],
           _CODE[ga.dtype], bool(renormalize), device, stream)
    return None


def _gating(gating_output, hidden_states, topk, stream, extra=()):
    """The router logits (and `extra` operands) read and bound, with the token and
    expert counts; `topk` checked against them."""
    ga = _read(gating_output, "gating_output")
    stream = _arrays.bind([ga, *extra], stream)
    _contiguous(ga, "gating_output", 2, ("bf16", "f16", "f32"))
    tokens, experts = ga.shape
    if topk > min(experts, 64):
        raise ValueError(f"`topk` is {topk}; at most 64 and the {experts} experts")
    if hidden_states is not None:
        h = _read(hidden_states, "hidden_states")
        if not h.shape or h.shape[0] != tokens:
            raise ValueError(f"`hidden_states` has {list(h.shape)[:1]} tokens but `gating_output` has {tokens}")
    return ga, tokens, experts, stream


def _new_routing(tokens, topk, ga):
    """New `(topk_weights, topk_ids)` for `tokens` tokens on the logits' device."""
    _need_torch("topk_weights")
    device = f"cuda:{_arrays.device_of([ga])}"
    return (
        torch.empty(tokens, topk, dtype=torch.float32, device=device),
        torch.empty(tokens, topk, dtype=torch.int32, device=device),
    )


def fused_topk(hidden_states, gating_output, topk, renormalize, *, stream=None):
    """vLLM's ``fused_topk``: :func:`topk_softmax` into new tensors; returns
    ``(topk_weights, topk_ids)``. ``hidden_states`` only gives the token count."""
    topk = _count(topk, "topk")
    ga, tokens, _, _ = _gating(gating_output, hidden_states, topk, stream)
    weights, ids = _new_routing(tokens, topk, ga)
    topk_softmax(weights, ids, gating_output, renormalize, stream=stream)
    return weights, ids


def grouped_topk(
    hidden_states,
    gating_output,
    topk,
    renormalize,
    num_expert_group=0,
    topk_group=0,
    scoring_func="sigmoid",
    routed_scaling_factor=1.0,
    e_score_correction_bias=None,
    *,
    stream=None,
):
    """DeepSeek-V3's grouped top-k (vLLM's ``grouped_topk`` with
    ``scoring_func="sigmoid"``, the only scoring implemented, and the default here):
    scores ``sigmoid(gating_output) + e_score_correction_bias`` (float32 ``[E]`` or
    None) choose; the ``E`` experts split into ``num_expert_group`` groups (1..32)
    ranked by the sum of their two best scores; the ``topk_group`` best groups are kept
    and the ``topk`` best experts among them chosen. Weights are the sigmoid scores,
    rescaled to sum to 1 when ``renormalize``, times ``routed_scaling_factor``.
    Returns ``(topk_weights, topk_ids)``, float32 and int32 ``[T, topk]``."""
    if scoring_func != "sigmoid":
        raise ValueError(f"`scoring_func` is {scoring_func!r}; only 'sigmoid' (DeepSeek-V3's) is implemented")
    topk = _count(topk, "topk")
    n_group = _count(num_expert_group, "num_expert_group")
    topk_group = _count(topk_group, "topk_group")
    scale = _finite(routed_scaling_factor, "routed_scaling_factor")
    ba = None
    if e_score_correction_bias is not None:
        ba = _read(e_score_correction_bias, "e_score_correction_bias")
    ga, tokens, experts, stream = _gating(gating_output, hidden_states, topk, stream, [ba] if ba else [])
    if n_group > 32 or experts % n_group:
        raise ValueError(f"`num_expert_group` is {n_group}; 1..32 groups that divide the {experts} experts")
    if topk_group > n_group or topk > topk_group * (experts // n_group):
        raise ValueError(
            f"`topk_group` is {topk_group}: at most {n_group} groups, holding at least topk = {topk} experts"
        )
    if ba is not None:
        _contiguous(ba, "e_score_correction_bias", 1, ("f32",))
        if ba.shape != (experts,):
            raise ValueError(f"`e_score_correction_bias` must be [E] = [{experts}], got shape {list(ba.shape)}")
    weights, ids = _new_routing(tokens, topk, ga)
    if tokens == 0:
        return weights, ids
    wa, ia = _read(weights, "topk_weights"), _read(ids, "topk_ids")
    device, stream = _arrays.launch([wa, ia, ga, ba], stream)
    _named(_ext.grouped_topk, _ROUTING_NAMES, ia.ptr, wa.ptr, ga.ptr, ba.ptr if ba else 0, tokens, experts,
           topk, n_group, topk_group, bool(renormalize), scale, _CODE[ga.dtype], device, stream)
    return weights, ids


# ---- warm-up --------------------------------------------------------------------------

_OPS = {
    "softmax": _ext.OP_SOFTMAX,
    "log_softmax": _ext.OP_LOG_SOFTMAX,
    "rmsnorm": _ext.OP_RMSNORM,
    "fused_add_rmsnorm": _ext.OP_FUSED_ADD_RMSNORM,
}
_ROUTINGS = {None: _ext.ROUTING_NONE, "softmax": _ext.ROUTING_SOFTMAX, "grouped": _ext.ROUTING_GROUPED}


def _dtype_name(dtype, name):
    d = _arrays._TORCH_DTYPES.get(dtype) if not isinstance(dtype, str) else None
    d = d if d in _CODE else _DTYPE_NAMES.get(str(dtype))
    if d is None:
        raise ValueError(f"`{name}` is {dtype!r}; expected {_SUPPORTED} (or 'bf16', 'f16', 'f32')")
    return d


def _device_index(device):
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)  # a torch.device, or None
    if index is None:
        index = torch.cuda.current_device() if torch is not None else 0
    return index


def warm(shapes, device=None, *, stream=None):
    """Resolves and compiles shapes ahead of serving; returns what each resolved to.

    ``shapes`` is an iterable of tuples, one per shape a model runs (each batch size a
    CUDA graph will capture):

    - ``(op, dtype, rows, cols)`` with ``op`` one of ``"softmax"``, ``"log_softmax"``,
      ``"rmsnorm"``, ``"fused_add_rmsnorm"``, ``rows`` the batch (tokens) and ``cols``
      the row length;
    - ``("gemm", dtype, m, n, k)``, or with a sixth item ``"nn"`` for a ``b`` given as
      a transposed view (the default ``"nt"`` is ``nn.Linear``'s layout);
    - ``("fused_moe", dtype, tokens, experts, n, k, topk)`` (``n`` the intermediate
      size, ``k`` the hidden size), optionally followed by the routing kernel to
      prepare, ``"softmax"`` (:func:`fused_topk`) or ``"grouped"``
      (:func:`grouped_topk`), and the router logits' dtype (default: ``dtype``).

    ``dtype`` is a torch dtype or ``"bf16"``/``"f16"``/``"f32"``. After this, launches
    of these shapes compile nothing. Returns one dict per shape, in order:
    ``{"kernel", "config", "source"}`` (``source``: ``table-exact``,
    ``table-nearest``, ``default``, ...), as ``kernels plan`` prints them. Blocks
    while compiling; the GIL is released meanwhile. The kinds are warmed in turn (row
    kernels, GEMM, MoE), each checking all its shapes before it compiles.
    """
    rows, gemms, moes = [], [], []
    order = []
    for i, shape in enumerate(shapes):
        try:
            op = shape[0]
        except (TypeError, IndexError):
            raise ValueError(f"`shapes[{i}]` must be a tuple starting with the op, got {shape!r}") from None
        at = f"shapes[{i}]"
        if op == "gemm":
            if len(shape) not in (5, 6):
                raise ValueError(f"`{at}` must be ('gemm', dtype, m, n, k[, layout]), got {shape!r}")
            layout = shape[5] if len(shape) == 6 else "nt"
            if layout not in _LAYOUTS:
                raise ValueError(f"`{at}.layout` is {layout!r}; expected 'nt' or 'nn'")
            d = _CODE[_dtype_name(shape[1], f"{at}.dtype")]
            gemms.append((d, _LAYOUTS[layout], int(shape[2]), int(shape[3]), int(shape[4])))
            order.append((gemms, len(gemms) - 1))
        elif op == "fused_moe":
            if len(shape) not in (7, 8, 9):
                raise ValueError(
                    f"`{at}` must be ('fused_moe', dtype, tokens, experts, n, k, topk[, routing[, logits_dtype]]), "
                    f"got {shape!r}"
                )
            routing = shape[7] if len(shape) > 7 else None
            if routing not in _ROUTINGS:
                raise ValueError(f"`{at}.routing` is {routing!r}; expected None, 'softmax' or 'grouped'")
            d = _CODE[_dtype_name(shape[1], f"{at}.dtype")]
            logits = _CODE[_dtype_name(shape[8], f"{at}.logits_dtype")] if len(shape) > 8 else d
            tokens, experts, n, k, topk = (int(v) for v in shape[2:7])
            moes.append((d, _ROUTINGS[routing], logits, topk, tokens, experts, n, k))
            order.append((moes, len(moes) - 1))
        else:
            try:
                op, dtype, r, c = shape
            except (TypeError, ValueError):
                raise ValueError(f"`{at}` must be (op, dtype, rows, cols), got {shape!r}") from None
            if op not in _OPS:
                raise ValueError(f"`{at}.op` is {op!r}; expected one of {', '.join(_OPS)}, gemm, fused_moe")
            rows.append((_OPS[op], _CODE[_dtype_name(dtype, f"{at}.dtype")], int(r), int(c)))
            order.append((rows, len(rows) - 1))
    device = _device_index(device)
    if stream is None:
        stream = _arrays.torch_stream(device) if torch is not None else 0
    done = {}
    for group, call in ((rows, _ext.warm), (gemms, _ext.warm_gemm), (moes, _ext.warm_moe)):
        if group:
            try:
                done[id(group)] = call(group, device, stream)
            except ValueError as e:
                raise ValueError(_renumber(str(e), order, group)) from None
    return [
        dict(zip(("kernel", "config", "source"), done[id(group)][j]))
        for group, j in order
    ]


def _renumber(message, order, group):
    """A message naming `shapes[j]` of one kind's list, naming the caller's index."""


    def at(m):
        j = int(m.group(1))
        i = next((i for i, (g, k) in enumerate(order) if g is group and k == j), j)
        return f"shapes[{i}]"

    return re.sub(r"shapes\[(\d+)\]", at, message)
