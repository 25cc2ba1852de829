"""Operands from torch, the CUDA array interface (v2, v3) or DLPack, read into one
form (address, shape, strides in elements, dtype, device), and the launch stream and
device of a call with the stream rules of each protocol:

- the launch stream is ``stream=`` when given, else torch's current stream on the
  operands' device when torch is installed, else the ``stream`` of the first CUDA
  array interface v3 operand that names one, else the legacy default stream;
- a DLPack operand is exported with ``__dlpack__(stream=<launch stream>)``, so its
  producer orders its pending work before the launch (the consumer's side of the
  protocol: 1 names the legacy default stream);
- a CUDA array interface operand whose ``stream`` differs from the launch stream is
  waited for on the device (an event recorded on its stream), as v3 asks;
- an operand is read once, before any check: its address is what is launched on.
"""

from . import _ext

try:
    import torch
except ImportError:
    torch = None

TORCH, CAI, DLPACK = "torch", "cuda_array_interface", "dlpack"

# Element types the package handles, by name, with their sizes in bytes.
SIZE = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "u8": 1}
_TORCH_DTYPES = {
    "torch.bfloat16": "bf16",
    "torch.float16": "f16",
    "torch.float32": "f32",
    "torch.int32": "i32",
    "torch.uint8": "u8",
}
if torch is not None:
    _TORCH_DTYPES.update(
        {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32", torch.int32: "i32", torch.uint8: "u8"}
    )
# CUDA array interface typestr without its byte-order character (no bf16 exists there).
_CAI_DTYPES = {"f2": "f16", "f4": "f32", "i4": "i32", "u1": "u8"}
# DLPack (code, bits, lanes): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4.
_DLPACK_DTYPES = {(2, 16, 1): "f16", (2, 32, 1): "f32", (4, 16, 1): "bf16", (0, 32, 1): "i32", (1, 8, 1): "u8"}
# DLPack device types whose memory CUDA kernels address: kDLCUDA, kDLCUDAManaged.
_DLPACK_CUDA = (2, 13)


class Array:
    """One operand: ``ptr``, ``shape``, ``strides`` (elements), ``dtype`` (a name of
    :data:`SIZE`, or what the source calls an unsupported type), ``device`` (None
    until known), ``readonly``, and for a CUDA array interface operand the ``stream``
    its producer named (None: no synchronisation needed)."""

    __slots__ = ("name", "kind", "obj", "ptr", "shape", "strides", "dtype", "device", "readonly", "stream", "capsule")

    def __init__(self, name, kind, obj):
        self.name, self.kind, self.obj = name, kind, obj
        self.ptr = self.shape = self.strides = self.dtype = self.device = self.stream = self.capsule = None
        self.readonly = False


def _contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.insert(0, step)
        step *= size
    return tuple(strides)


def read(obj, name):
    """The operand `obj` as an :class:`Array` (a DLPack one is exported by :func:`bind`)."""
    data_ptr = getattr(obj, "data_ptr", None)
    if data_ptr is not None and hasattr(obj, "stride"):  # torch, and tensors that quack like it
        a = Array(name, TORCH, obj)
        device = obj.device
        if device.type != "cuda":
            raise ValueError(f"`{name}` must be on a CUDA device, got {device}")
        a.ptr, a.shape, a.strides, a.device = data_ptr(), tuple(obj.shape), tuple(obj.stride()), device.index
        a.dtype = _TORCH_DTYPES.get(obj.dtype) or _TORCH_DTYPES.get(str(obj.dtype)) or str(obj.dtype)
        return a
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        a = Array(name, DLPACK, obj)
        device_type, device_id = obj.__dlpack_device__()
        if int(device_type) not in _DLPACK_CUDA:
            raise ValueError(f"`{name}` must be on a CUDA device, got DLPack device type {int(device_type)}")
        a.device = int(device_id)
        return a
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(Array(name, CAI, obj), cai)
    raise TypeError(
        f"`{name}` must be a CUDA tensor (a torch.Tensor, or an object with __cuda_array_interface__ "
        f"or __dlpack__), got {type(obj).__name__}"
    )


def _from_cai(a, cai):
    name = a.name
    try:
        shape = tuple(int(s) for s in cai["shape"])
        typestr = str(cai["typestr"])
        ptr, readonly = cai["data"]
        version = int(cai.get("version", 0))
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"`{name}` has a malformed __cuda_array_interface__ (shape, typestr, data)") from None
    if cai.get("mask") is not None:
        raise ValueError(f"`{name}` is a masked array; the kernels take unmasked ones")
    if typestr[:1] == ">":
        raise ValueError(f"`{name}` is big-endian ({typestr})")
    dtype = _CAI_DTYPES.get(typestr.lstrip("<=|"), typestr)
    a.ptr, a.shape, a.dtype, a.readonly = int(ptr or 0), shape, dtype, bool(readonly)
    strides = cai.get("strides")
    if strides is None:
        a.strides = _contiguous_strides(shape)
    else:
        size = SIZE.get(dtype, 1)
        if any(int(s) % size for s in strides):
            raise ValueError(f"`{name}` has byte strides {list(strides)} that are not whole {typestr} elements")
        a.strides = tuple(int(s) // size for s in strides)
    stream = cai.get("stream") if version >= 3 else None
    if stream is not None:
        stream = int(stream)
        if stream == 0:
            raise ValueError(f"`{name}` names stream 0, which the CUDA array interface disallows (ambiguous)")
        a.stream = 0 if stream == 1 else stream  # 1: the legacy default stream, our handle 0
    return a


def _export(a, stream):
    # DLPack numbers the legacy default stream 1 (0 is ambiguous there).
    dl_stream = 1 if stream == 0 else stream
    try:
        capsule = a.obj.__dlpack__(stream=dl_stream, max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0's keyword
        capsule = a.obj.__dlpack__(stream=dl_stream)
    ptr, shape, strides, dtype, device, readonly = _ext.dlpack_info(capsule, a.name)
    a.capsule = capsule  # keeps the producer's tensor alive until the launch
    a.ptr, a.shape, a.readonly = ptr, tuple(shape), readonly
    a.strides = _contiguous_strides(a.shape) if strides is None else tuple(strides)
    a.dtype = _DLPACK_DTYPES.get(tuple(dtype), f"DLPack type {tuple(dtype)}")
    if device[0] not in _DLPACK_CUDA or device[1] != a.device:
        raise ValueError(f"`{a.name}`'s capsule is on DLPack device {tuple(device)}, not the one it reported")


_raw_stream = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)


def torch_stream(index):
    """torch's current raw stream handle on device `index`."""
    if _raw_stream is not None:
        return _raw_stream(index)
    return torch.cuda.current_stream(index).cuda_stream


def device_of(arrays):
    """The device of the call: the first known one, else that of the first CUDA array
    interface operand's address (which asks the driver)."""
    for a in arrays:
        if a is not None and a.device is not None:
            return a.device
    for a in arrays:
        if a is not None and a.kind == CAI:
            a.device = _ext.pointer_device(a.name, a.ptr)
            return a.device
    raise ValueError("no operand says which device to run on")


def default_stream(arrays):
    """The launch stream when none was given (the rule in this module's docs)."""
    if torch is not None:
        return torch_stream(device_of(arrays))
    for a in arrays:
        if a is not None and a.stream is not None:
            return a.stream
    return 0


def bind(arrays, stream):
    """Exports the DLPack operands on the launch stream, deciding it if needed; returns
    the stream (still None where only CUDA array interface or torch operands are and
    none was given: :func:`launch` decides it, after the checks)."""
    if any(a is not None and a.kind == DLPACK for a in arrays):
        if stream is None:
            stream = default_stream(arrays)
        for a in arrays:
            if a is not None and a.kind == DLPACK:
                _export(a, stream)
    return stream


def check_devices(arrays):
    """Every operand whose device is known on the first one's; names the first that is
    not (no driver call: CUDA array interface operands are checked by :func:`launch`)."""
    device = None
    for a in arrays:
        if a is None or a.device is None:
            continue
        if device is None:
            device = a
        elif a.device != device.device:
            raise ValueError(f"`{a.name}` is on cuda:{a.device} but `{device.name}` is on cuda:{device.device}")


def launch(arrays, stream):
    """``(device, stream)`` to launch on, after the checks: every operand on one device
    (the first differing one is named), and the launch stream waiting for each CUDA
    array interface producer stream that differs from it."""
    device = device_of(arrays)
    for a in arrays:
        if a is None:
            continue
        if a.device is None:  # a CUDA array interface operand
            a.device = _ext.pointer_device(a.name, a.ptr)
        if a.device != device:
            raise ValueError(f"`{a.name}` is on cuda:{a.device} but the other operands are on cuda:{device}")
    if stream is None:
        stream = default_stream(arrays)
    waits = sorted({a.stream for a in arrays if a is not None and a.stream is not None and a.stream != stream})
    if waits:
        _ext.stream_wait(device, stream, waits)
    return device, stream
