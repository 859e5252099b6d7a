"""``tools/sass_loop.py`` on a hand-written SASS listing: which loop it takes, what it counts as
skippable, the fast path; and, where nvcc and cuobjdump are installed, on a real build."""

from __future__ import annotations

import shutil

import pytest

from tests.scripts import load_script

# A prologue, a wait loop without tensor work, an outer loop around an inner one whose body
# issues HGMMA and may skip a masked region, and an out-of-line retry stub branching back in.
LISTING = """
        Function : kernel
        /*0000*/                   MOV R1, c[0x0][0x28] ;                 /* 0x0000 */
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0020*/              @!P0 BRA 0x10 ;
        /*0030*/                   IMAD.MOV.U32 R4, RZ, RZ, RZ ;
        /*0040*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0050*/                   FMNMX.FTZ R5, R24, R25, !PT ;
        /*0060*/               @P1 BRA 0x90 ;
        /*0070*/                   FSEL R24, R24, -INF , P2 ;
        /*0080*/                   FSEL R25, R25, -INF , P3 ;
        /*0090*/                   MUFU.EX2 R24, R24 ;
        /*00a0*/              @!P4 BRA 0x100 ;
        /*00b0*/              @!P5 BRA 0x40 ;
        /*00c0*/                   IADD3 R4, R4, 0x1, RZ ;
        /*00d0*/              @!P6 BRA 0x30 ;
        /*00e0*/                   EXIT ;
        /*0100*/                   NOP ;
        /*0110*/                   BRA 0x40 ;
        Function : prep
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   EXIT ;
"""


@pytest.fixture(scope="module")
def tool():
    return load_script("tools/sass_loop")


def test_kernels_and_opcodes_are_read(tool):
    kernels = tool.parse_sass(LISTING)
    assert list(kernels) == ["kernel", "prep"]
    assert [i.pc for i in kernels["prep"]] == [0, 0x10]
    branch = kernels["kernel"][2]
    assert (branch.opcode, branch.branch_target) == ("BRA", 0x10)
    assert kernels["kernel"][4].opcode == "HGMMA" and kernels["kernel"][4].branch_target is None


def test_the_shortest_loop_with_tensor_work_is_the_main_loop(tool):
    code = tool.parse_sass(LISTING)["kernel"]
    # not the wait loop (no HGMMA), nor the outer loop or the stub's branch back (longer)
    assert tool.main_loop(code) == (0x40, 0xB0)
    assert tool.main_loop(tool.parse_sass(LISTING)["prep"]) is None
    assert tool.loop_report(tool.parse_sass(LISTING)["prep"]) is None


def test_regions_a_branch_may_skip_and_the_fast_path(tool):
    report = tool.loop_report(tool.parse_sass(LISTING)["kernel"])
    assert report["loop"] == ["0x40", "0xb0"]
    assert report["instructions"] == 8
    assert report["by_opcode"] == {"BRA": 3, "FSEL": 2, "HGMMA": 1, "FMNMX": 1, "MUFU": 1}
    # the masked region is skippable; the exit to 0x100 leaves the loop and is not
    assert report["skippable"] == [{"branch": "0x60", "to": "0x90", "instructions": 2,
                                    "by_opcode": {"FSEL": 2}}]  # fmt: skip
    assert report["fast_path"] == {
        "instructions": 6,
        "by_opcode": {"BRA": 3, "HGMMA": 1, "FMNMX": 1, "MUFU": 1},
    }


def test_unknown_builds_are_refused(tool, capsys):
    with pytest.raises(SystemExit):
        tool.main(["no-such-build"])
    assert "unknown ['no-such-build']" in capsys.readouterr().err


@pytest.mark.skipif(not (shutil.which("nvcc") and shutil.which("cuobjdump")),
                    reason="needs nvcc and cuobjdump")  # fmt: skip
def test_the_forward_build_has_its_loop_and_tensor_work(tool, tmp_path):
    out = tmp_path / "loops.json"
    assert tool.main(["forward-sm90-bf16-d64-64x128-s3-c1-b2", "--json", str(out)]) == 0
    report = out.read_text()
    assert '"HGMMA": 12' in report and '"MUFU"' in report
