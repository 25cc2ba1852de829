"""Tuned softmax and RMSNorm CUDA kernels for torch-based serving engines.

Each op takes torch tensors, checks them (device, dtype, shape, strides, overlap),
and launches on the tensors' device and on torch's current stream, so it orders with
the surrounding torch work and can be captured in ``torch.cuda.graph`` once its
shapes are warmed (:func:`warm`). Launch configurations come from tuning tables
baked into the library; nothing is searched at run time.

    import torch, llm_kernels
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    llm_kernels.warm([("rmsnorm", torch.bfloat16, 16, 4096)])
    y = llm_kernels.rmsnorm(x, w, eps=1e-6)

The calling conventions are sgl_kernel's (``rmsnorm(input, weight, eps, out)``,
``fused_add_rmsnorm(input, residual, weight, eps)`` in place) with vLLM's custom-op
spellings beside them (``rms_norm(out, input, weight, epsilon)``,
``fused_add_rms_norm(input, residual, weight, epsilon)``).

Operands are ``[..., cols]`` tensors with unit stride in the last dimension whose
leading dimensions flatten into rows of one stride (slices of wider rows are fine).
A bad argument raises ``TypeError`` or ``ValueError`` naming it; a device, compiler
or driver failure raises :class:`KernelsError`. torch is imported if installed; it
is not needed to import this package.
"""

import math

from . import _ext
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
    "warm",
]

try:
    import torch
except ImportError:  # the argument checks and the extension work without it
    torch = None

# dtype -> the extension's code. Keys are torch dtypes (when torch is installed) and
# their names, so tensor-like objects whose dtype prints as "torch.bfloat16" work too.
_DTYPES = {"torch.bfloat16": _ext.BF16, "torch.float16": _ext.F16, "torch.float32": _ext.F32}
_DTYPE_NAMES = {
    "bf16": _ext.BF16,
    "bfloat16": _ext.BF16,
    "f16": _ext.F16,
    "fp16": _ext.F16,
    "float16": _ext.F16,
    "half": _ext.F16,
    "f32": _ext.F32,
    "fp32": _ext.F32,
    "float32": _ext.F32,
    "float": _ext.F32,
}
if torch is not None:
    _DTYPES.update({torch.bfloat16: _ext.BF16, torch.float16: _ext.F16, torch.float32: _ext.F32})
_ELEMENT_SIZE = {_ext.BF16: 2, _ext.F16: 2, _ext.F32: 4}
_SUPPORTED = "torch.bfloat16, torch.float16 or torch.float32"

# torch's current raw stream handle for a device index, without building a Stream
# object (the private call is what torch's own compiled code uses; the public one is
# the fallback).
_raw_stream = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)


def _current_stream(index):
    if _raw_stream is not None:
        return _raw_stream(index)
    if torch is None:
        raise ValueError("`stream`: torch is not installed, so its current stream is unknown; pass stream=")
    return torch.cuda.current_stream(index).cuda_stream


def _rows(t, name):
    """(address, rows, cols, row stride, dtype code, device index) of a [..., cols] operand."""
    try:
        device, dtype, shape, strides = t.device, t.dtype, tuple(t.shape), tuple(t.stride())
    except (AttributeError, TypeError):
        raise TypeError(f"`{name}` must be a torch.Tensor, got {type(t).__name__}") from None
    if device.type != "cuda":
        raise ValueError(f"`{name}` must be on a CUDA device, got {device}")
    code = _DTYPES.get(dtype)
    if code is None:
        code = _DTYPES.get(str(dtype))
        if code is None:
            raise ValueError(f"`{name}` has dtype {dtype}; expected {_SUPPORTED}")
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
        return t.data_ptr(), 0, cols, cols, code, device.index
    if rows > 1 and stride < cols:
        raise ValueError(f"`{name}` has row stride {stride}, less than its {cols} columns: its rows overlap")
    return t.data_ptr(), rows, cols, stride, code, device.index


def _like(a, a_name, b, b_name):
    """`b` matches `a` (an operand from _rows) in shape, dtype and device; names `b` if not."""
    if b[1:3] != a[1:3]:
        raise ValueError(f"`{b_name}` is [{b[1]}, {b[2]}] as rows x cols but `{a_name}` is [{a[1]}, {a[2]}]")
    if b[4] != a[4]:
        raise ValueError(f"`{b_name}` has another dtype than `{a_name}`; every operand needs one dtype")
    if b[5] != a[5]:
        raise ValueError(f"`{b_name}` is on cuda:{b[5]} but `{a_name}` is on cuda:{a[5]}")


def _span(op):
    ptr, rows, cols, stride, code, _ = op
    return ptr, ptr + ((rows - 1) * stride + cols) * _ELEMENT_SIZE[code]


def _disjoint(a, a_name, b, b_name):
    (a0, a1), (b0, b1) = _span(a), _span(b)
    if a0 < b1 and b0 < a1:
        raise ValueError(f"`{b_name}` overlaps `{a_name}`; the kernel needs them disjoint")


def _weight(w, x):
    op = _rows(w, "weight")
    if len(w.shape) != 1 or op[2] != x[2]:
        raise ValueError(f"`weight` must be a vector of {x[2]} elements (the columns), got shape {list(w.shape)}")
    if op[4] != x[4]:
        raise ValueError("`weight` has another dtype than `input`; every operand needs one dtype")
    if op[5] != x[5]:
        raise ValueError(f"`weight` is on cuda:{op[5]} but `input` is on cuda:{x[5]}")
    return op


def _positive(value, name):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}") from None
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"`{name}` must be finite and > 0, got {value}")
    return v


def _finite(value, name):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must be a number, got {type(value).__name__}") from None
    if not math.isfinite(v):
        raise ValueError(f"`{name}` must be finite, got {value}")
    return v


def _output(out, input):
    if out is not None:
        return out
    if torch is None:
        raise ValueError("`out`: torch is not installed, so no output can be allocated; pass out=")
    return torch.empty_like(input)


def _softmax(log, input, out, scale, stream):
    x = _rows(input, "input")
    scale = _finite(scale, "scale")
    out = _output(out, input)
    y = _rows(out, "out")
    _like(x, "input", y, "out")
    if x[1] == 0:
        return out
    if not (y[0] == x[0] and y[3] == x[3]):  # in place (same rows) is allowed
        _disjoint(x, "input", y, "out")
    if stream is None:
        stream = _current_stream(x[5])
    _ext.softmax(log, y[0], y[3], x[0], x[3], x[1], x[2], x[4], scale, x[5], stream)
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
    x = _rows(input, "input")
    w = _weight(weight, x)
    eps = _positive(eps, "eps")
    out = _output(out, input)
    y = _rows(out, "out")
    _like(x, "input", y, "out")
    if x[1] == 0:
        return out
    _disjoint(x, "input", y, "out")
    _disjoint(w, "weight", y, "out")
    if stream is None:
        stream = _current_stream(x[5])
    _ext.rmsnorm(y[0], y[3], x[0], x[3], w[0], x[1], x[2], x[4], eps, x[5], stream)
    return out


def fused_add_rmsnorm(input, residual, weight, eps=1e-6, *, stream=None):
    """In place: ``residual += input; input = rmsnorm(residual) * weight``.

    sgl_kernel's ``fused_add_rmsnorm``; returns None. ``input`` and ``residual`` have
    one shape and must not overlap each other or ``weight``.
    """
    x = _rows(input, "input")
    r = _rows(residual, "residual")
    _like(x, "input", r, "residual")
    w = _weight(weight, x)
    eps = _positive(eps, "eps")
    if x[1] == 0:
        return None
    _disjoint(x, "input", r, "residual")
    _disjoint(x, "input", w, "weight")
    _disjoint(r, "residual", w, "weight")
    if stream is None:
        stream = _current_stream(x[5])
    _ext.fused_add_rmsnorm(x[0], x[3], r[0], r[3], w[0], x[1], x[2], x[4], eps, x[5], stream)
    return None


def rms_norm(out, input, weight, epsilon, *, stream=None):
    """vLLM's ``rms_norm(out, input, weight, epsilon)``: :func:`rmsnorm` into ``out``."""
    rmsnorm(input, weight, epsilon, out, stream=stream)


def fused_add_rms_norm(input, residual, weight, epsilon, *, stream=None):
    """vLLM's ``fused_add_rms_norm(input, residual, weight, epsilon)``: :func:`fused_add_rmsnorm`."""
    fused_add_rmsnorm(input, residual, weight, epsilon, stream=stream)


_OPS = {
    "softmax": _ext.OP_SOFTMAX,
    "log_softmax": _ext.OP_LOG_SOFTMAX,
    "rmsnorm": _ext.OP_RMSNORM,
    "fused_add_rmsnorm": _ext.OP_FUSED_ADD_RMSNORM,
}


def _dtype_code(dtype, name):
    code = _DTYPES.get(dtype)
    if code is None:
        code = _DTYPES.get(str(dtype), _DTYPE_NAMES.get(str(dtype)))
    if code is None:
        raise ValueError(f"`{name}` is {dtype!r}; expected {_SUPPORTED} (or 'bf16', 'f16', 'f32')")
    return code


def warm(shapes, device=None, *, stream=None):
    """Resolves and compiles shapes ahead of serving; returns what each resolved to.

    ``shapes`` is an iterable of ``(op, dtype, rows, cols)`` with ``op`` one of
    ``"softmax"``, ``"log_softmax"``, ``"rmsnorm"``, ``"fused_add_rmsnorm"``, ``dtype``
    a torch dtype or ``"bf16"``/``"f16"``/``"f32"``, ``rows`` the batch (tokens) and
    ``cols`` the row length. Warm every batch size a CUDA graph will capture: after
    this, launches of these shapes compile nothing. Returns one dict per shape:
    ``{"kernel", "config", "source"}`` (``source``: ``table-exact``, ``table-nearest``,
    ``default``, ...), as ``kernels plan`` prints them. Blocks while compiling; the
    GIL is released meanwhile.
    """
    codes = []
    for i, shape in enumerate(shapes):
        try:
            op, dtype, rows, cols = shape
        except (TypeError, ValueError):
            raise ValueError(f"`shapes[{i}]` must be (op, dtype, rows, cols), got {shape!r}") from None
        if op not in _OPS:
            raise ValueError(f"`shapes[{i}].op` is {op!r}; expected one of {', '.join(_OPS)}")
        codes.append((_OPS[op], _dtype_code(dtype, f"shapes[{i}].dtype"), int(rows), int(cols)))
    if not isinstance(device, int):
        index = getattr(device, "index", None)  # a torch.device, or None
        if index is None:
            index = torch.cuda.current_device() if torch is not None else 0
        device = index
    if stream is None:
        stream = _current_stream(device) if torch is not None else 0
    return [
        {"kernel": kernel, "config": config, "source": source}
        for kernel, config, source in _ext.warm(codes, device, stream)
    ]
