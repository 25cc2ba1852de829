"""GPU tests of the package against torch: every op and dtype against torch's
reference, strided and N-d operands, in place, on a side stream behind a long
producer, inside a CUDA graph after warm-up, and a small Llama-style decoder layer
with its norms and softmax swapped for ours; GEMM, routing and fused MoE against
torch references, eagerly and in a CUDA graph; operands passed through the CUDA
array interface and DLPack instead of as torch tensors.

They skip, saying so, where torch or a CUDA GPU is missing; with KERNELS_REQUIRE_GPU
set (any value but "", "0", "false", "no") a missing GPU fails instead.
"""

import math
import os
import unittest

import llm_kernels

try:
    import torch

    HAVE_GPU = torch.cuda.is_available()
    WHY = "no CUDA GPU visible to torch"
except ImportError:
    torch, HAVE_GPU, WHY = None, False, "torch is not installed"

REQUIRE_GPU = os.environ.get("KERNELS_REQUIRE_GPU", "").strip().lower() not in ("", "0", "false", "no")
SKIP = f"GPU tests skipped: {WHY}"

# Tolerances per dtype: about two units in the last place of the stored result.
TOL = {}
if torch is not None:
    TOL = {
        torch.float32: dict(rtol=1e-5, atol=1e-6),
        torch.float16: dict(rtol=2e-3, atol=1e-5),
        torch.bfloat16: dict(rtol=1.6e-2, atol=1e-5),
    }
    DTYPES = (torch.bfloat16, torch.float16, torch.float32)


class GpuRequired(unittest.TestCase):
    def test_gpu_present_when_required(self):
        if REQUIRE_GPU:
            self.assertTrue(HAVE_GPU, f"KERNELS_REQUIRE_GPU is set but {WHY}")
        elif not HAVE_GPU:
            self.skipTest(SKIP)


def ref_rmsnorm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def close(test, got, want, dtype, what, scale=1.0):
    tol = {k: v * scale for k, v in TOL[dtype].items()}
    torch.testing.assert_close(got.float(), want.float(), **tol, msg=lambda m: f"{what}: {m}")


SOFTMAX_SHAPES = ((1, 4096), (7, 1000), (64, 32000), (3, 128256))
RMSNORM_SHAPES = ((1, 4096), (16, 4096), (7, 5120), (33, 8192), (4, 1000))
FUSED_SHAPES = ((1, 4096), (16, 4096), (9, 7168))


@unittest.skipUnless(HAVE_GPU, SKIP)
class Ops(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Compile the tests' kernels up front, in parallel (warm's job in an engine).
        shapes = [(op, d, r, c) for d in DTYPES for op in ("softmax", "log_softmax") for r, c in SOFTMAX_SHAPES]
        shapes += [("rmsnorm", d, r, c) for d in DTYPES for r, c in RMSNORM_SHAPES]
        shapes += [("fused_add_rmsnorm", d, r, c) for d in DTYPES for r, c in FUSED_SHAPES]
        report = llm_kernels.warm(shapes)
        assert len(report) == len(shapes)

    def setUp(self):
        torch.manual_seed(0)

    def test_softmax_and_log_softmax(self):
        for dtype in DTYPES:
            for rows, cols in SOFTMAX_SHAPES:
                for scale in (1.0, 0.125):
                    x = torch.randn(rows, cols, device="cuda", dtype=dtype) * 4
                    ref = torch.softmax(x.float() * scale, -1).to(dtype)
                    close(self, llm_kernels.softmax(x, scale=scale), ref, dtype, f"softmax {dtype} {rows}x{cols}")
                    ref = torch.log_softmax(x.float() * scale, -1).to(dtype)
                    # log-probabilities reach -40: their absolute error scales with them
                    got = llm_kernels.log_softmax(x, scale=scale)
                    close(self, got, ref, dtype, f"log_softmax {dtype} {rows}x{cols}", scale=4.0)

    def test_rmsnorm(self):
        for dtype in DTYPES:
            for rows, cols in RMSNORM_SHAPES:
                x = torch.randn(rows, cols, device="cuda", dtype=dtype)
                w = torch.rand(cols, device="cuda", dtype=dtype) + 0.5
                close(self, llm_kernels.rmsnorm(x, w, 1e-6), ref_rmsnorm(x, w, 1e-6), dtype, f"rmsnorm {dtype} {rows}x{cols}")

    def test_fused_add_rmsnorm(self):
        for dtype in DTYPES:
            for rows, cols in FUSED_SHAPES:
                x = torch.randn(rows, cols, device="cuda", dtype=dtype)
                r = torch.randn(rows, cols, device="cuda", dtype=dtype)
                w = torch.rand(cols, device="cuda", dtype=dtype) + 0.5
                want_r = (x.float() + r.float()).to(dtype)
                want_x = ref_rmsnorm(want_r, w, 1e-5)
                self.assertIsNone(llm_kernels.fused_add_rmsnorm(x, r, w, 1e-5))
                close(self, r, want_r, dtype, f"fused residual {dtype} {rows}x{cols}")
                # the kernel may normalise the unrounded sum: one more rounding apart
                close(self, x, want_x, dtype, f"fused x {dtype} {rows}x{cols}", scale=2.0)

    def test_vllm_spellings(self):
        x = torch.randn(5, 2048, device="cuda", dtype=torch.bfloat16)
        w = torch.rand(2048, device="cuda", dtype=torch.bfloat16) + 0.5
        out = torch.empty_like(x)
        llm_kernels.rms_norm(out, x, w, 1e-6)
        close(self, out, ref_rmsnorm(x, w, 1e-6), torch.bfloat16, "rms_norm")
        r = torch.randn_like(x)
        want_r = (x.float() + r.float()).to(x.dtype)
        llm_kernels.fused_add_rms_norm(x, r, w, 1e-6)
        close(self, r, want_r, torch.bfloat16, "fused_add_rms_norm residual")

    def test_strided_nd_and_given_outputs(self):
        dtype = torch.bfloat16
        wide = torch.randn(8, 6144, device="cuda", dtype=dtype)
        x = wide[:, 1024:5120]  # rows 6144 apart: a slice of a fused projection
        w = torch.rand(4096, device="cuda", dtype=dtype) + 0.5
        out = torch.empty(8, 4096, device="cuda", dtype=dtype)
        self.assertIs(llm_kernels.rmsnorm(x, w, out=out), out)
        close(self, out, ref_rmsnorm(x, w, 1e-6), dtype, "rmsnorm strided input")
        x3 = torch.randn(2, 3, 4096, device="cuda", dtype=dtype)
        close(self, llm_kernels.rmsnorm(x3, w), ref_rmsnorm(x3, w, 1e-6), dtype, "rmsnorm 3-d")
        s = torch.randn(2, 4, 1000, device="cuda", dtype=dtype)
        close(self, llm_kernels.softmax(s), torch.softmax(s.float(), -1).to(dtype), dtype, "softmax 3-d")

    def test_in_place_softmax(self):
        x = torch.randn(6, 32000, device="cuda", dtype=torch.float16)
        want = torch.softmax(x.float(), -1).to(x.dtype)
        self.assertIs(llm_kernels.softmax(x, out=x), x)
        close(self, x, want, torch.float16, "in-place softmax")

    def test_errors_on_real_tensors(self):
        x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "`input`"):
            llm_kernels.rmsnorm(x.cpu(), torch.ones(4096, dtype=torch.bfloat16))
        with self.assertRaisesRegex(ValueError, "`input`"):
            llm_kernels.softmax(x.t())
        with self.assertRaisesRegex(ValueError, "`weight`"):
            llm_kernels.rmsnorm(x, torch.ones(4096, device="cuda", dtype=torch.float32))
        with self.assertRaisesRegex(ValueError, "`out`"):
            llm_kernels.rmsnorm(x, torch.ones(4096, device="cuda", dtype=torch.bfloat16), out=x)

    def test_side_stream_orders_after_its_producer(self):
        # x comes from a long matmul on a side stream; our softmax, launched on that
        # stream (torch's current one there), must see the finished x.
        dtype = torch.bfloat16
        a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
        b = torch.randn(8192, 8192, device="cuda", dtype=dtype) / 90
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                x = a @ b
                y = llm_kernels.softmax(x)
                n = llm_kernels.rmsnorm(x, torch.ones(8192, device="cuda", dtype=dtype))
        side.synchronize()
        close(self, y, torch.softmax(x.float(), -1).to(dtype), dtype, "softmax on a side stream")
        close(self, n, ref_rmsnorm(x, torch.ones(8192, device="cuda", dtype=dtype), 1e-6), dtype, "rmsnorm on a side stream")

    def test_cuda_graph_after_warm(self):
        dtype, rows, hidden, vocab = torch.bfloat16, 8, 4096, 32000
        report = llm_kernels.warm(
            [
                ("rmsnorm", dtype, rows, hidden),
                ("fused_add_rmsnorm", dtype, rows, hidden),
                ("softmax", dtype, rows, vocab),
                ("log_softmax", "bf16", rows, vocab),
            ]
        )
        self.assertEqual([r["kernel"] for r in report], ["rmsnorm", "fused_add_rmsnorm", "softmax", "log_softmax"])
        for r in report:
            self.assertIn("=", r["config"])
            self.assertTrue(r["source"])
        x = torch.randn(rows, hidden, device="cuda", dtype=dtype)
        res = torch.randn(rows, hidden, device="cuda", dtype=dtype)
        w = torch.rand(hidden, device="cuda", dtype=dtype) + 0.5
        logits = torch.randn(rows, vocab, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        p = torch.empty_like(logits)
        lp = torch.empty_like(logits)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            llm_kernels.rmsnorm(x, w, out=y)
            llm_kernels.fused_add_rmsnorm(x, res, w)
            llm_kernels.softmax(logits, out=p)
            llm_kernels.log_softmax(logits, out=lp)
        for _ in range(2):
            x.copy_(torch.randn_like(x))
            res.copy_(torch.randn_like(res))
            logits.copy_(torch.randn_like(logits) * 3)
            x0, r0 = x.clone(), res.clone()
            g.replay()
            torch.cuda.synchronize()
            close(self, y, ref_rmsnorm(x0, w, 1e-6), dtype, "graph rmsnorm")
            want_r = (x0.float() + r0.float()).to(dtype)
            close(self, res, want_r, dtype, "graph fused residual")
            close(self, x, ref_rmsnorm(want_r, w, 1e-6), dtype, "graph fused x", scale=2.0)
            close(self, p, torch.softmax(logits.float(), -1).to(dtype), dtype, "graph softmax")
            close(self, lp, torch.log_softmax(logits.float(), -1).to(dtype), dtype, "graph log_softmax", scale=4.0)


def ref_moe(x, w1, w2, weights, ids):
    """fused_experts in torch, with the kernel's roundings: the intermediate and each
    weighted expert output stored in x's dtype, summed in fp32."""
    inter = w1.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            if not 0 <= e < w1.shape[0]:
                continue  # an id outside [0, E) adds nothing
            gu = w1[e].float() @ x[t].float()
            h = (torch.nn.functional.silu(gu[:inter]) * gu[inter:]).to(x.dtype)
            out[t] += ((w2[e].float() @ h.float()) * weights[t, j]).to(x.dtype).float()
    return out.to(x.dtype)


def ref_grouped_topk(logits, bias, topk, n_group, topk_group, renormalize, scale):
    scores = torch.sigmoid(logits.float())
    choice = scores + (bias if bias is not None else 0)
    t, e = choice.shape
    groups = choice.view(t, n_group, e // n_group).topk(min(2, e // n_group), -1).values.sum(-1)
    keep = torch.zeros_like(groups).scatter_(1, groups.topk(topk_group, -1).indices, 1)
    mask = keep.repeat_interleave(e // n_group, 1).bool()
    ids = choice.masked_fill(~mask, float("-inf")).topk(topk, -1).indices
    w = scores.gather(1, ids)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w * scale, ids.int()


def moe_weights(e, inter, h, dtype):
    w1 = (torch.randn(e, 2 * inter, h, device="cuda") / math.sqrt(h)).to(dtype)
    w2 = (torch.randn(e, h, inter, device="cuda") / math.sqrt(inter)).to(dtype)
    return w1, w2


def close_rel(test, got, want, what, tol=2e-2):
    err = ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-30)).item()
    test.assertTrue(torch.isfinite(got.float()).all().item(), f"{what}: non-finite values")
    test.assertLess(err, tol, f"{what}: relative error {err:.3g}")


@unittest.skipUnless(HAVE_GPU, SKIP)
class GemmAndMoe(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)

    def test_gemm_against_torch(self):
        for dtype in (torch.bfloat16, torch.float16):
            for m, n, k in ((1, 256, 512), (17, 384, 1024), (128, 6144, 4096), (3, 100, 72)):
                a = torch.randn(m, k, device="cuda", dtype=dtype)
                b = (torch.randn(n, k, device="cuda") / math.sqrt(k)).to(dtype)
                bias = torch.randn(n, device="cuda", dtype=dtype)
                want = a.float() @ b.float().T
                for with_bias in (False, True):
                    ref = want + bias.float() if with_bias else want
                    for out_dtype in (None, torch.float32):
                        got = llm_kernels.gemm(a, b, bias if with_bias else None, out_dtype)
                        self.assertEqual(got.dtype, out_dtype or dtype)
                        self.assertEqual(tuple(got.shape), (m, n))
                        close_rel(self, got, ref, f"gemm {dtype} {m}x{n}x{k} bias={with_bias} out={out_dtype}",
                                  1e-4 if out_dtype else 1e-2)
                # b as the transpose of a [k, n] matrix runs as layout nn, no copy
                bt = b.T.contiguous().T
                close_rel(self, llm_kernels.gemm(a, bt), want, f"gemm nn {dtype} {m}x{n}x{k}")
        # 3-d activations and a preallocated, zeroed workspace
        a = torch.randn(2, 5, 4096, device="cuda", dtype=torch.bfloat16)
        b = (torch.randn(4096, 4096, device="cuda") / 64).to(torch.bfloat16)
        ws = torch.zeros(llm_kernels.gemm_workspace_bytes(10, 4096, 4096, torch.bfloat16), dtype=torch.uint8, device="cuda")
        got = llm_kernels.gemm(a, b, workspace=ws)
        close_rel(self, got, a.float() @ b.float().T, "gemm 3-d with workspace")
        # Split-K leaves its tile counters at zero (the partials stay), so the workspace
        # is reused as it is: the next call gives the same result, bit for bit.
        self.assertTrue(torch.equal(llm_kernels.gemm(a, b, workspace=ws), got), "workspace reuse")

    def test_gemm_in_a_cuda_graph(self):
        dtype, m, n, k = torch.bfloat16, 8, 4096, 4096
        report = llm_kernels.warm([("gemm", dtype, m, n, k), ("gemm", dtype, m, n, k, "nn")])
        self.assertEqual([r["kernel"] for r in report], ["gemm", "gemm"])
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = (torch.randn(n, k, device="cuda") / 64).to(dtype)
        bias = torch.randn(n, device="cuda", dtype=dtype)
        out = torch.empty(m, n, device="cuda", dtype=torch.float32)
        ws = torch.zeros(llm_kernels.gemm_workspace_bytes(m, n, k, dtype), dtype=torch.uint8, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            llm_kernels.gemm(a, b, bias, torch.float32, out=out, workspace=ws)
        for _ in range(2):
            a.copy_(torch.randn_like(a))
            g.replay()
            torch.cuda.synchronize()
            close_rel(self, out, a.float() @ b.float().T + bias.float(), "graph gemm", 1e-4)

    def test_routing_against_torch(self):
        for dtype in (torch.float32, torch.bfloat16):
            # Distinct logits, exact in bf16 (multiples of 1/16): with ties the order of
            # equal scores is the kernel's rule, and torch.topk's is unspecified.
            perms = torch.stack([torch.randperm(64) for _ in range(33)])
            logits = ((perms.float() - 32) / 16).to(device="cuda", dtype=dtype)
            for renormalize in (False, True):
                w, ids = llm_kernels.fused_topk(logits, logits, 6, renormalize)
                p = torch.softmax(logits.float(), -1)
                want_w, want_ids = p.topk(6, -1)
                if renormalize:
                    want_w = want_w / want_w.sum(-1, keepdim=True)
                self.assertTrue(torch.equal(ids, want_ids.int()), f"topk_softmax ids {dtype}")
                torch.testing.assert_close(w, want_w, rtol=1e-4, atol=1e-5)
            bias = torch.randn(64, device="cuda") * 0.1
            for b in (None, bias):
                w, ids = llm_kernels.grouped_topk(logits, logits, 8, True, 8, 4, "sigmoid", 2.5, b)
                want_w, want_ids = ref_grouped_topk(logits, b, 8, 8, 4, True, 2.5)
                self.assertTrue(torch.equal(ids, want_ids), f"grouped_topk ids {dtype} bias={b is not None}")
                torch.testing.assert_close(w, want_w, rtol=1e-4, atol=1e-5)
        # sgl_kernel's spelling fills given tensors
        logits = torch.randn(4, 8, device="cuda")
        w = torch.empty(4, 2, device="cuda")
        ids = torch.empty(4, 2, device="cuda", dtype=torch.int32)
        self.assertIsNone(llm_kernels.topk_softmax(w, ids, logits, True))
        self.assertTrue(torch.equal(ids, torch.softmax(logits, -1).topk(2, -1).indices.int()))

    def test_fused_moe_against_torch(self):
        for dtype in (torch.bfloat16, torch.float16):
            for t, e, inter, h, topk in ((1, 8, 256, 512, 2), (33, 8, 256, 512, 2), (16, 64, 128, 256, 8)):
                x = torch.randn(t, h, device="cuda", dtype=dtype)
                w1, w2 = moe_weights(e, inter, h, dtype)
                logits = torch.randn(t, e, device="cuda")
                weights, ids = llm_kernels.fused_topk(x, logits, topk, True)
                got = llm_kernels.fused_moe(x, w1, w2, weights, ids)
                close_rel(self, got, ref_moe(x, w1, w2, weights, ids), f"fused_moe {dtype} T={t} E={e} topk={topk}")
                again = llm_kernels.fused_experts(x, w1, w2, weights, ids)
                self.assertTrue(torch.equal(got, again), "fused_moe is deterministic")
        # Engine routing: a duplicate id counts twice, an id outside [0, E) adds nothing.
        dtype = torch.bfloat16
        x = torch.randn(3, 512, device="cuda", dtype=dtype)
        w1, w2 = moe_weights(8, 256, 512, dtype)
        ids = torch.tensor([[1, 1], [2, -1], [7, 8]], device="cuda", dtype=torch.int32)
        weights = torch.tensor([[0.25, 0.5], [1.0, 1.0], [0.5, 0.5]], device="cuda")
        out = torch.empty_like(x)
        ws = torch.empty(llm_kernels.moe_workspace_bytes(3, 8, 256, 512, 2, dtype), dtype=torch.uint8, device="cuda")
        self.assertIs(llm_kernels.fused_moe(x, w1, w2, weights, ids, out=out, workspace=ws), out)
        close_rel(self, out, ref_moe(x, w1, w2, weights, ids), "fused_moe with engine ids")

    def test_routing_and_fused_moe_in_a_cuda_graph(self):
        dtype, t, e, inter, h, topk = torch.bfloat16, 8, 64, 128, 256, 6
        report = llm_kernels.warm([("fused_moe", dtype, t, e, inter, h, topk, "softmax", torch.float32),
                                   ("fused_moe", dtype, t, e, inter, h, topk, "grouped", torch.float32)])
        self.assertEqual([r["kernel"] for r in report], ["moe", "moe"])
        x = torch.randn(t, h, device="cuda", dtype=dtype)
        logits = torch.randn(t, e, device="cuda")
        w1, w2 = moe_weights(e, inter, h, dtype)
        weights = torch.empty(t, topk, device="cuda")
        ids = torch.empty(t, topk, device="cuda", dtype=torch.int32)
        out = torch.empty_like(x)
        ws = torch.empty(llm_kernels.moe_workspace_bytes(t, e, inter, h, topk, dtype), dtype=torch.uint8, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            llm_kernels.topk_softmax(weights, ids, logits, True)
            llm_kernels.fused_moe(x, w1, w2, weights, ids, out=out, workspace=ws)
        for _ in range(2):
            x.copy_(torch.randn_like(x))
            logits.copy_(torch.randn_like(logits))
            g.replay()
            torch.cuda.synchronize()
            want_ids = torch.softmax(logits, -1).topk(topk, -1).indices.int()
            self.assertTrue(torch.equal(ids, want_ids), "graph routing ids")
            close_rel(self, out, ref_moe(x, w1, w2, weights, ids), "graph fused_moe")

    def test_cuda_array_interface_and_dlpack_operands(self):
        class OnlyCai:
            def __init__(self, t):
                self.t, self.__cuda_array_interface__ = t, t.__cuda_array_interface__

        class OnlyDlpack:
            def __init__(self, t):
                self.t = t

            def __dlpack__(self, stream=None, max_version=None):
                return self.t.__dlpack__(stream=stream)

            def __dlpack_device__(self):
                return self.t.__dlpack_device__()

        x = torch.randn(16, 4096, device="cuda", dtype=torch.float32)
        w = torch.rand(4096, device="cuda") + 0.5
        for wrap in (OnlyCai, OnlyDlpack):
            y = torch.empty_like(x)
            llm_kernels.rmsnorm(wrap(x), wrap(w), out=wrap(y))
            close(self, y, ref_rmsnorm(x, w, 1e-6), torch.float32, f"rmsnorm via {wrap.__name__}")
        # bf16 arrives only through DLPack (the CUDA array interface has no bf16).
        xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
        got = llm_kernels.rmsnorm(OnlyDlpack(xb), OnlyDlpack(wb))
        close(self, got, ref_rmsnorm(xb, wb, 1e-6), torch.bfloat16, "bf16 rmsnorm via DLPack")
        # A producer on a side stream: the CUDA array interface names it and the launch
        # (on the main stream) waits for it.
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.float32)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            prod = (a @ a)[:16] / 100
            cai = OnlyCai(prod)
        y = torch.empty(16, 8192, device="cuda")
        llm_kernels.softmax(cai, out=OnlyCai(y))
        torch.cuda.synchronize()
        close(self, y, torch.softmax(prod, -1), torch.float32, "softmax after a side-stream producer")


@unittest.skipUnless(HAVE_GPU, SKIP)
class DecoderLayer(unittest.TestCase):
    """One Llama-style layer (pre-norm attention with a causal softmax, SwiGLU MLP),
    random weights, computed by torch alone and with our norms and softmax."""

    def layer(self, h, p, ours):
        dtype, (tokens, hidden), heads, eps = h.dtype, h.shape, p["heads"], 1e-5
        d = hidden // heads
        if ours:
            n = llm_kernels.rmsnorm(h, p["ln1"], eps)
        else:
            n = ref_rmsnorm(h, p["ln1"], eps)
        q, k, v = (n @ p["wqkv"]).split(hidden, -1)
        q, k, v = (t.view(tokens, heads, d).transpose(0, 1) for t in (q, k, v))
        scores = (q @ k.transpose(1, 2)).float()
        mask = torch.ones(tokens, tokens, device=h.device, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf")).to(dtype)
        if ours:
            probs = llm_kernels.softmax(scores, scale=1 / math.sqrt(d))
        else:
            probs = torch.softmax(scores.float() / math.sqrt(d), -1).to(dtype)
        o = (probs @ v).transpose(0, 1).reshape(tokens, hidden) @ p["wo"]
        if ours:
            residual = h.clone()
            llm_kernels.fused_add_rmsnorm(o, residual, p["ln2"], eps)  # residual = h + o; o = norm
            n2, h = o, residual
        else:
            h = (h.float() + o.float()).to(dtype)
            n2 = ref_rmsnorm(h, p["ln2"], eps)
        gate, up = (n2 @ p["wgu"]).split(p["inter"], -1)
        mlp = (torch.nn.functional.silu(gate) * up) @ p["wd"]
        return h + mlp

    def test_layer_matches_torch(self):
        torch.manual_seed(0)
        dtype, tokens, hidden, heads, inter = torch.bfloat16, 24, 1024, 8, 2816

        def weight(*shape):
            return (torch.randn(*shape, device="cuda", dtype=torch.float32) / math.sqrt(shape[0])).to(dtype)

        p = dict(
            heads=heads,
            inter=inter,
            ln1=(torch.rand(hidden, device="cuda") + 0.5).to(dtype),
            ln2=(torch.rand(hidden, device="cuda") + 0.5).to(dtype),
            wqkv=weight(hidden, 3 * hidden),
            wo=weight(hidden, hidden),
            wgu=weight(hidden, 2 * inter),
            wd=weight(inter, hidden),
        )
        h = torch.randn(tokens, hidden, device="cuda", dtype=dtype)
        want = self.layer(h, p, ours=False)
        got = self.layer(h, p, ours=True)
        err = ((got.float() - want.float()).norm() / want.float().norm()).item()
        self.assertTrue(torch.isfinite(got).all().item(), "non-finite output")
        self.assertLess(err, 2e-2, f"relative error {err:.3g} of the layer output")


if __name__ == "__main__":
    unittest.main()
