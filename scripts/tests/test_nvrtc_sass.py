"""scripts/nvrtc_check.py's `--sass` reading of a disassembly (GPU-free, no nvdisasm: made-up
listings in nvdisasm's layout): the loop it inspects is the innermost one around each HGMMA,
not a longer one that also holds it (a barrier's retry path branching back into the loop), and
a loop that moves values into uniform registers is told apart from one that does not."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import nvrtc_check  # noqa: E402


def listing(lines):
    """nvdisasm -c's layout: labels on their own lines, instructions as /*addr*/ OP ... ;"""
    out, addr = [], 0
    for line in lines:
        if line.endswith(":"):
            out.append(line)
        else:
            out.append(f"        /*{addr:04x}*/                   {line} ;")
            addr += 16
    return "\n".join(out) + "\n"


def kernel(before_each_mma):
    return listing([
        "MOV R1, c[0x0][0x28]",
        ".L_x_0:",  # the tile loop: holds the k loop and the epilogue
        "UMOV UR4, 0x0",
        ".L_x_1:",  # the k loop
        ".L_x_2:",
        "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR8], R3",
        "@!P0 BRA `(.L_x_9)",
        "WARPGROUP.ARRIVE",
        *before_each_mma,
        "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR16], R24",
        *before_each_mma,
        "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR16], R24, gsb0",
        "WARPGROUP.DEPBAR.LE gsb0, 0x1",
        "ISETP.GE.AND P0, PT, R5, UR7, PT",
        "@!P0 BRA `(.L_x_1)",
        "R2UR UR6, R7",  # the epilogue may use them
        "@P1 BRA `(.L_x_0)",
        "EXIT",
        ".L_x_9:",  # the barrier's retry path, back into the k loop
        "@!P0 BRA `(.L_x_2)",
        "BRA `(.L_x_9)",
    ])


def test_the_innermost_loop_around_the_mmas():
    loops = nvrtc_check.wgmma_loops(kernel(["ULOP3.LUT UR16, UR38, 0x10002, URZ, 0xfc, !UPT"]))
    assert len(loops) == 1
    body = loops[0]
    assert nvrtc_check.opcode(body[0]).startswith("SYNCS")
    assert nvrtc_check.opcode(body[-1]) == "BRA"
    assert sum(nvrtc_check.opcode(i).startswith("HGMMA") for i in body) == 2
    # The epilogue's move lies outside the k loop.
    assert not any(nvrtc_check.opcode(i) == "R2UR" for i in body)


def test_moves_into_uniform_registers_in_the_loop_are_counted():
    loops = nvrtc_check.wgmma_loops(kernel(["R2UR UR16, R8", "@!P2 R2UR UR17, R9"]))
    assert len(loops) == 1
    assert sum(nvrtc_check.opcode(i) == "R2UR" for i in loops[0]) == 4


def test_opcode_skips_the_predicate():
    assert nvrtc_check.opcode("@!P0 R2UR UR4, R2") == "R2UR"
    assert nvrtc_check.opcode("R2UR UR4, R2") == "R2UR"
    assert nvrtc_check.opcode("HGMMA.64x64x16.F32.BF16 R24, gdesc[UR16], R24") == "HGMMA.64x64x16.F32.BF16"


def test_no_loop_no_report():
    assert nvrtc_check.wgmma_loops(listing(["HGMMA.64x16x16.F32.BF16 R24, gdesc[UR8], R24", "EXIT"])) == []
