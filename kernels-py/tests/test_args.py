"""GPU-free tests of the package: import, argument checking, and the no-device error.

They need neither torch nor a GPU: operands are tensor-like stand-ins with the
attributes the package reads (device, dtype, shape, stride(), data_ptr()), at
addresses that are never dereferenced, because every call here fails its checks or
stops at opening the device. The one test that passes valid stand-ins to the
extension runs only where no CUDA driver loads, so no kernel is ever launched on them.
Run: python3 -m pytest kernels-py/tests (or python3 -m unittest discover kernels-py/tests).
"""

import unittest

import llm_kernels
from llm_kernels import _ext


class Device:
    def __init__(self, type="cuda", index=0):
        self.type, self.index = type, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class Tensor:
    """A tensor-like stand-in: row-major strides unless given."""

    def __init__(self, shape, dtype="torch.bfloat16", device=None, ptr=0x7F00_0000_0000, strides=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device or Device()
        self._ptr = ptr
        if strides is None:
            strides, step = [], 1
            for size in reversed(self.shape):
                strides.insert(0, step)
                step *= size
        self._strides = tuple(strides)

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr


MB = 1 << 20


def norm_operands(rows=4, cols=4096):
    x = Tensor((rows, cols), ptr=0x7F00_0000_0000)
    w = Tensor((cols,), ptr=0x7F00_0000_0000 + 64 * MB)
    y = Tensor((rows, cols), ptr=0x7F00_0000_0000 + 128 * MB)
    return x, w, y


def no_driver():
    """The extension's own answer: whether opening device 0 fails for want of a driver."""
    try:
        _ext.warm([], 0, 0)
    except llm_kernels.KernelsError as e:
        return "no CUDA driver" in str(e)
    return False


class Import(unittest.TestCase):
    def test_version_and_constants(self):
        self.assertRegex(llm_kernels.__version__, r"^\d+\.\d+\.\d+")
        self.assertEqual((_ext.BF16, _ext.F16, _ext.F32), (0, 1, 2))
        self.assertEqual(_ext.OP_FUSED_ADD_RMSNORM, 3)
        self.assertTrue(issubclass(llm_kernels.KernelsError, RuntimeError))
        self.assertEqual(llm_kernels.KernelsError.__module__, "llm_kernels")
        for name in llm_kernels.__all__:
            self.assertTrue(hasattr(llm_kernels, name), name)


class Arguments(unittest.TestCase):
    def assertNames(self, exc, name, fn, *args, **kwargs):
        with self.assertRaises(exc) as cm:
            fn(*args, **kwargs)
        self.assertIn(f"`{name}`", str(cm.exception))
        return str(cm.exception)

    def test_not_a_tensor(self):
        _, w, y = norm_operands()
        self.assertNames(TypeError, "input", llm_kernels.rmsnorm, [1.0, 2.0], w, out=y, stream=0)

    def test_cpu_tensor(self):
        x, w, y = norm_operands()
        x.device = Device("cpu", None)
        msg = self.assertNames(ValueError, "input", llm_kernels.rmsnorm, x, w, out=y, stream=0)
        self.assertIn("CUDA", msg)

    def test_unsupported_dtype(self):
        x, w, y = norm_operands()
        x.dtype = "torch.int8"
        msg = self.assertNames(ValueError, "input", llm_kernels.softmax, x, out=y, stream=0)
        self.assertIn("torch.int8", msg)

    def test_mixed_dtypes(self):
        x, w, y = norm_operands()
        w.dtype = "torch.float32"
        self.assertNames(ValueError, "weight", llm_kernels.rmsnorm, x, w, out=y, stream=0)
        y.dtype = "torch.float16"
        self.assertNames(ValueError, "out", llm_kernels.softmax, x, out=y, stream=0)

    def test_mixed_devices(self):
        x, w, y = norm_operands()
        y.device = Device("cuda", 1)
        msg = self.assertNames(ValueError, "out", llm_kernels.rmsnorm, x, w, out=y, stream=0)
        self.assertIn("cuda:1", msg)

    def test_shape_mismatch(self):
        x, w, _ = norm_operands()
        y = Tensor((4, 4000), ptr=0x7F00_0000_0000 + 128 * MB)
        self.assertNames(ValueError, "out", llm_kernels.rmsnorm, x, w, out=y, stream=0)
        r = Tensor((5, 4096), ptr=0x7F00_0000_0000 + 128 * MB)
        self.assertNames(ValueError, "residual", llm_kernels.fused_add_rmsnorm, x, r, w, stream=0)

    def test_weight_length_and_rank(self):
        x, _, y = norm_operands()
        short = Tensor((4095,), ptr=0x7F00_0000_0000 + 64 * MB)
        self.assertNames(ValueError, "weight", llm_kernels.rmsnorm, x, short, out=y, stream=0)
        matrix = Tensor((1, 4096), ptr=0x7F00_0000_0000 + 64 * MB)
        self.assertNames(ValueError, "weight", llm_kernels.rmsnorm, x, matrix, out=y, stream=0)

    def test_last_dimension_not_unit_stride(self):
        x, w, y = norm_operands()
        x._strides = (1, 4)  # a transposed view
        self.assertNames(ValueError, "input", llm_kernels.rmsnorm, x, w, out=y, stream=0)

    def test_leading_dimensions_that_do_not_flatten(self):
        # [2, 3, 4096] whose middle rows are 4096 apart but whose outer step is not 3 rows.
        x = Tensor((2, 3, 4096), strides=(4 * 4096, 4096, 1))
        y = Tensor((2, 3, 4096), ptr=0x7F00_0000_0000 + 128 * MB)
        self.assertNames(ValueError, "input", llm_kernels.softmax, x, out=y, stream=0)

    def test_overlapping_rows(self):
        x = Tensor((4, 4096), strides=(100, 1))
        _, w, y = norm_operands()
        msg = self.assertNames(ValueError, "input", llm_kernels.rmsnorm, x, w, out=y, stream=0)
        self.assertIn("overlap", msg)

    def test_zero_columns(self):
        x = Tensor((4, 0))
        self.assertNames(ValueError, "input", llm_kernels.softmax, x, out=x, stream=0)

    def test_zero_dimensional(self):
        x = Tensor(())
        self.assertNames(ValueError, "input", llm_kernels.softmax, x, out=x, stream=0)

    def test_output_overlaps_input(self):
        x, w, _ = norm_operands()
        y = Tensor((4, 4096), ptr=x.data_ptr() + 2 * 4096)  # one row in
        self.assertNames(ValueError, "out", llm_kernels.rmsnorm, x, w, out=y, stream=0)
        self.assertNames(ValueError, "out", llm_kernels.softmax, x, out=y, stream=0)

    def test_fused_operands_overlap(self):
        x, w, _ = norm_operands()
        self.assertNames(ValueError, "residual", llm_kernels.fused_add_rmsnorm, x, x, w, stream=0)
        on_weight = Tensor((4, 4096), ptr=w.data_ptr())
        self.assertNames(ValueError, "weight", llm_kernels.fused_add_rmsnorm, x, on_weight, w, stream=0)

    def test_eps_and_scale(self):
        x, w, y = norm_operands()
        for eps in (0.0, -1e-6, float("nan"), float("inf")):
            self.assertNames(ValueError, "eps", llm_kernels.rmsnorm, x, w, eps, out=y, stream=0)
        self.assertNames(TypeError, "eps", llm_kernels.fused_add_rmsnorm, x, y, w, "small", stream=0)
        self.assertNames(ValueError, "scale", llm_kernels.softmax, x, out=y, scale=float("inf"), stream=0)

    def test_no_output_without_torch(self):
        if llm_kernels.torch is not None:
            self.skipTest("torch is installed: it allocates the output")
        x, w, _ = norm_operands()
        self.assertNames(ValueError, "out", llm_kernels.rmsnorm, x, w, stream=0)

    def test_zero_rows_launch_nothing(self):
        x = Tensor((0, 4096))
        y = Tensor((0, 4096), ptr=0x7F00_0000_0000 + 128 * MB)
        w = Tensor((4096,), ptr=0x7F00_0000_0000 + 64 * MB)
        self.assertIs(llm_kernels.softmax(x, out=y, stream=0), y)
        self.assertIs(llm_kernels.rmsnorm(x, w, out=y, stream=0), y)
        self.assertIsNone(llm_kernels.fused_add_rmsnorm(x, y, w, stream=0))

    def test_warm_shapes(self):
        self.assertNames(ValueError, "shapes[1].op", llm_kernels.warm, [("rmsnorm", "bf16", 1, 4096), ("gelu", "bf16", 1, 8)], 0, stream=0)
        self.assertNames(ValueError, "shapes[0].dtype", llm_kernels.warm, [("softmax", "int8", 1, 8)], 0, stream=0)
        self.assertNames(ValueError, "shapes[0]", llm_kernels.warm, [("softmax", 1, 8)], 0, stream=0)
        # Sizes are checked by the library, before it opens the device.
        self.assertNames(ValueError, "shapes[0].rows", llm_kernels.warm, [("softmax", "f32", 0, 8)], 0, stream=0)
        self.assertNames(ValueError, "shapes[0].cols", llm_kernels.warm, [("softmax", "f32", 1, -8)], 0, stream=0)


class Extension(unittest.TestCase):
    """The extension checks again what reaches it, with the C ABI's argument names."""

    def test_null_and_bad_codes(self):
        with self.assertRaisesRegex(ValueError, "`x`"):
            _ext.softmax(False, 0x7F00_0000_0000, 8, 0, 8, 1, 8, _ext.F32, 1.0, 0, 0)
        with self.assertRaisesRegex(ValueError, "`dtype`"):
            _ext.rmsnorm(0x7F00_0000_0000, 8, 0x7F00_1000_0000, 8, 0x7F00_2000_0000, 1, 8, 9, 1e-6, 0, 0)
        with self.assertRaisesRegex(ValueError, "`residual`"):
            _ext.fused_add_rmsnorm(0x7F00_0000_0000, 8, 0x7F00_0000_0000, 8, 0x7F00_2000_0000, 1, 8, 0, 1e-6, 0, 0)
        with self.assertRaisesRegex(ValueError, "`device`"):
            _ext.softmax(False, 0x7F00_0000_0000, 8, 0x7F00_1000_0000, 8, 1, 8, _ext.F32, 1.0, -1, 0)
        with self.assertRaises(OverflowError):
            _ext.softmax(False, -1, 8, 0x7F00_1000_0000, 8, 1, 8, _ext.F32, 1.0, 0, 0)

    def test_valid_call_without_a_driver_reports_no_device(self):
        if not no_driver():
            self.skipTest("a CUDA driver loads here: stand-in addresses must not reach a kernel")
        x, w, y = norm_operands()
        with self.assertRaisesRegex(llm_kernels.KernelsError, "no CUDA driver found"):
            llm_kernels.rmsnorm(x, w, out=y, stream=0)
        with self.assertRaisesRegex(llm_kernels.KernelsError, "no CUDA driver found"):
            llm_kernels.softmax(x, out=x, stream=0)  # in place is allowed
        with self.assertRaisesRegex(llm_kernels.KernelsError, "no CUDA driver found"):
            llm_kernels.warm([("rmsnorm", "bf16", 16, 4096)], 0, stream=0)


if __name__ == "__main__":
    unittest.main()
