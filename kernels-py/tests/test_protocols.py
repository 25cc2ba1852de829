"""GPU-free tests of operands from the CUDA array interface (v2, v3) and DLPack: how
they are read (address, shape, strides, dtype, read-only), their argument errors, and
the stream rules (which stream a call launches on, what DLPack producers are told,
which producer streams the launch waits for). The extension's launch and driver
calls are replaced by a recorder, so nothing reaches a device; DLPack capsules are
built with ctypes, as a producer would."""

import ctypes
import unittest

import llm_kernels
from llm_kernels import _arrays, _ext

MB = 1 << 20
X, W, Y = 0x7F00_0000_0000, 0x7F00_0000_0000 + 64 * MB, 0x7F00_0000_0000 + 128 * MB


class Cai:
    """An array exporting only __cuda_array_interface__."""

    def __init__(self, shape, typestr="<f4", ptr=X, strides=None, stream=None, version=3, readonly=False, **extra):
        self.__cuda_array_interface__ = dict(
            shape=tuple(shape), typestr=typestr, data=(ptr, readonly), strides=strides, version=version, **extra
        )
        if version >= 3:
            self.__cuda_array_interface__["stream"] = stream


# ---- DLPack capsules, as a producer builds them ----


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
VERSIONED, LEGACY = b"dltensor_versioned", b"dltensor"
BF16, F32 = (4, 16, 1), (2, 32, 1)


class Dl:
    """An array exporting only DLPack; records the stream each export was asked for."""

    def __init__(self, shape, dtype=BF16, ptr=X, strides=None, device=(2, 0), offset=0, versioned=True, readonly=False):
        self.shape, self.dtype, self.ptr, self.strides = shape, dtype, ptr, strides
        self.device, self.offset, self.versioned, self.readonly = device, offset, versioned, readonly
        self.streams = []
        self._keep = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None):
        if max_version is not None and not self.versioned:
            raise TypeError("an old producer: no max_version")
        self.streams.append(stream)
        n = len(self.shape)
        shape = (ctypes.c_int64 * n)(*self.shape)
        strides = (ctypes.c_int64 * n)(*self.strides) if self.strides is not None else None
        t = DLTensor(
            self.ptr,
            DLDevice(*self.device),
            n,
            DLDataType(*self.dtype),
            ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)),
            ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64)) if strides is not None else None,
            self.offset,
        )
        if self.versioned:
            m = DLManagedTensorVersioned(1, 0, None, None, 1 if self.readonly else 0, t)
            name = VERSIONED
        else:
            m = DLManagedTensor(t, None, None)
            name = LEGACY
        self._keep += [shape, strides, m]
        return _capsule_new(ctypes.addressof(m), name, None)


class Recorder:
    """Stands in for the extension: records launches and stream waits, places every
    address on device 0, and passes the capsule reader through."""

    def __init__(self):
        self.calls = []
        self.dlpack_info = _ext.dlpack_info

    def pointer_device(self, name, ptr):
        return 0

    def stream_wait(self, device, stream, producers):
        self.calls.append(("wait", device, stream, list(producers)))

    def rmsnorm(self, *args):
        self.calls.append(("rmsnorm",) + args)

    def __getattr__(self, name):
        return getattr(_ext, name)


class Protocols(unittest.TestCase):
    def setUp(self):
        self.rec = Recorder()
        self._saved = (_arrays._ext, llm_kernels._ext)
        _arrays._ext = llm_kernels._ext = self.rec

    def tearDown(self):
        _arrays._ext, llm_kernels._ext = self._saved

    def launched(self):
        return [c for c in self.rec.calls if c[0] == "rmsnorm"][-1]

    def waits(self):
        return [c for c in self.rec.calls if c[0] == "wait"]

    # rmsnorm's extension arguments: y, y_stride, x, x_stride, w, rows, cols, dtype, eps, device, stream

    def test_cai_operands_are_read_with_byte_strides(self):
        x = Cai((4, 1000), strides=(4 * 1024, 4))  # rows 1024 elements apart
        w, y = Cai((1000,), ptr=W), Cai((4, 1000), ptr=Y)
        llm_kernels.rmsnorm(x, w, out=y, stream=7)
        self.assertEqual(self.launched()[1:], (Y, 1000, X, 1024, W, 4, 1000, _ext.F32, 1e-6, 0, 7))

    def test_cai_stream_rules(self):
        x = Cai((4, 64), stream=1234)
        w = Cai((64,), ptr=W, stream=None)  # no synchronisation needed
        y = Cai((4, 64), ptr=Y, stream=1)  # the legacy default stream
        llm_kernels.rmsnorm(x, w, out=y, stream=77)
        self.assertEqual(self.launched()[-1], 77)
        self.assertEqual(self.waits(), [("wait", 0, 77, [0, 1234])])
        if llm_kernels.torch is None:
            # No stream given and no torch: the first producer stream named, waiting
            # for the others.
            self.rec.calls.clear()
            llm_kernels.rmsnorm(x, w, out=y)
            self.assertEqual(self.launched()[-1], 1234)
            self.assertEqual(self.waits(), [("wait", 0, 1234, [0])])
        # Version 2 carries no stream: nothing to wait for.
        self.rec.calls.clear()
        llm_kernels.rmsnorm(Cai((4, 64), version=2), Cai((64,), ptr=W, version=2), out=Cai((4, 64), ptr=Y, version=2), stream=5)
        self.assertEqual(self.waits(), [])

    def test_cai_argument_errors(self):
        w, y = Cai((64,), ptr=W), Cai((4, 64), ptr=Y)
        cases = [
            (Cai((4, 64), typestr="<f8"), "<f8"),
            (Cai((4, 64), typestr=">f4"), "big-endian"),
            (Cai((4, 64), strides=(4, 256)), "unit stride"),
            (Cai((4, 64), strides=(258, 2)), "whole"),
            (Cai((4, 64), stream=0), "stream 0"),
            (Cai((4, 64), mask=(1, False)), "masked"),
        ]
        for x, why in cases:
            with self.assertRaises(ValueError, msg=why) as cm:
                llm_kernels.rmsnorm(x, w, out=y, stream=0)
            self.assertIn("`input`", str(cm.exception))
            self.assertIn(why, str(cm.exception))
        with self.assertRaisesRegex(ValueError, "`out`.*read-only"):
            llm_kernels.rmsnorm(Cai((4, 64)), w, out=Cai((4, 64), ptr=Y, readonly=True), stream=0)
        with self.assertRaisesRegex(ValueError, "`input`.*malformed"):
            bad = Cai((4, 64))
            del bad.__cuda_array_interface__["data"]
            llm_kernels.rmsnorm(bad, w, out=y, stream=0)

    def test_dlpack_operands_are_exported_on_the_launch_stream(self):
        x = Dl((4, 1000), strides=(1024, 1), offset=64)
        w, y = Dl((1000,), ptr=W), Dl((4, 1000), ptr=Y, versioned=False)  # y: a DLPack 0.x producer
        llm_kernels.rmsnorm(x, w, out=y, stream=77)
        self.assertEqual(self.launched()[1:6], (Y, 1000, X + 64, 1024, W))
        self.assertEqual(self.launched()[8], _ext.BF16)
        self.assertEqual((x.streams, w.streams, y.streams), ([77], [77], [77]))
        # The legacy default stream (handle 0) is DLPack's 1.
        llm_kernels.rmsnorm(x, w, out=y, stream=0)
        self.assertEqual(x.streams[-1], 1)
        self.assertEqual(self.launched()[-1], 0)
        self.assertEqual(self.waits(), [])

    def test_dlpack_argument_errors(self):
        w, y = Dl((64,), ptr=W), Dl((4, 64), ptr=Y)
        with self.assertRaisesRegex(ValueError, "`input`.*CUDA device.*1"):
            llm_kernels.rmsnorm(Dl((4, 64), device=(1, 0)), w, out=y, stream=0)
        with self.assertRaisesRegex(ValueError, "`input`.*DLPack type"):
            llm_kernels.rmsnorm(Dl((4, 64), dtype=(0, 64, 1)), w, out=y, stream=0)
        with self.assertRaisesRegex(ValueError, "`weight`.*another dtype"):
            llm_kernels.rmsnorm(Dl((4, 64)), Dl((64,), dtype=F32, ptr=W), out=y, stream=0)
        with self.assertRaisesRegex(ValueError, "`out`.*read-only"):
            llm_kernels.rmsnorm(Dl((4, 64)), w, out=Dl((4, 64), ptr=Y, readonly=True), stream=0)
        with self.assertRaisesRegex(ValueError, "`input`.*cuda:1"):
            llm_kernels.rmsnorm(Dl((4, 64), device=(2, 1)), w, out=y, stream=0)

    def test_a_capsule_reader_refuses_what_is_not_one(self):
        with self.assertRaisesRegex(ValueError, "`x`.*PyCapsule"):
            _ext.dlpack_info(object(), "x")
        used = _capsule_new(ctypes.addressof(ctypes.c_int64(0)), b"used_dltensor", None)
        with self.assertRaisesRegex(ValueError, "`x`.*unconsumed"):
            _ext.dlpack_info(used, "x")

    def test_mixed_protocols_in_one_call(self):
        x = Dl((4, 64))
        w = Cai((64,), typestr="<V2", ptr=W)  # no bf16 in the CUDA array interface
        with self.assertRaisesRegex(ValueError, "`weight`"):
            llm_kernels.rmsnorm(x, w, out=Dl((4, 64), ptr=Y), stream=3)
        x32, w32 = Dl((4, 64), dtype=F32), Cai((64,), ptr=W, stream=99)
        llm_kernels.rmsnorm(x32, w32, out=Cai((4, 64), ptr=Y), stream=3)
        self.assertEqual(x32.streams, [3])
        self.assertEqual(self.waits(), [("wait", 0, 3, [99])])


if __name__ == "__main__":
    unittest.main()
