#!/usr/bin/env python3
"""Correctness and bandwidth of the softmax and RMSNorm kernels on one NVIDIA GPU.

Run from the repository root on a machine with a GPU, torch, cupy and triton:

    PYTHONUNBUFFERED=1 python3 scripts/gpu_check.py --out "$OUT"

What it does, in order (each section reports and carries on if another fails):

1. Compiles the kernels as the Rust host will: prelude + kernel source, NVRTC with
   -arch=sm_XY(a) -std=c++17 and the config's -D defines (scripts/nvrtc_check.py's
   loader); the CUBIN is loaded through cupy. Without a usable libnvrtc it falls back
   to cupy.RawModule (which adds its own -arch and -ftz=true; reported).
2. Correctness against torch in float64 for a sample of every kernel's search space
   (Python ports of space.rs and heuristic.rs below; --full for all of it) on awkward
   shapes: cols 1, odd, prime, 128256, 262144, 2M (online); 1 row and partial
   blocks; row strides > cols; misaligned pointers (VEC = 1 configs); in place;
   -inf / NaN / +inf rows; outputs poisoned first and padding checked untouched.
3. Bandwidth: each shape's analytic default and the best of a sweep of configs vs
   torch eager (torch.softmax, F.rms_norm, add_ + rms_norm), Liger (if importable),
   torch.compile (--compile), and device-to-device copy (torch copy_, bytes read +
   written). Kernel time = CUDA events around many back-to-back launches, median of
   several repetitions, inputs rotated so each launch's working set exceeds 3x L2.
4. Decode batches (1-64 rows): kernel time per launch from CUDA-graph replays,
   against an empty kernel measured the same way.

Writes gpu_check.json and prints a compact table last. `--dry-run` only builds the
variant lists and compiles them (no GPU, no torch needed).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvrtc_check as nc  # noqa: E402

WARP = 32
MAX_ITERS = 16
SMS = 132  # the analytic default's SM count for sm90 (heuristic.rs)
SIZE = {0: 4, 1: 2, 2: 2}
DNAME = {0: "f32", 1: "f16", 2: "bf16"}


def cdiv(a, b):
    return -(-a // b)


def npow2(n):
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


# ---- configs: ports of kernels-*/src/{space,heuristic}.rs (sm90) -------------------


@dataclass(frozen=True)
class SoftmaxCfg:
    strategy: str  # row | online | cluster
    threads: int
    vec: int
    rows: int = 1
    splits: int = 1

    def iters(self, cols):
        return cdiv(cols, self.threads * self.vec * self.splits)

    def defines(self, dtype, cols, log):
        return {"DTYPE": dtype, "COLS": cols, "THREADS": self.threads, "VEC": self.vec,
                "ROWS": self.rows, "STRATEGY": ["row", "online", "cluster"].index(self.strategy),
                "SPLITS": self.splits, "LOG_SOFTMAX": int(log), "KEEP": 0}

    def launch_dims(self, rows):
        if self.strategy == "row":
            return cdiv(rows, self.rows), self.threads * self.rows
        if self.strategy == "online":
            return rows, self.threads
        return rows * self.splits, self.threads

    def __str__(self):
        s = f"{self.strategy} t{self.threads} v{self.vec}"
        if self.strategy == "row":
            s += f" r{self.rows}"
        if self.strategy == "cluster":
            s += f" s{self.splits}"
        return s


def softmax_fits(dtype, cols, c):
    if c.vec * SIZE[dtype] > 16 or cols % c.vec or c.threads < WARP:
        return False
    it = c.iters(cols)
    if c.strategy == "row":
        return it <= MAX_ITERS and c.threads <= max(npow2(cols // c.vec), WARP)
    if c.strategy == "online":
        return cols > c.threads * c.vec
    return it <= MAX_ITERS and cols >= c.threads * c.vec * c.splits


def softmax_space(dtype, cols):
    out = []
    for t in (32, 64, 128, 256, 512, 1024):
        for v in (1, 2, 4, 8):
            out += [SoftmaxCfg("row", t, v, r) for r in (1, 2, 4, 8, 16) if t * r <= 1024]
            out.append(SoftmaxCfg("online", t, v))
            out += [SoftmaxCfg("cluster", t, v, 1, s) for s in (2, 4, 8)]
    return [c for c in out if softmax_fits(dtype, cols, c)]


def widest_vec(dtype, cols):
    v = 16 // SIZE[dtype]
    while v > 1 and cols % v:
        v //= 2
    return v


def softmax_default(dtype, cols, rows):
    vec = widest_vec(dtype, cols)
    threads = min(max(npow2(cdiv(cols, vec) // 4), WARP), 1024)
    c = SoftmaxCfg("row", threads, vec, min(128 // threads, 16) if threads < 128 else 1)
    if rows < SMS // 2 and c.iters(cols) > 4:
        for s in (8, 4, 2):
            cl = SoftmaxCfg("cluster", 1024, vec, 1, s)
            if softmax_fits(dtype, cols, cl):
                return cl
    if c.iters(cols) > MAX_ITERS or not softmax_fits(dtype, cols, c):
        c = SoftmaxCfg("online", 1024, vec)
        if not softmax_fits(dtype, cols, c):
            c = SoftmaxCfg("online", WARP, 1)
    return c


@dataclass(frozen=True)
class RmsCfg:
    threads: int
    vec: int
    rows: int = 1

    def defines(self, dtype, cols):
        return {"DTYPE": dtype, "COLS": cols, "THREADS": self.threads, "VEC": self.vec,
                "ROWS": self.rows}

    def launch_dims(self, rows):
        return cdiv(rows, self.rows), self.threads * self.rows

    def __str__(self):
        return f"t{self.threads} v{self.vec} r{self.rows}"


def rms_fits(dtype, cols, c):
    return (c.vec * SIZE[dtype] <= 16 and cols % c.vec == 0 and c.threads >= WARP
            and c.threads <= max(npow2(cols // c.vec), WARP))


def rms_space(dtype, cols):
    out = [RmsCfg(t, v, r) for t in (32, 64, 128, 256, 512, 1024) for v in (1, 2, 4, 8)
           for r in (1, 2, 4, 8, 16) if t * r <= 1024]
    return [c for c in out if rms_fits(dtype, cols, c)]


def rms_default(dtype, cols, rows):
    vec = widest_vec(dtype, cols)
    vectors = cdiv(cols, vec)
    threads = min(max(npow2(vectors // 4), WARP), 1024)
    while threads < 1024 and cdiv(vectors, threads) > MAX_ITERS:
        threads *= 2
    return RmsCfg(threads, vec, min(128 // threads, 16) if threads < 128 else 1)


# ---- compiling -----------------------------------------------------------------------

SOURCES = {"softmax": [nc.PRELUDE, nc.SOFTMAX], "rmsnorm": [nc.PRELUDE, nc.RMSNORM]}
ENTRY = {"softmax": ["softmax_kernel"], "rmsnorm": ["rmsnorm_kernel", "fused_add_rmsnorm_kernel"],
         "empty": ["empty_kernel"]}
EMPTY_SRC = 'extern "C" __global__ void empty_kernel() {}\n'


class Compiler:
    """Compiles (kind, defines) variants once each, in parallel, and loads them."""

    def __init__(self, arch, load=True):
        self.arch = arch
        self.load = load
        self.modules = {}
        self.errors = {}
        self.src = {k: nc.read_source(v) for k, v in SOURCES.items()}
        self.src["empty"] = EMPTY_SRC
        try:
            self.nvrtc = nc.Nvrtc(nc.find_nvrtc())
            self.how = f"NVRTC {self.nvrtc.version} ({self.nvrtc.path}), -arch={arch} " \
                       f"{' '.join(nc.BASE_OPTIONS)}"
        except (OSError, RuntimeError, SystemExit) as e:
            self.nvrtc = None
            self.how = f"cupy.RawModule fallback ({e})"

    def options(self, defines):
        return [f"-D{k}={v}" for k, v in defines.items()]

    @staticmethod
    def key(kind, defines):
        return kind, tuple(sorted(defines.items()))

    def _compile(self, kind, defines):
        if self.nvrtc is None:
            return None, ""
        opts = [f"-arch={self.arch}", *nc.BASE_OPTIONS, *self.options(defines)]
        ok, log, cubin = self.nvrtc.compile(self.src[kind], kind + ".cu", opts, want_cubin=True)
        return (cubin if ok else None), log

    def precompile(self, variants, jobs=None):
        todo = []
        for kind, d in variants:
            k = self.key(kind, d)
            if k not in self.modules and k not in self.errors and k not in {t[0] for t in todo}:
                todo.append((k, kind, d))
        t0 = time.time()
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 4) as pool:
            results = list(pool.map(lambda t: self._compile(t[1], t[2]), todo))
        for (k, kind, d), (cubin, log) in zip(todo, results):
            if self.nvrtc is not None and cubin is None:
                self.errors[k] = log
                continue
            self.modules[k] = self._load(kind, d, cubin) if self.load else True
        return len(todo), time.time() - t0

    def _load(self, kind, defines, cubin):
        import cupy

        if cubin is not None:
            m = cupy.cuda.function.Module()
            m.load(cubin)
        else:
            m = cupy.RawModule(code=self.src[kind], backend="nvrtc",
                               options=(*nc.BASE_OPTIONS, *self.options(defines)))
        return {name: m.get_function(name) for name in ENTRY[kind]}

    def get(self, kind, defines):
        k = self.key(kind, defines)
        if k not in self.modules and k not in self.errors:
            self.precompile([(kind, defines)], jobs=1)
        if k in self.errors:
            raise RuntimeError(f"compile failed: {kind} {defines}\n{self.errors[k]}")
        return self.modules[k]


# ---- device helpers (torch + cupy) -------------------------------------------------

torch = F = np = cupy = None


def import_gpu():
    global torch, F, np, cupy
    import numpy as np_
    import torch as torch_
    import torch.nn.functional as F_
    import cupy as cupy_

    torch, F, np, cupy = torch_, F_, np_, cupy_


def tdtype(d):
    return {0: torch.float32, 1: torch.float16, 2: torch.bfloat16}[d]


def ptr(t):
    return np.uint64(t.data_ptr())


def launch_softmax(fns, cfg, x, y, rows, scale, stream=None):
    grid, block = cfg.launch_dims(rows)
    fns["softmax_kernel"]((grid,), (block,), (ptr(x), ptr(y), np.int64(rows),
                                              np.int64(x.stride(0)), np.int64(y.stride(0)),
                                              np.float32(scale)), stream=stream)


def launch_rmsnorm(fns, cfg, x, w, y, rows, eps, stream=None):
    grid, block = cfg.launch_dims(rows)
    fns["rmsnorm_kernel"]((grid,), (block,), (ptr(x), np.int64(x.stride(0)), ptr(w), ptr(y),
                                              np.int64(y.stride(0)), np.int64(rows),
                                              np.float32(eps)), stream=stream)


def launch_fused(fns, cfg, x, r, w, rows, eps, stream=None):
    grid, block = cfg.launch_dims(rows)
    fns["fused_add_rmsnorm_kernel"]((grid,), (block,), (ptr(x), np.int64(x.stride(0)), ptr(r),
                                                        np.int64(r.stride(0)), ptr(w),
                                                        np.int64(rows), np.float32(eps)),
                                    stream=stream)


POISON = 1234.0


def strided(rows, cols, stride, dtype, offset=0, fill=None):
    """A [rows, cols] view with row stride `stride`, `offset` elements into a buffer
    (filled with `fill`, or random); returns (view, buffer)."""
    buf = torch.empty(offset + rows * stride + 16, dtype=dtype, device="cuda")
    if fill is None:
        buf.normal_()
    else:
        buf.fill_(fill)
    return buf[offset:offset + rows * stride].view(rows, stride)[:, :cols], buf


def untouched_outside(buf, view, fill):
    """True if every element of `buf` outside `view` still holds `fill`."""
    probe = buf.clone()
    offset = view.data_ptr() - buf.data_ptr()
    offset //= buf.element_size()
    rows, cols = view.shape
    probe_view = probe[offset:offset + rows * view.stride(0)].view(rows, view.stride(0))[:, :cols]
    probe_view.fill_(fill)
    return bool((probe == torch.tensor(fill, dtype=buf.dtype, device=buf.device)).all())


def compare(out, ref, tol):
    """None if `out` matches the float64 `ref` within (atol, rtol) with NaN exactly where
    ref is NaN and equal infinities; else a message. Also returns the worst err/bound."""
    atol, rtol = tol
    o = out.double()
    on, rn = torch.isnan(o), torch.isnan(ref)
    if not torch.equal(on, rn):
        bad = (on != rn).nonzero()
        i = tuple(bad[0].tolist())
        return f"NaN pattern differs at {len(bad)} elements, first {i}: got {o[i].item()} " \
               f"want {ref[i].item()}", math.inf
    inf = torch.isinf(ref)
    if not torch.equal(o[inf], ref[inf]):
        return "infinities differ", math.inf
    fin = ~rn & ~inf
    if not fin.any():
        return None, 0.0
    err = (o[fin] - ref[fin]).abs()
    bound = atol + rtol * ref[fin].abs()
    ratio = (err / bound).max().item()
    if not math.isfinite(ratio) or ratio > 1.0:
        idx = fin.nonzero()[(err / bound).argmax()].tolist()
        return f"error {err.max().item():.3g} > bound (worst err/bound {ratio:.3g} at {idx}: " \
               f"got {o[tuple(idx)].item()!r} want {ref[tuple(idx)].item()!r})", ratio
    return None, ratio


# Tolerances (atol, rtol): the same numbers as kernels-*/src/reference.rs `tolerance`.
SOFTMAX_TOL = {(0, False): (1e-6, 2e-5), (0, True): (2e-5, 2e-5), (1, False): (1e-5, 1.5e-3),
               (1, True): (2e-3, 1.5e-3), (2, False): (1e-5, 8e-3), (2, True): (1e-2, 8e-3)}
RMS_TOL = {0: (1e-6, 2e-5), 1: (1e-5, 1.5e-3), 2: (1e-5, 8e-3)}


# ---- correctness ---------------------------------------------------------------------

SOFTMAX_COLS = [1, 2, 3, 7, 31, 97, 128, 1000, 4096, 5003, 32000, 128256, 262144, 1048584,
                2000003]
RMS_COLS = [1, 2, 3, 7, 97, 128, 1000, 2048, 3584, 4096, 5120, 7168, 8192, 16384, 32768, 65536,
            131080, 262144]
MAX_CHECK_ELEMS = 1 << 23


def sample(space, defaults, k, rng):
    """The defaults, then configs of the space in random order, at most k (all: k=None)
    but at least two of each strategy / vector width present."""
    chosen = list(dict.fromkeys(defaults))
    rest = [c for c in space if c not in chosen]
    rng.shuffle(rest)
    if k is None:
        return chosen + rest
    groups = {}
    for c in rest:
        groups.setdefault((getattr(c, "strategy", ""), c.vec), []).append(c)
    for g in groups.values():
        chosen += g[:2]
    for c in rest:
        if len(chosen) >= k:
            break
        if c not in chosen:
            chosen.append(c)
    return chosen


SAMPLE = {"softmax": 14, "rmsnorm": 12}  # configs per (dtype, cols); --sample overrides


def softmax_cases(full, rng):
    cases = []
    for dtype in (0, 1, 2):
        for cols in SOFTMAX_COLS:
            space = softmax_space(dtype, cols)
            defaults = [softmax_default(dtype, cols, r) for r in (1, 7, 64, 16384)]
            for i, c in enumerate(sample(space, defaults, None if full else SAMPLE["softmax"], rng)):
                cases.append((dtype, cols, c, bool(i % 2), i))
    return cases


def rms_cases(full, rng):
    cases = []
    for dtype in (0, 1, 2):
        for cols in RMS_COLS:
            space = rms_space(dtype, cols)
            defaults = [rms_default(dtype, cols, 1)]
            for i, c in enumerate(sample(space, defaults, None if full else SAMPLE["rmsnorm"], rng)):
                cases.append((dtype, cols, c, i))
    return cases


def check_rows(cfg_rows, cols, special):
    rows = 2 * cfg_rows + 3 if cfg_rows > 1 else (6 if special else 3)
    return max(1, min(rows, MAX_CHECK_ELEMS // max(cols, 1)))


EXTRA = {}  # --defines: knobs added to every checked variant


def softmax_check(comp, dtype, cols, c, log, i, results):
    dt = tdtype(dtype)
    fns = comp.get("softmax", {**c.defines(dtype, cols, log), **EXTRA})
    scale = [1.0, 0.5, 1.7, -0.8][i % 4]
    variants = [("rows", check_rows(c.rows, cols, True))]
    if i == 0:
        variants.append(("1 row", 1))
    if i % 5 == 2:
        variants.append(("in place", check_rows(c.rows, cols, False)))
    for what, rows in variants:
        pad_x = c.vec * (1 + i % 3) if i % 2 else 0
        pad_y = c.vec * (2 - i % 2)
        off = 1 if (c.vec == 1 and i % 2) else 0  # misaligned base: only VEC = 1 allows it
        x, xbuf = strided(rows, cols, cols + pad_x, dt, off)
        x.mul_(3.0)
        if rows >= 5 and what != "in place":
            r1 = x[1]
            r1[torch.rand(cols, device="cuda") < 0.1] = -math.inf
            x[2, rng_index(cols, i)] = math.nan
            x[3, rng_index(cols, i + 1)] = math.inf
            x[4] = -math.inf
        ref64 = x.double() * scale
        ref = torch.log_softmax(ref64, -1) if log else torch.softmax(ref64, -1)
        if what == "in place":
            y, ybuf = x, xbuf
            before = xbuf.clone()
        else:
            y, ybuf = strided(rows, cols, cols + pad_y, dt, off, fill=POISON)
        launch_softmax(fns, c, x, y, rows, scale)
        torch.cuda.synchronize()
        msg, ratio = compare(y, ref, SOFTMAX_TOL[(dtype, log)])
        if msg is None and what == "in place":
            # everything outside the rows must equal the buffer as it was
            if not untouched_outside_vs(xbuf, before, x):
                msg = "in place: wrote outside the rows"
        elif msg is None and not untouched_outside(ybuf, y, POISON):
            msg = "wrote outside the rows (padding or beyond)"
        # torch in the storage type must agree on where NaN is.
        if msg is None and rows >= 5 and what != "in place":
            tx = x.float() * scale
            tref = torch.log_softmax(tx, -1) if log else torch.softmax(tx, -1)
            if not torch.equal(torch.isnan(tref), torch.isnan(y.float())):
                msg = "NaN pattern differs from torch.softmax in fp32"
        key = ("softmax", DNAME[dtype], bool(log))
        results.setdefault(key, {"cases": 0, "fail": [], "worst": 0.0})
        res = results[key]
        res["cases"] += 1
        res["worst"] = max(res["worst"], ratio if math.isfinite(ratio) else 0.0)
        if msg:
            res["fail"].append(f"{DNAME[dtype]} cols={cols} {c} log={int(log)} {what} rows={rows} "
                               f"scale={scale} off={off}: {msg}")


def untouched_outside_vs(buf, before, view):
    offset = (view.data_ptr() - buf.data_ptr()) // buf.element_size()
    rows, cols = view.shape
    a, b = buf.clone(), before.clone()
    for t in (a, b):
        t[offset:offset + rows * view.stride(0)].view(rows, view.stride(0))[:, :cols].zero_()
    return torch.equal(a, b)


def rng_index(cols, i):
    return (i * 7919 + 13) % cols


def rms_check(comp, dtype, cols, c, i, results):
    dt = tdtype(dtype)
    fns = comp.get("rmsnorm", {**c.defines(dtype, cols), **EXTRA})
    eps = [1e-6, 1e-5][i % 2]
    variants = [check_rows(c.rows, cols, True)] + ([1] if i == 0 else [])
    for rows in variants:
        pad = c.vec * (1 + i % 2) if i % 2 else 0
        off = 1 if (c.vec == 1 and i % 2) else 0
        w = torch.empty(cols + off, dtype=dt, device="cuda").normal_(1.0, 0.2)[off:]
        # plain
        x, _ = strided(rows, cols, cols + pad, dt, off)
        if rows >= 3:
            x[1, rng_index(cols, i)] = math.inf
            x[2, rng_index(cols, i + 3)] = math.nan
        y, ybuf = strided(rows, cols, cols + 2 * c.vec, dt, off, fill=POISON)
        launch_rmsnorm(fns, c, x, w, y, rows, eps)
        torch.cuda.synchronize()
        xd = x.double()
        ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()
        msg, ratio = compare(y, ref, RMS_TOL[dtype])
        if msg is None and not untouched_outside(ybuf, y, POISON):
            msg = "wrote outside the rows"
        record(results, ("rmsnorm", DNAME[dtype]), msg, ratio,
               f"{DNAME[dtype]} cols={cols} {c} rows={rows} eps={eps} off={off}")
        # fused, in place
        x, xbuf = strided(rows, cols, cols + pad, dt, off)
        r, rbuf = strided(rows, cols, cols + c.vec, dt, off)
        if rows >= 2:
            x[1, rng_index(cols, i)] = math.inf
        xb, rb = xbuf.clone(), rbuf.clone()
        want_r = x + r  # torch rounds the fp32 sum to the storage type, as the kernel must
        xd = want_r.double()
        want_x = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()
        launch_fused(fns, c, x, r, w, rows, eps)
        torch.cuda.synchronize()
        msg = None
        if not torch.equal(r, want_r):
            bad = (r != want_r).nonzero()
            msg = f"residual differs from round(x + residual) at {len(bad)} elements"
        if msg is None:
            msg, ratio = compare(x, want_x, RMS_TOL[dtype])
        if msg is None and not (untouched_outside_vs(xbuf, xb, x) and untouched_outside_vs(rbuf, rb, r)):
            msg = "wrote outside the rows"
        record(results, ("fused_add_rmsnorm", DNAME[dtype]), msg, ratio,
               f"{DNAME[dtype]} cols={cols} {c} rows={rows} eps={eps} off={off}")


def record(results, key, msg, ratio, what):
    res = results.setdefault(key, {"cases": 0, "fail": [], "worst": 0.0})
    res["cases"] += 1
    res["worst"] = max(res["worst"], ratio if math.isfinite(ratio) else 0.0)
    if msg:
        res["fail"].append(f"{what}: {msg}")


# ---- timing --------------------------------------------------------------------------


def time_us(fn, nsets, min_ms=3.0, reps=7):
    """Median over `reps` of (CUDA events around n back-to-back calls fn(i)) / n, in us;
    fn(i) uses input set i % nsets."""
    fn(0)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    fn(1 % nsets)
    e.record()
    e.synchronize()
    n = max(4, min(2000, int(min_ms / max(s.elapsed_time(e), 1e-3))))
    n = cdiv(n, nsets) * nsets
    out = []
    for _ in range(reps):
        s.record()
        for i in range(n):
            fn(i % nsets)
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e3 / n)
    return statistics.median(out), (max(out) - min(out)) / statistics.median(out)


def external_stream(ptr):
    """A cupy stream on torch's stream `ptr` (ExternalStream: seen working with cupy 14)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cupy.cuda.ExternalStream(ptr)


def graph_us(launch, n=64, reps=9):
    """Per-launch time from replaying a CUDA graph of n launches (decode batches)."""
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        launch(external_stream(side.cuda_stream))
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        cs = external_stream(torch.cuda.current_stream().cuda_stream)
        for _ in range(n):
            launch(cs)
    g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(reps):
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        out.append(s.elapsed_time(e) * 1e3 / n)
    return statistics.median(out)


def n_sets(set_bytes, l2):
    return max(1, min(64, cdiv(3 * l2, set_bytes)))


SOFTMAX_BENCH = [(2, 32768, 4096), (2, 16384, 8192), (1, 32768, 4096), (0, 16384, 4096),
                 (2, 4096, 32000), (2, 1024, 128256), (2, 4096, 128256), (2, 1024, 151936),
                 (0, 1024, 128256), (2, 64, 128256), (2, 256, 262144)]
RMS_BENCH = [(2, 32768, 4096), (2, 16384, 8192), (2, 16384, 7168), (2, 16384, 3584),
             (2, 16384, 2048), (1, 32768, 4096), (0, 16384, 4096), (2, 4096, 32768)]
DECODE = [("rmsnorm", 2, 4096, (1, 64)), ("fused_add_rmsnorm", 2, 4096, (1, 64)),
          ("softmax", 2, 128256, (1, 8, 64)), ("softmax", 2, 32000, (1, 64))]
COMPILE_SHAPES = {(2, 32768, 4096)}  # torch.compile peers (each compile costs ~30 s)


def softmax_candidates(dtype, cols, rows):
    vec = widest_vec(dtype, cols)
    long_row = cols >= 16384
    cands = [c for c in softmax_space(dtype, cols) if c.vec == vec and
             (c.strategy == "row" or c.threads >= (64 if long_row else 256))]
    d = softmax_default(dtype, cols, rows)
    return [d] + [c for c in cands if c != d]


def rms_candidates(dtype, cols, rows):
    vec = widest_vec(dtype, cols)
    d = rms_default(dtype, cols, rows)
    return [d] + [c for c in rms_space(dtype, cols) if c.vec == vec and c != d]


def load_liger():
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.softmax import LigerSoftmaxFunction

        return LigerSoftmaxFunction, LigerRMSNormFunction, LigerFusedAddRMSNormFunction
    except Exception as e:  # noqa: BLE001
        print(f"liger not available: {e}")
        return None


def copy_bandwidth(nbytes):
    """TB/s of torch's device-to-device copy of `nbytes` (bytes read + written)."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    us, spread = time_us(lambda i: dst.copy_(src), 1)
    return 2 * nbytes / us / 1e6, spread


def sweep(comp, kind, cands, defines_of, launch, nsets, knob_sets):
    """Times every candidate (plain build), then each knob set on the 3 best.
    Returns ({str(cfg): us}, best cfg, {knob label: (us, cfg)})."""
    times = {}
    for c in cands:
        fns = comp.get(kind, defines_of(c))
        times[c] = time_us(lambda i: launch(fns, c, i), nsets)[0]
    best = min(times, key=times.get)
    top = sorted(times, key=times.get)[:3]
    comp.precompile([(kind, {**defines_of(c), **k}) for k in knob_sets for c in top])
    knobs = {}
    for k in knob_sets:
        label = ",".join(f"{a}={b}" for a, b in k.items())
        res = []
        for c in top:
            try:
                fns = comp.get(kind, {**defines_of(c), **k})
                res.append((time_us(lambda i: launch(fns, c, i), nsets)[0], c))
            except Exception as e:  # noqa: BLE001
                print(f"  knob {label} {c}: {e}")
        if res:
            knobs[label] = min(res, key=lambda r: r[0])
    return times, best, knobs


def bench_all(comp, args, l2, liger):
    rows_out = []
    # Copy bandwidth: the ceiling every ratio is taken against.
    copy_tbs, spread = copy_bandwidth(1 << 30)
    copy_small, _ = copy_bandwidth(1 << 28)
    print(f"copy: {copy_tbs:.3f} TB/s (1 GiB -> 1 GiB, spread {spread:.1%}); "
          f"{copy_small:.3f} TB/s at 256 MiB", flush=True)
    ceiling = {"copy_tbs": copy_tbs, "copy_256MiB_tbs": copy_small}

    def add(kernel, dtype, rows, cols, nbytes, times, best, knobs, peers, default_cfg):
        tb = lambda t: nbytes / t / 1e6 if t else None  # noqa: E731
        t_best = times[best]
        row = {"kernel": kernel, "dtype": DNAME[dtype], "rows": rows, "cols": cols,
               "MiB": nbytes / 2**20, "default_cfg": str(default_cfg),
               "default_us": times[default_cfg], "default_tbs": tb(times[default_cfg]),
               "best_cfg": str(best), "best_us": t_best, "best_tbs": tb(t_best),
               "best_vs_copy": tb(t_best) / copy_tbs,
               "default_vs_copy": tb(times[default_cfg]) / copy_tbs,
               "all_us": {str(c): t for c, t in sorted(times.items(), key=lambda kv: kv[1])},
               "knobs": {k: {"us": t, "tbs": tb(t), "cfg": str(c), "vs_copy": tb(t) / copy_tbs}
                         for k, (t, c) in knobs.items()}}
        for name, t in peers.items():
            row[f"{name}_us"] = t
            row[f"{name}_tbs"] = tb(t)
            row[f"best_vs_{name}"] = (t / t_best) if t else None
        rows_out.append(row)
        peer_s = " ".join(f"{k} {tb(v):.2f}" for k, v in peers.items() if v)
        print(f"{kernel:18s} {DNAME[dtype]:4s} {rows:6d}x{cols:<7d} default {tb(times[default_cfg]):.2f} TB/s"
              f" ({default_cfg}); best {tb(t_best):.2f} ({best}) = {tb(t_best) / copy_tbs:.3f} of copy;"
              f" {peer_s}", flush=True)
        top = sorted(times, key=times.get)[:6]
        print("    top: " + "; ".join(f"{c} {tb(times[c]):.2f}" for c in top), flush=True)
        if knobs:
            print("    knobs: " + "; ".join(f"{k}: {tb(t):.2f} ({c})" for k, (t, c) in knobs.items()),
                  flush=True)

    lig_sm, lig_rms, lig_fused = liger if liger else (None, None, None)

    if "softmax" in args.only:
        variants = [("softmax", c.defines(d, cols, False)) for d, r, cols in SOFTMAX_BENCH
                    for c in softmax_candidates(d, cols, r)]
        n, dt_ = comp.precompile(variants)
        print(f"softmax bench: compiled {n} variants in {dt_:.1f}s", flush=True)
        for dtype, rows, cols in SOFTMAX_BENCH:
            try:
                dt = tdtype(dtype)
                nbytes = 2 * rows * cols * SIZE[dtype]
                ns = n_sets(nbytes, l2)
                xs = [torch.randn(rows, cols, device="cuda", dtype=dt) for _ in range(ns)]
                ys = [torch.empty_like(x) for x in xs]
                times, best, knobs = sweep(
                    comp, "softmax", softmax_candidates(dtype, cols, rows),
                    lambda c: c.defines(dtype, cols, False),
                    lambda fns, c, i: launch_softmax(fns, c, xs[i], ys[i], rows, 1.0), ns,
                    args.knob_sets)
                peers = {"torch": time_us(lambda i: torch.softmax(xs[i], -1), ns)[0]}
                if lig_sm and cols <= 65536 and nbytes >= 64 << 20:
                    peers["liger"] = time_us(lambda i: lig_sm.apply(xs[i]), ns)[0]
                if args.compile and (dtype, rows, cols) in COMPILE_SHAPES:
                    f = torch.compile(lambda x: torch.softmax(x.float(), -1).to(x.dtype))
                    peers["compile"] = time_us(lambda i: f(xs[i]), ns)[0]
                add("softmax", dtype, rows, cols, nbytes, times, best, knobs, peers,
                    softmax_default(dtype, cols, rows))
                del xs, ys
            except Exception:  # noqa: BLE001
                traceback.print_exc()

    if "rmsnorm" in args.only:
        variants = [("rmsnorm", c.defines(d, cols)) for d, r, cols in RMS_BENCH
                    for c in rms_candidates(d, cols, r)]
        n, dt_ = comp.precompile(variants)
        print(f"rmsnorm bench: compiled {n} variants in {dt_:.1f}s", flush=True)
        for dtype, rows, cols in RMS_BENCH:
            try:
                dt = tdtype(dtype)
                elem = rows * cols * SIZE[dtype]
                eps = 1e-6
                w = torch.randn(cols, device="cuda", dtype=dt)
                cands = rms_candidates(dtype, cols, rows)
                d = rms_default(dtype, cols, rows)
                compiled = args.compile and (dtype, rows, cols) in COMPILE_SHAPES
                # plain
                ns = n_sets(2 * elem, l2)
                xs = [torch.randn(rows, cols, device="cuda", dtype=dt) for _ in range(ns)]
                ys = [torch.empty_like(x) for x in xs]
                times, best, knobs = sweep(
                    comp, "rmsnorm", cands, lambda c: c.defines(dtype, cols),
                    lambda fns, c, i: launch_rmsnorm(fns, c, xs[i], w, ys[i], rows, eps), ns,
                    args.knob_sets)
                peers = {"torch": time_us(lambda i: F.rms_norm(xs[i], (cols,), w, eps), ns)[0]}
                if lig_rms and 2 * elem >= 64 << 20:
                    peers["liger"] = time_us(lambda i: lig_rms.apply(xs[i], w, eps), ns)[0]
                add("rmsnorm", dtype, rows, cols, 2 * elem, times, best, knobs, peers, d)
                del xs, ys
                # fused, in place
                ns = n_sets(4 * elem, l2)
                xs = [torch.randn(rows, cols, device="cuda", dtype=dt) for _ in range(ns)]
                rs = [torch.randn(rows, cols, device="cuda", dtype=dt) for _ in range(ns)]
                times, best, knobs = sweep(
                    comp, "rmsnorm", cands, lambda c: c.defines(dtype, cols),
                    lambda fns, c, i: launch_fused(fns, c, xs[i], rs[i], w, rows, eps), ns,
                    args.knob_sets)

                def torch_fused(i):
                    rs[i].add_(xs[i])
                    xs[i].copy_(F.rms_norm(rs[i], (cols,), w, eps))

                peers = {"torch": time_us(torch_fused, ns)[0]}
                if lig_fused and 4 * elem >= 64 << 20:
                    peers["liger"] = time_us(lambda i: lig_fused.apply(xs[i], rs[i], w, eps), ns)[0]
                if compiled:
                    def fused_eager(x, r, w):
                        r2 = x + r
                        return F.rms_norm(r2, (cols,), w, eps), r2
                    f = torch.compile(fused_eager)
                    peers["compile"] = time_us(lambda i: f(xs[i], rs[i], w), ns)[0]
                add("fused_add_rmsnorm", dtype, rows, cols, 4 * elem, times, best, knobs, peers, d)
                del xs, rs
            except Exception:  # noqa: BLE001
                traceback.print_exc()
    return ceiling, rows_out


def decode_all(comp):
    """Graph-replay time per launch of the default and of every candidate."""
    out = []
    empty = comp.get("empty", {})["empty_kernel"]
    t_empty = graph_us(lambda s: empty((1,), (32,), (), stream=s))
    print(f"empty kernel: {t_empty:.2f} us per launch (graph replay)", flush=True)
    for kernel, dtype, cols, rowss in DECODE:
        dt = tdtype(dtype)
        for rows in rowss:
            try:
                x = torch.randn(rows, cols, device="cuda", dtype=dt)
                y = torch.empty_like(x)
                w = torch.randn(cols, device="cuda", dtype=dt)
                if kernel == "softmax":
                    d = softmax_default(dtype, cols, rows)
                    cands = softmax_candidates(dtype, cols, rows)
                    comp.precompile([("softmax", c.defines(dtype, cols, False)) for c in cands])

                    def run(c, s):
                        fns = comp.get("softmax", c.defines(dtype, cols, False))
                        launch_softmax(fns, c, x, y, rows, 1.0, s)
                else:
                    d = rms_default(dtype, cols, rows)
                    cands = rms_candidates(dtype, cols, rows)
                    comp.precompile([("rmsnorm", c.defines(dtype, cols)) for c in cands])

                    def run(c, s):
                        fns = comp.get("rmsnorm", c.defines(dtype, cols))
                        if kernel == "rmsnorm":
                            launch_rmsnorm(fns, c, x, w, y, rows, 1e-6, s)
                        else:
                            launch_fused(fns, c, x, y, w, rows, 1e-6, s)
                times = {c: graph_us(lambda s: run(c, s), n=32, reps=5) for c in cands}
                best = min(times, key=times.get)
                out.append({"kernel": kernel, "dtype": DNAME[dtype], "rows": rows, "cols": cols,
                            "default_cfg": str(d), "default_us": times[d], "best_cfg": str(best),
                            "best_us": times[best], "empty_us": t_empty,
                            "all_us": {str(c): t for c, t in sorted(times.items(), key=lambda kv: kv[1])}})
                print(f"decode {kernel:18s} {rows:3d}x{cols:<6d}: default {times[d]:.2f} us ({d}); "
                      f"best {times[best]:.2f} us ({best}); empty {t_empty:.2f}", flush=True)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
    return out


# ---- main ----------------------------------------------------------------------------


def parse_defines(text):
    return {k: int(v) for k, v in (kv.split("=") for kv in text.split(",") if kv)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", default="softmax,rmsnorm")
    ap.add_argument("--full", action="store_true", help="check every config of every space")
    ap.add_argument("--sample", type=int, default=None, help="configs checked per (dtype, cols)")
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile peers")
    ap.add_argument("--dry-run", action="store_true", help="build variant lists and compile only")
    ap.add_argument("--arch", default=None, help="default: from the device (sm_90a on sm_90)")
    ap.add_argument("--defines", default="", help="K=V,... added to every checked variant")
    ap.add_argument("--knobs", default="KD_MIN_BLOCKS=2;KD_MIN_BLOCKS=5",
                    help="';'-separated define sets timed against the plain build on each "
                         "shape's 3 best configs ('' for none)")
    args = ap.parse_args()
    EXTRA.update(parse_defines(args.defines))
    if args.sample:
        SAMPLE.update(softmax=args.sample, rmsnorm=args.sample)
    args.knob_sets = [parse_defines(k) for k in args.knobs.split(";") if k]
    args.only = args.only.split(",")
    rng = random.Random(1234)
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv, "check_defines": EXTRA}
    t_start = time.time()

    if args.dry_run:
        comp = Compiler(args.arch or "sm_90a", load=False)
        variants = []
        if "softmax" in args.only:
            variants += [("softmax", c.defines(d, cols, log)) for d, cols, c, log, _ in softmax_cases(args.full, rng)]
            variants += [("softmax", c.defines(d, cols, False)) for d, r, cols in SOFTMAX_BENCH
                         for c in softmax_candidates(d, cols, r)]
        if "rmsnorm" in args.only:
            variants += [("rmsnorm", c.defines(d, cols)) for d, cols, c, _ in rms_cases(args.full, rng)]
            variants += [("rmsnorm", c.defines(d, cols)) for d, r, cols in RMS_BENCH
                         for c in rms_candidates(d, cols, r)]
        n, t = comp.precompile(variants)
        print(f"{comp.how}: {n} variants compiled in {t:.1f}s, {len(comp.errors)} failed")
        for k, log in list(comp.errors.items())[:5]:
            print(k, log[:2000])
        return 1 if comp.errors else 0

    import_gpu()
    torch.zeros(1, device="cuda")  # the primary context, current before cupy loads modules
    cupy.cuda.Device(0).use()
    prop = torch.cuda.get_device_properties(0)
    cc = torch.cuda.get_device_capability(0)
    arch = args.arch or f"sm_{cc[0]}{cc[1]}" + ("a" if cc[0] == 9 else "")
    l2 = getattr(prop, "L2_cache_size", 50 << 20)
    report["device"] = {"name": prop.name, "sms": prop.multi_processor_count, "l2_bytes": l2,
                        "cc": f"{cc[0]}.{cc[1]}", "torch": torch.__version__,
                        "cupy": cupy.__version__, "cuda_driver": cupy.cuda.runtime.driverGetVersion()}
    comp = Compiler(arch)
    report["compiler"] = comp.how
    print(f"{prop.name}, {prop.multi_processor_count} SMs, L2 {l2 >> 20} MiB; {comp.how}", flush=True)

    failures = 0
    if not args.skip_check:
        results = {}
        try:
            cases_s = softmax_cases(args.full, rng) if "softmax" in args.only else []
            cases_r = rms_cases(args.full, rng) if "rmsnorm" in args.only else []
            n, t = comp.precompile([("softmax", {**c.defines(d, cols, log), **EXTRA})
                                    for d, cols, c, log, _ in cases_s]
                                   + [("rmsnorm", {**c.defines(d, cols), **EXTRA}) for d, cols, c, _ in cases_r])
            print(f"check: compiled {n} variants in {t:.1f}s ({len(comp.errors)} failed)", flush=True)
            for k, log in comp.errors.items():
                print("COMPILE FAIL", k, log[:3000])
            failures += len(comp.errors)
            t0 = time.time()
            for n_case, (d, cols, c, log, i) in enumerate(cases_s):
                if n_case % 200 == 0:
                    print(f"  softmax case {n_case}/{len(cases_s)}", flush=True)
                try:
                    softmax_check(comp, d, cols, c, log, i, results)
                except Exception as e:  # noqa: BLE001
                    record(results, ("softmax", DNAME[d], bool(log)), f"{type(e).__name__}: {e}",
                           math.inf, f"{DNAME[d]} cols={cols} {c}")
            for n_case, (d, cols, c, i) in enumerate(cases_r):
                if n_case % 200 == 0:
                    print(f"  rmsnorm case {n_case}/{len(cases_r)}", flush=True)
                try:
                    rms_check(comp, d, cols, c, i, results)
                except Exception as e:  # noqa: BLE001
                    record(results, ("rmsnorm", DNAME[d]), f"{type(e).__name__}: {e}", math.inf,
                           f"{DNAME[d]} cols={cols} {c}")
            print(f"check: ran in {time.time() - t0:.1f}s", flush=True)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failures += 1
        report["check"] = {" ".join(map(str, k)): v for k, v in results.items()}
        for k, v in sorted(results.items(), key=lambda kv: str(kv[0])):
            failures += len(v["fail"])
            print(f"check {' '.join(map(str, k)):28s} {v['cases']:5d} cases, {len(v['fail'])} failed, "
                  f"worst err/bound {v['worst']:.3f}", flush=True)
            for f in v["fail"][:6]:
                print("   FAIL", f, flush=True)

    if not args.skip_bench:
        try:
            liger = load_liger()
            ceiling, rows = bench_all(comp, args, l2, liger)
            report["ceiling"], report["bench"] = ceiling, rows
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    if not args.skip_decode:
        try:
            report["decode"] = decode_all(comp)
        except Exception:  # noqa: BLE001
            traceback.print_exc()

    report["seconds"] = time.time() - t_start
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_check.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)

    # The compact table, last.
    if report.get("bench"):
        c = report["ceiling"]
        print(f"\ncopy {c['copy_tbs']:.3f} TB/s (1 GiB), {c['copy_256MiB_tbs']:.3f} TB/s (256 MiB)")
        print(f"{'kernel':18s} {'dtype':5s} {'shape':>14s} {'MiB':>6s} {'dflt TB/s':>9s} "
              f"{'best TB/s':>9s} {'best/copy':>9s} {'torch':>6s} {'liger':>6s} {'comp':>6s} "
              f"{'x torch':>7s} {'knob best':>9s}  best config")
        for r in report["bench"]:
            f2 = lambda v: f"{v:6.2f}" if v else "     -"  # noqa: E731
            print(f"{r['kernel']:18s} {r['dtype']:5s} {r['rows']:>6d}x{r['cols']:<7d} {r['MiB']:6.0f} "
                  f"{r['default_tbs']:9.3f} {r['best_tbs']:9.3f} {r['best_vs_copy']:9.3f} "
                  f"{f2(r.get('torch_tbs'))} {f2(r.get('liger_tbs'))} {f2(r.get('compile_tbs'))} "
                  f"{r.get('best_vs_torch') or 0:7.2f} "
                  f"{max([k['vs_copy'] for k in r['knobs'].values()], default=0):9.3f}  {r['best_cfg']}")
    print(f"\n{failures} failures; {report['seconds']:.0f}s", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
