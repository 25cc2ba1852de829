#!/usr/bin/env python3
"""Compile one kernel variant with NVRTC (no GPU) and count its SASS instructions.

For reading what a device-code change does to the instruction mix before spending GPU
time on it. Needs the NVRTC wheel (as scripts/nvrtc_check.py) and nvdisasm (the
nvidia-cuda-nvdisasm wheel, $NVDISASM or PATH).

    python3 scripts/sass_mix.py kernels-softmax/cuda/softmax.cu \
        -D DTYPE=2 -D COLS=128256 -D THREADS=1024 -D VEC=8 -D ROWS=1 -D STRATEGY=3 \
        -D SPLITS=1 -D LOG_SOFTMAX=0 -D STAGE_VECS=14336 -D PREFETCH_ROWS=0 [--sass F]
    python3 scripts/sass_mix.py kernels-gemm/cuda/gemm_ptx.cuh kernels-gemm/cuda/gemm_wgmma.cuh \
        kernels-gemm/cuda/gemm.cu -D DTYPE=2 -D WGMMA=1 -D BX=128 -D BY=64 -D CONSUMERS=2 -D STAGES=8

Prints the static count per opcode (whole kernel; loops count once), ptxas' register
and spill line, and the instruction and HGMMA counts of each warpgroup-MMA main loop (those
`nvrtc_check.py --sass` reads).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nvrtc_check  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="kernel sources in order (a kernel's headers, "
                    "then its .cu); the prelude is prepended")
    ap.add_argument("-D", dest="defines", action="append", default=[], help="NAME=VALUE")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--sass", help="also write the disassembly here")
    args = ap.parse_args()

    src = nvrtc_check.read_source([nvrtc_check.PRELUDE, *args.sources])
    opts = nvrtc_check.BASE_OPTIONS + [f"-arch={args.arch}", "-Xptxas", "-v"] + [f"-D{d}" for d in args.defines]
    nv = nvrtc_check.Nvrtc(nvrtc_check.find_nvrtc())
    ok, log, cubin = nv.compile(src, os.path.basename(args.sources[-1]), opts, want_cubin=True)
    if not ok:
        print(log, file=sys.stderr)
        return 1
    for line in log.splitlines():
        if "registers" in line or "spill" in line:
            print(line.strip())
    nvdisasm = nvrtc_check.find_nvdisasm()
    if nvdisasm is None:
        sys.exit("sass_mix: no nvdisasm; `pip install nvidia-cuda-nvdisasm` or set NVDISASM")
    sass = nvrtc_check.disassemble(nvdisasm, cubin)
    if args.sass:
        with open(args.sass, "w", encoding="utf-8") as out:
            out.write(sass)
    ops = collections.Counter(nvrtc_check.opcode(i) for i in nvrtc_check.SASS_INSTR.findall(sass))
    total = sum(ops.values())
    print(f"{total} instructions")
    problems, loops = nvrtc_check.sass_problems(sass)
    for loop in loops:
        print(f"wgmma loop: {loop}")
    for problem in problems:
        print(problem)
    for op, n in ops.most_common():
        print(f"{n:6d} {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
