#!/usr/bin/env python3
"""Compile kernel variants for AMD GPUs with clang, device code only, no GPU needed.

Reads the JSON list `kernels variants --target gfx942` prints (the format of
scripts/nvrtc_check.py: sources concatenated in order, -D defines, archs, expected
kernel names) and compiles each variant with

    clang-19 -x hip --offload-arch=ARCH --cuda-device-only -nogpulib -S -O3
             -include hip/hip_runtime.h -D...

using the HIP headers of Debian's libamdhip64-dev. A variant that fails to compile,
or whose assembly lacks an expected kernel, fails the run: the script names it,
prints clang's output and exits 1.

    kernels variants --target gfx942 | python3 scripts/hip_check.py -
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_one(clang, variant, arch, workdir, index):
    text = []
    for src in variant["sources"]:
        path = os.path.join(ROOT, src)
        text.append(f'#line 1 "{src}"\n')
        with open(path) as f:
            text.append(f.read())
        text.append("\n")
    src_path = os.path.join(workdir, f"v{index}_{arch}.hip")
    asm_path = src_path[:-4] + ".s"
    with open(src_path, "w") as f:
        f.write("".join(text))
    cmd = [clang, "-x", "hip", f"--offload-arch={arch}", "--cuda-device-only", "-nogpulib", "-S", "-O3",
           "-include", "hip/hip_runtime.h", "-o", asm_path, src_path]
    cmd += [f"-D{k}={v}" for k, v in variant.get("defines", {}).items()]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return f"clang exited {r.returncode}\n{r.stderr[-4000:]}"
    with open(asm_path) as f:
        asm = f.read()
    missing = [k for k in variant.get("kernels", []) if k not in asm]
    if missing:
        return f"compiled, but the assembly has no kernel named {missing}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", help="JSON file, or - for stdin")
    ap.add_argument("--clang", default=os.environ.get("HIP_CLANG", "clang-19"))
    ap.add_argument("-j", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    clang = shutil.which(args.clang)
    if not clang:
        sys.exit(f"hip_check: `{args.clang}` not found (install clang-19, lld-19 and libamdhip64-dev)")
    data = json.load(sys.stdin if args.variants == "-" else open(args.variants))
    jobs = [(i, v, a) for i, v in enumerate(data) for a in v.get("archs", [])]
    failed = 0
    with tempfile.TemporaryDirectory() as work, ThreadPoolExecutor(args.j) as pool:
        results = pool.map(lambda j: (j, compile_one(clang, j[1], j[2], work, j[0])), jobs)
        for (i, v, arch), err in results:
            if err:
                failed += 1
                print(f"FAIL {v.get('name', v.get('defines'))} [{arch}]: {err}")
    print(f"{len(jobs) - failed}/{len(jobs)} compiled ({clang})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
