#!/usr/bin/env python3
"""Compile kernel variants with NVRTC, without a GPU.

Each variant is a list of source files, concatenated in order (the prelude first, as
the Rust host does; a #line directive keeps error positions per file), and a set of
-D defines. A variant that fails to compile fails the run: the script names it,
prints NVRTC's log and exits 1.

NVRTC comes from the nvidia-cuda-nvrtc wheel (`pip install nvidia-cuda-nvrtc`:
nvidia/cu13/lib/libnvrtc.so.13 in the 13.x wheels, nvidia/cuda_nvrtc/lib in the
12.x ones), or from $NVRTC_LIB, or from the system's library path.

Input: a JSON list on stdin or in a file, one object per variant:

    {"name": "softmax bf16 4096 row",            # optional, defaults to the defines
     "sources": ["kernels-prelude/cuda/prelude.cuh", "kernels-softmax/cuda/softmax.cu"],
     "defines": {"DTYPE": 2, "COLS": 4096, "THREADS": 128, "VEC": 8, "ROWS": 1,
                 "STRATEGY": 0, "SPLITS": 1, "LOG_SOFTMAX": 0, "KEEP": 0},
     "archs": ["sm_90a", "sm_80"],               # optional, else --arch
     "kernels": ["softmax_kernel"]}              # optional: names that must exist

Relative source paths are taken from the repository root (this script's parent's
parent). `--smoke` checks a built-in sample of softmax and RMSNorm configs instead
(awkward lengths, every strategy, dtype and vector width); it mirrors the crates'
pruning rules loosely and is no substitute for the list the Rust side derives.

Examples:
    python3 scripts/nvrtc_check.py --smoke
    python3 scripts/nvrtc_check.py variants.json --arch sm_90a --arch sm_80 -v
    python3 scripts/nvrtc_check.py - < variants.json     # e.g. written by the Rust side

Each variant may also carry "options" (extra NVRTC options, e.g. "-DKD_MIN_BLOCKS=2").

`--digest FILE` writes a JSON object mapping each variant (name, arch, defines and
options) to the SHA-256 of its cubin. Two digests taken before and after a change to the sources show whether any
variant's machine code changed (a refactor that should change nothing):

    python3 scripts/nvrtc_check.py variants.json --arch sm_90a --digest before.json
    # ... edit ...
    python3 scripts/nvrtc_check.py variants.json --arch sm_90a --digest after.json
    cmp before.json after.json

`--sass KERNEL` (repeatable) disassembles the sm_90a cubin of every variant with entry
point KERNEL (nvdisasm from the nvidia-cuda-nvdisasm wheel, $NVDISASM or PATH) and fails
one whose warpgroup-MMA main loop (the innermost loop around each HGMMA) moves values into
uniform registers (`R2UR`): the wgmma descriptors then come from per-thread registers, a
few instructions before every HGMMA (a warpgroup index the compiler does not know is
warp-uniform did this; docs/results/gemm.md). With `-v` it prints each such loop's
instruction and HGMMA counts.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import glob
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRELUDE = "kernels-prelude/cuda/prelude.cuh"
SOFTMAX = "kernels-softmax/cuda/softmax.cu"
RMSNORM = "kernels-rmsnorm/cuda/rmsnorm.cu"

# The options the Rust host passes besides -arch and the defines.
BASE_OPTIONS = ["-std=c++17"]


def find_nvrtc() -> str:
    """Path of libnvrtc: $NVRTC_LIB, then the pip wheels, then the system."""
    env = os.environ.get("NVRTC_LIB")
    if env:
        return env
    candidates = []
    spec = importlib.util.find_spec("nvidia")
    for base in list(spec.submodule_search_locations) if spec else []:
        for sub in ("cu13/lib", "cuda_nvrtc/lib", "cu12/lib"):
            candidates += sorted(glob.glob(os.path.join(base, sub, "libnvrtc.so*")))
    candidates += sorted(glob.glob("/usr/local/cuda*/lib64/libnvrtc.so*"))
    # The unversioned or major-versioned name, not libnvrtc-builtins.
    for c in candidates:
        if re.search(r"libnvrtc\.so(\.\d+)?$", c):
            return c
    found = ctypes.util.find_library("nvrtc")
    if found:
        return found
    sys.exit("nvrtc_check: no libnvrtc found; `pip install nvidia-cuda-nvrtc` or set NVRTC_LIB")


def find_nvdisasm() -> str | None:
    """Path of nvdisasm: $NVDISASM, then the nvidia-cuda-nvdisasm wheel, then PATH."""
    env = os.environ.get("NVDISASM")
    if env:
        return env
    spec = importlib.util.find_spec("nvidia")
    for base in list(spec.submodule_search_locations) if spec else []:
        for sub in ("cu13/bin", "cuda_nvdisasm/bin", "cu12/bin"):
            path = os.path.join(base, sub, "nvdisasm")
            if os.access(path, os.X_OK):
                return path
    return shutil.which("nvdisasm")


SASS_INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
SASS_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
SASS_BRANCH = re.compile(r"\bBRA\b.*`\((\.L_x_\d+)\)")


def opcode(instr: str) -> str:
    """The opcode of one SASS instruction, past its predicate (`@!P0 R2UR UR4, R2` -> R2UR)."""
    words = instr.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def wgmma_loops(sass: str) -> list[list[str]]:
    """The innermost loop around each HGMMA of a disassembly (nvdisasm -c): the shortest
    run from a label to a branch back to it that holds the HGMMA, as its instructions,
    each loop once, in order."""
    instrs, labels = [], {}
    for line in sass.splitlines():
        m = SASS_LABEL.match(line)
        if m:
            labels[m.group(1)] = len(instrs)
            continue
        m = SASS_INSTR.search(line)
        if m:
            instrs.append(m.group(1))
    loops = []
    for end, ins in enumerate(instrs):
        m = SASS_BRANCH.search(ins)
        if m and labels.get(m.group(1), end + 1) <= end:
            loops.append((labels[m.group(1)], end))
    found = set()
    for at, ins in enumerate(instrs):
        if not opcode(ins).startswith("HGMMA"):
            continue
        around = [(b, e) for b, e in loops if b <= at <= e]
        if around:
            found.add(min(around, key=lambda r: r[1] - r[0]))
    return [instrs[b:e + 1] for b, e in sorted(found)]


def disassemble(nvdisasm: str, cubin: bytes) -> str:
    """nvdisasm -c of a cubin."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout


def sass_problems(sass: str) -> tuple[list[str], list[str]]:
    """(problems, loop summaries) of one disassembly's warpgroup-MMA loops (see `--sass`)."""
    problems, summary = [], []
    for body in wgmma_loops(sass):
        ops = [opcode(i) for i in body]
        hgmma = sum(op.startswith("HGMMA") for op in ops)
        moves = sum(op.startswith("R2UR") for op in ops)
        summary.append(f"{len(body)} instructions, {hgmma} HGMMA")
        if moves:
            problems.append(f"a wgmma loop of {len(body)} instructions moves {moves} values into "
                            f"uniform registers (R2UR) around its {hgmma} HGMMA")
    return problems, summary


class Nvrtc:
    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "version")
        self.version = f"{major.value}.{minor.value}"

    def _check(self, rc: int, what: str):
        if rc != 0:
            raise RuntimeError(f"nvrtc {what}: {self.lib.nvrtcGetErrorString(rc).decode()}")

    def compile(self, source: str, name: str, options: list[str], want_cubin=False):
        """Returns (ok, log, cubin size), or (ok, log, cubin) with `want_cubin`."""
        prog = ctypes.c_void_p()
        self._check(
            self.lib.nvrtcCreateProgram(
                ctypes.byref(prog), source.encode(), name.encode(), 0, None, None
            ),
            "create",
        )
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            rc = self.lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)), "log size")
            buf = ctypes.create_string_buffer(size.value)
            self._check(self.lib.nvrtcGetProgramLog(prog, buf), "log")
            log = buf.value.decode(errors="replace")
            if rc != 0:
                return False, log or self.lib.nvrtcGetErrorString(rc).decode(), 0
            cubin = ctypes.c_size_t()
            self._check(self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(cubin)), "cubin size")
            if not want_cubin:
                return True, log, cubin.value
            data = ctypes.create_string_buffer(cubin.value)
            self._check(self.lib.nvrtcGetCUBIN(prog, data), "cubin")
            return True, log, data.raw
        finally:
            self.lib.nvrtcDestroyProgram(ctypes.byref(prog))


def read_source(paths: list[str]) -> str:
    parts = []
    for p in paths:
        full = p if os.path.isabs(p) else os.path.join(ROOT, p)
        with open(full, encoding="utf-8") as f:
            parts.append(f'#line 1 "{p}"\n' + f.read())
    return "\n".join(parts)


def variant_name(v: dict) -> str:
    if v.get("name"):
        return v["name"]
    src = os.path.basename(v["sources"][-1])
    return src + " " + " ".join(f"{k}={val}" for k, val in v.get("defines", {}).items())


# ---- the built-in smoke sample ---------------------------------------------------

DTYPE_SIZE = {0: 4, 1: 2, 2: 2}


def smoke_variants() -> list[dict]:
    out = []
    sm_defs = lambda **d: {"sources": [PRELUDE, SOFTMAX], "defines": d}  # noqa: E731
    rn_defs = lambda **d: {"sources": [PRELUDE, RMSNORM], "defines": d}  # noqa: E731
    for dtype in (0, 1, 2):
        size = DTYPE_SIZE[dtype]
        for cols in (1, 7, 97, 4096, 4097, 5120, 50257, 128256, 262144):
            for vec in (1, 2, 4, 8):
                # Any length takes any vector: the kernels read a row's head and tail
                # elements one at a time.
                if vec * size > 16:
                    continue
                nvec = cols // vec
                for threads in (32, 128, 1024):
                    iters = -(-nvec // threads)
                    useful = max(1 << max(nvec - 1, 0).bit_length(), 32)
                    rows = max(1, min(16, 128 // threads))
                    if iters <= 16 and threads <= useful:
                        for log, keep in ((0, 0), (1, 0), (0, 1)):
                            out.append(sm_defs(DTYPE=dtype, COLS=cols, THREADS=threads, VEC=vec,
                                               ROWS=rows, STRATEGY=0, SPLITS=1, LOG_SOFTMAX=log,
                                               KEEP=keep))
                    if cols > threads * vec:
                        out.append(sm_defs(DTYPE=dtype, COLS=cols, THREADS=threads, VEC=vec,
                                           ROWS=1, STRATEGY=1, SPLITS=1, LOG_SOFTMAX=0, KEEP=0))
                    for splits in (2, 8):
                        it = -(-nvec // (threads * splits))
                        if it <= 16 and cols >= threads * vec * splits:
                            for log, keep in ((1, 0), (0, 1)):
                                v = sm_defs(DTYPE=dtype, COLS=cols, THREADS=threads, VEC=vec,
                                            ROWS=1, STRATEGY=2, SPLITS=splits, LOG_SOFTMAX=log,
                                            KEEP=keep)
                                v["archs"] = ["sm_90a"]
                                out.append(v)
                    if threads <= useful:
                        out.append(rn_defs(DTYPE=dtype, COLS=cols, THREADS=threads, VEC=vec,
                                           ROWS=rows))
    for v in out:
        v["kernels"] = (["softmax_kernel"] if v["sources"][-1] == SOFTMAX
                        else ["rmsnorm_kernel", "fused_add_rmsnorm_kernel"])
    return out


# ---- main ------------------------------------------------------------------------

PTXAS_FRAME = re.compile(r"Function properties for (\w+)\s+ptxas\s+\.\s+(\d+) bytes stack frame, "
                         r"(\d+) bytes spill stores")
PTXAS_REGS = re.compile(r"Used (\d+) registers")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="?", help="JSON file with the variants ('-' or none: stdin)")
    ap.add_argument("--smoke", action="store_true", help="check the built-in sample instead")
    ap.add_argument("--arch", action="append", help="target(s) for variants naming none "
                    "(default: sm_90a and sm_80)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print registers, stack and spills per variant (ptxas -v)")
    ap.add_argument("--digest", metavar="FILE",
                    help="write the SHA-256 of every variant's cubin to FILE (JSON)")
    ap.add_argument("--sass", action="append", metavar="KERNEL",
                    help="fail sm_90a variants of entry point KERNEL (repeatable) whose wgmma "
                    "loops move values into uniform registers (R2UR); needs nvdisasm")
    args = ap.parse_args()
    nvdisasm = None
    if args.sass:
        nvdisasm = find_nvdisasm()
        if nvdisasm is None:
            sys.exit("nvrtc_check: --sass needs nvdisasm; `pip install nvidia-cuda-nvdisasm` or set NVDISASM")

    if args.smoke:
        variants = smoke_variants()
    elif args.variants in (None, "-"):
        variants = json.load(sys.stdin)
    else:
        with open(args.variants, encoding="utf-8") as f:
            variants = json.load(f)
    default_archs = args.arch or ["sm_90a", "sm_80"]

    nvrtc = Nvrtc(find_nvrtc())
    print(f"nvrtc {nvrtc.version} ({nvrtc.path}); {len(variants)} variants", flush=True)

    jobs = []
    for v in variants:
        src = read_source(v["sources"])
        for arch in v.get("archs", default_archs):
            opts = [f"-arch={arch}", *BASE_OPTIONS]
            opts += [f"-D{k}={val}" for k, val in v.get("defines", {}).items()]
            opts += v.get("options", [])
            if args.verbose:
                opts.append("-Xptxas=-v")
            jobs.append((v, arch, src, opts))

    def run(job):
        v, arch, src, opts = job
        ok, log, size = nvrtc.compile(src, os.path.basename(v["sources"][-1]), opts,
                                      want_cubin=bool(args.digest or nvdisasm))
        loops = []
        if ok and nvdisasm and arch == "sm_90a" and set(args.sass) & set(v.get("kernels", [])):
            problems, loops = sass_problems(disassemble(nvdisasm, size))
            if problems:
                ok, log = False, "\n".join(problems) + "\n" + log
        if ok and args.digest:
            size = hashlib.sha256(size).hexdigest()
        if ok:
            missing = [k for k in v.get("kernels", []) if k not in src]
            if missing:
                ok, log = False, f"entry points not in the source: {missing}\n" + log
        return v, arch, ok, log, size, loops

    failures = 0
    digests = {}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for v, arch, ok, log, size, loops in pool.map(run, jobs):
            name = f"{variant_name(v)} [{arch}]"
            if not ok:
                failures += 1
                print(f"FAIL {name}\n{log.rstrip()}\n", flush=True)
                continue
            if args.digest:
                # Names need not be unique (a name may leave out a define); the key is.
                defines = json.dumps(v.get("defines", {}), sort_keys=True)
                digests[f"{name} {defines} {' '.join(v.get('options', []))}".rstrip()] = size
            if args.verbose:
                info = "; ".join(
                    f"{k}: {r} regs, {st} B stack, {sp} B spill"
                    for (k, st, sp), r in zip(PTXAS_FRAME.findall(log), PTXAS_REGS.findall(log))
                )
                shown = "".join(f"; wgmma loop: {x}" for x in loops)
                print(f"ok   {name}: {info}{shown}", flush=True)
    print(f"{len(jobs) - failures}/{len(jobs)} compiled", flush=True)
    if args.digest:
        tmp = args.digest + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(dict(sorted(digests.items())), f, indent=1)
            f.write("\n")
        os.replace(tmp, args.digest)
    if failures:
        print(f"nvrtc_check: {failures} variant(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
