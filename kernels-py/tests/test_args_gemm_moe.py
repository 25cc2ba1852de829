"""GPU-free tests of GEMM, fused MoE and routing argument checking, with the
tensor-like stand-ins of test_args (never dereferenced: every call here fails its
checks or stops at opening the device)."""

import unittest

import llm_kernels
from llm_kernels import _ext
from test_args import MB, Device, Tensor, no_driver

BASE = 0x7F00_0000_0000


def at(i):
    """Address of stand-in buffer `i`: 256 MB apart, never overlapping."""
    return BASE + i * 256 * MB


def gemm_operands(m=8, n=256, k=512, dtype="torch.bfloat16"):
    a = Tensor((m, k), dtype, ptr=at(0))
    b = Tensor((n, k), dtype, ptr=at(1))
    bias = Tensor((n,), dtype, ptr=at(2))
    out = Tensor((m, n), dtype, ptr=at(3))
    return a, b, bias, out


def moe_operands(t=5, e=8, inter=64, h=128, topk=2):
    return dict(
        hidden_states=Tensor((t, h), ptr=at(0)),
        w1=Tensor((e, 2 * inter, h), ptr=at(1)),
        w2=Tensor((e, h, inter), ptr=at(2)),
        topk_weights=Tensor((t, topk), "torch.float32", ptr=at(3)),
        topk_ids=Tensor((t, topk), "torch.int32", ptr=at(4)),
        out=Tensor((t, h), ptr=at(5)),
        workspace=Tensor((1 << 20,), "torch.uint8", ptr=at(6)),
    )


class Base(unittest.TestCase):
    def assertNames(self, exc, name, fn, *args, **kwargs):
        with self.assertRaises(exc) as cm:
            fn(*args, **kwargs)
        self.assertIn(f"`{name}`", str(cm.exception))
        return str(cm.exception)


class Gemm(Base):
    def test_each_bad_argument_is_named(self):
        a, b, bias, out = gemm_operands()
        call = lambda **kw: llm_kernels.gemm(  # noqa: E731
            kw.get("a", a), kw.get("b", b), kw.get("bias", bias), kw.get("out_dtype"), out=kw.get("out", out), stream=0
        )
        self.assertNames(TypeError, "a", call, a=[1.0])
        self.assertNames(ValueError, "a", call, a=Tensor((8, 512), "torch.float32", ptr=at(0)))
        self.assertNames(ValueError, "a", call, a=Tensor((8, 512), "torch.int8", ptr=at(0)))
        self.assertNames(ValueError, "b", call, b=Tensor((256, 500), ptr=at(1)))
        self.assertNames(ValueError, "b", call, b=Tensor((2, 256, 512), ptr=at(1)))
        self.assertNames(ValueError, "b", call, b=Tensor((256, 512), "torch.float16", ptr=at(1)))
        self.assertNames(ValueError, "b", call, b=Tensor((256, 512), ptr=at(1), strides=(1024, 2)))
        self.assertNames(ValueError, "bias", call, bias=Tensor((255,), ptr=at(2)))
        self.assertNames(ValueError, "bias", call, bias=Tensor((256,), "torch.float32", ptr=at(2)))
        self.assertNames(ValueError, "bias", call, bias=Tensor((256,), ptr=at(2), strides=(2,)))
        self.assertNames(ValueError, "out_dtype", call, out_dtype="f16")
        self.assertNames(ValueError, "out_dtype", call, out_dtype="int8")
        self.assertNames(ValueError, "out", call, out=Tensor((8, 255), ptr=at(3)))
        self.assertNames(ValueError, "out", call, out=Tensor((8, 256), "torch.float16", ptr=at(3)))
        self.assertNames(ValueError, "out", call, out=Tensor((8, 256), "torch.float32", ptr=at(3)), out_dtype="bf16")
        self.assertNames(ValueError, "b", call, a=Tensor((8, 512), ptr=at(0), device=Device("cuda", 1)))
        self.assertNames(ValueError, "out", call, out=Tensor((8, 256), ptr=at(3), device=Device("cuda", 1)))
        # Checked by the library, named as the caller knows them: C over A.
        self.assertNames(ValueError, "out", call, out=Tensor((8, 256), ptr=at(0) + 64))
        self.assertNames(ValueError, "a", call, a=Tensor((8, 512), ptr=at(0), device=Device("cpu", None)))

    def test_a_leading_dimensions_flatten_and_zero_rows_launch_nothing(self):
        _, b, bias, _ = gemm_operands()
        a = Tensor((0, 512), ptr=at(0))
        out = Tensor((0, 256), ptr=at(3))
        self.assertIs(llm_kernels.gemm(a, b, bias, out=out, stream=0), out)
        a3 = Tensor((2, 4, 512), ptr=at(0))
        self.assertNames(ValueError, "out", llm_kernels.gemm, a3, b, out=Tensor((7, 256), ptr=at(3)), stream=0)

    def test_workspace_size_checks(self):
        self.assertNames(ValueError, "layout", llm_kernels.gemm_workspace_bytes, 8, 256, 512, "bf16", "tn")
        self.assertNames(ValueError, "dtype", llm_kernels.gemm_workspace_bytes, 8, 256, 512, "int8")
        with self.assertRaisesRegex(ValueError, "`k`"):
            _ext.gemm_workspace_bytes(8, 256, 0, _ext.BF16, _ext.LAYOUT_NT, 0)
        with self.assertRaisesRegex(ValueError, "`layout`"):
            _ext.gemm_workspace_bytes(8, 256, 64, _ext.BF16, 9, 0)

    def test_extension_names_the_c_arguments(self):
        with self.assertRaisesRegex(ValueError, "`lda`"):
            _ext.gemm(at(3), 256, _ext.BF16, at(0), 100, at(1), 512, _ext.LAYOUT_NT, 0, 8, 256, 512, _ext.BF16, 0, 0, 0, 0)
        with self.assertRaisesRegex(ValueError, "`c_dtype`"):
            _ext.gemm(at(3), 256, _ext.F16, at(0), 512, at(1), 512, _ext.LAYOUT_NT, 0, 8, 256, 512, _ext.BF16, 0, 0, 0, 0)
        with self.assertRaisesRegex(ValueError, "`workspace`"):
            _ext.gemm(at(3), 256, _ext.BF16, at(0), 512, at(1), 512, _ext.LAYOUT_NT, 0, 8, 256, 512, _ext.BF16, 0, 64, 0, 0)

    def test_valid_call_without_a_driver_reports_no_device(self):
        if not no_driver():
            self.skipTest("a CUDA driver loads here: stand-in addresses must not reach a kernel")
        a, b, bias, out = gemm_operands()
        with self.assertRaisesRegex(llm_kernels.KernelsError, "no CUDA driver found"):
            llm_kernels.gemm(a, b, bias, out=out, stream=0)
        with self.assertRaisesRegex(llm_kernels.KernelsError, "no CUDA driver found"):
            llm_kernels.gemm_workspace_bytes(8, 256, 512, "bf16", device=0)


class FusedMoe(Base):
    def test_each_bad_argument_is_named(self):
        def call(**change):
            ops = moe_operands()
            ops.update(change)
            return llm_kernels.fused_moe(
                ops.pop("hidden_states"), ops.pop("w1"), ops.pop("w2"), ops.pop("topk_weights"), ops.pop("topk_ids"),
                stream=0, **ops,
            )

        self.assertNames(ValueError, "hidden_states", call, hidden_states=Tensor((5, 128), "torch.float32", ptr=at(0)))
        self.assertNames(ValueError, "hidden_states", call, hidden_states=Tensor((5, 1, 128), ptr=at(0)))
        self.assertNames(ValueError, "hidden_states", call, hidden_states=Tensor((5, 128), ptr=at(0), strides=(256, 1)))
        self.assertNames(ValueError, "w1", call, w1=Tensor((8, 128, 120), ptr=at(1)))
        self.assertNames(ValueError, "w1", call, w1=Tensor((8, 127, 128), ptr=at(1)))
        self.assertNames(ValueError, "w1", call, w1=Tensor((8, 120, 128), ptr=at(1)))  # I = 60
        self.assertNames(ValueError, "w1", call, w1=Tensor((8, 128, 128), "torch.float16", ptr=at(1)))
        self.assertNames(ValueError, "w1", call, w1=Tensor((8, 128, 128), ptr=at(1), strides=(1, 8, 1024)))
        self.assertNames(ValueError, "w2", call, w2=Tensor((8, 64, 128), ptr=at(2)))
        self.assertNames(ValueError, "topk_weights", call, topk_weights=Tensor((5, 2), ptr=at(3)))
        self.assertNames(ValueError, "topk_weights", call, topk_weights=Tensor((4, 2), "torch.float32", ptr=at(3)))
        self.assertNames(ValueError, "topk_ids", call, topk_ids=Tensor((5, 2), "torch.int64", ptr=at(4)))
        self.assertNames(ValueError, "topk_ids", call, topk_ids=Tensor((5, 3), "torch.int32", ptr=at(4)))
        self.assertNames(ValueError, "out", call, out=Tensor((5, 64), ptr=at(5)))
        self.assertNames(ValueError, "out", call, out=Tensor((5, 128), "torch.float16", ptr=at(5)))
        self.assertNames(ValueError, "workspace", call, workspace=Tensor((1000,), "torch.uint8", ptr=at(6)))
        self.assertNames(ValueError, "workspace", call, workspace=Tensor((1 << 20,), "torch.uint8", ptr=at(6), strides=(2,)))
        # The library's checks: topk above the experts, out over an input.
        self.assertNames(ValueError, "topk", call, topk_weights=Tensor((5, 9), "torch.float32", ptr=at(3)),
                         topk_ids=Tensor((5, 9), "torch.int32", ptr=at(4)))

    def test_the_librarys_names_become_the_functions(self):
        # The library names hidden `hidden` and w1 `w13`; the package says what the
        # caller passed.
        ops = moe_operands()
        ops["out"] = Tensor((5, 128), ptr=at(0))
        with self.assertRaisesRegex(ValueError, "`out`.*`hidden_states`"):
            llm_kernels.fused_moe(ops.pop("hidden_states"), ops.pop("w1"), ops.pop("w2"), ops.pop("topk_weights"),
                                  ops.pop("topk_ids"), stream=0, **ops)

    def test_workspace_bytes_need_no_gpu(self):
        one = llm_kernels.moe_workspace_bytes(1, 128, 768, 2048, 8, "bf16")
        two = llm_kernels.moe_workspace_bytes(2, 128, 768, 2048, 8, "torch.bfloat16")
        self.assertGreaterEqual(one, 8 * (768 + 2048) * 2)
        self.assertGreater(two, one)
        self.assertNames(ValueError, "n", llm_kernels.moe_workspace_bytes, 1, 8, 60, 128, 2, "bf16")
        self.assertNames(ValueError, "dtype", llm_kernels.moe_workspace_bytes, 1, 8, 64, 128, 2, "f32")

    def test_zero_tokens_launch_nothing(self):
        ops = moe_operands(t=0)
        out = ops["out"]
        got = llm_kernels.fused_experts(ops.pop("hidden_states"), ops.pop("w1"), ops.pop("w2"), ops.pop("topk_weights"),
                                        ops.pop("topk_ids"), stream=0, **ops)
        self.assertIs(got, out)

    def test_valid_call_without_a_driver_reports_no_device(self):
        if not no_driver():
            self.skipTest("a CUDA driver loads here: stand-in addresses must not reach a kernel")
        ops = moe_operands()
        with self.assertRaisesRegex(llm_kernels.KernelsError, "no CUDA driver found"):
            llm_kernels.fused_moe(ops.pop("hidden_states"), ops.pop("w1"), ops.pop("w2"), ops.pop("topk_weights"),
                                  ops.pop("topk_ids"), stream=0, **ops)


class Routing(Base):
    def operands(self, t=5, e=64, topk=8):
        return (
            Tensor((t, topk), "torch.float32", ptr=at(0)),
            Tensor((t, topk), "torch.int32", ptr=at(1)),
            Tensor((t, e), "torch.float32", ptr=at(2)),
        )

    def test_topk_softmax_checks(self):
        w, ids, g = self.operands()
        self.assertNames(ValueError, "gating_output", llm_kernels.topk_softmax, w, ids, Tensor((5, 64), "torch.int32", ptr=at(2)), stream=0)
        self.assertNames(ValueError, "gating_output", llm_kernels.topk_softmax, w, ids, Tensor((5, 64, 1), "torch.float32", ptr=at(2)), stream=0)
        self.assertNames(ValueError, "topk_weights", llm_kernels.topk_softmax, Tensor((5, 8), ptr=at(0)), ids, g, stream=0)
        self.assertNames(ValueError, "topk_ids", llm_kernels.topk_softmax, w, Tensor((5, 8), "torch.int64", ptr=at(1)), g, stream=0)
        self.assertNames(ValueError, "topk_weights", llm_kernels.topk_softmax, w, Tensor((5, 7), "torch.int32", ptr=at(1)), g, stream=0)
        big_w, big_ids, big_g = self.operands(e=128, topk=65)
        with self.assertRaisesRegex(ValueError, "`topk`"):
            if no_driver():
                llm_kernels.topk_softmax(big_w, big_ids, big_g, stream=0)
            else:
                raise ValueError("`topk` (checked by the library before the device; not reached here)")
        self.assertIsNone(llm_kernels.topk_softmax(*self.operands(t=0), stream=0))

    def test_grouped_topk_checks(self):
        _, _, g = self.operands()
        h = Tensor((5, 128), ptr=at(3))
        grouped = llm_kernels.grouped_topk
        self.assertNames(ValueError, "scoring_func", grouped, h, g, 8, True, 8, 4, "softmax", stream=0)
        self.assertNames(ValueError, "num_expert_group", grouped, h, g, 8, True, 7, 4, stream=0)
        self.assertNames(ValueError, "num_expert_group", grouped, h, g, 8, True, 0, 4, stream=0)
        self.assertNames(ValueError, "topk_group", grouped, h, g, 8, True, 8, 9, stream=0)
        self.assertNames(ValueError, "topk_group", grouped, h, g, 9, True, 8, 1, stream=0)  # 1 group of 8 experts < 9
        self.assertNames(ValueError, "topk", grouped, h, g, 65, True, 8, 4, stream=0)
        self.assertNames(TypeError, "topk", grouped, h, g, 2.5, True, 8, 4, stream=0)
        self.assertNames(ValueError, "routed_scaling_factor", grouped, h, g, 8, True, 8, 4, "sigmoid", float("nan"), stream=0)
        bias = Tensor((64,), "torch.bfloat16", ptr=at(4))
        self.assertNames(ValueError, "e_score_correction_bias", grouped, h, g, 8, True, 8, 4, "sigmoid", 2.5, bias, stream=0)
        bias = Tensor((63,), "torch.float32", ptr=at(4))
        self.assertNames(ValueError, "e_score_correction_bias", grouped, h, g, 8, True, 8, 4, "sigmoid", 2.5, bias, stream=0)
        self.assertNames(ValueError, "hidden_states", grouped, Tensor((4, 128), ptr=at(3)), g, 8, True, 8, 4, stream=0)
        self.assertNames(ValueError, "hidden_states", llm_kernels.fused_topk, Tensor((4, 128), ptr=at(3)), g, 8, True, stream=0)

    def test_library_checks_of_grouped_routing(self):
        with self.assertRaisesRegex(ValueError, "`n_group`"):
            _ext.grouped_topk(at(0), at(1), at(2), 0, 5, 64, 8, 7, 4, True, 1.0, _ext.F32, 0, 0)
        with self.assertRaisesRegex(ValueError, "`scale`"):
            _ext.grouped_topk(at(0), at(1), at(2), 0, 5, 64, 8, 8, 4, True, float("inf"), _ext.F32, 0, 0)
        with self.assertRaisesRegex(ValueError, "`topk_weights`"):
            _ext.topk_softmax(at(0), at(0), at(2), 5, 64, 8, _ext.F32, True, 0, 0)


class Warm(Base):
    def test_gemm_and_moe_shapes_are_checked_with_the_callers_index(self):
        warm = llm_kernels.warm
        self.assertNames(ValueError, "shapes[1].layout", warm, [("rmsnorm", "bf16", 1, 4096), ("gemm", "bf16", 1, 64, 64, "tn")], 0, stream=0)
        self.assertNames(ValueError, "shapes[0]", warm, [("gemm", "bf16", 1, 64)], 0, stream=0)
        self.assertNames(ValueError, "shapes[2].routing", warm, [("softmax", "f32", 1, 8), ("gemm", "bf16", 1, 64, 64),
                                                                  ("fused_moe", "bf16", 4, 8, 64, 128, 2, "sigmoid")], 0, stream=0)
        self.assertNames(ValueError, "shapes[0].logits_dtype", warm, [("fused_moe", "bf16", 4, 8, 64, 128, 2, "softmax", "int8")], 0, stream=0)
        # Sizes are checked by the library, before it opens the device; the index is
        # the caller's, not the kind's.
        # (Each kind's shapes are checked before that kind compiles: row kernels, then
        # GEMM, then MoE.)
        self.assertNames(ValueError, "shapes[2].m", warm, [("fused_moe", "bf16", 4, 8, 64, 128, 2), ("gemm", "bf16", 1, 64, 64),
                                                            ("gemm", "bf16", 0, 64, 64)], 0, stream=0)
        self.assertNames(ValueError, "shapes[1].n", warm, [("fused_moe", "bf16", 4, 8, 64, 128, 2), ("fused_moe", "bf16", 4, 8, 60, 128, 2)], 0, stream=0)
        self.assertNames(ValueError, "shapes[0].topk", warm, [("fused_moe", "bf16", 4, 8, 64, 128, 9)], 0, stream=0)

    def test_constants(self):
        self.assertEqual((_ext.LAYOUT_NT, _ext.LAYOUT_NN), (0, 1))
        self.assertEqual((_ext.ROUTING_NONE, _ext.ROUTING_SOFTMAX, _ext.ROUTING_GROUPED), (0, 1, 2))


if __name__ == "__main__":
    unittest.main()
