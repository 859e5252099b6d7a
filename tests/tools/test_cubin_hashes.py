"""``tools/cubin_hashes.py`` without compiling: the builds it covers, how it reads ptxas and how
it compares two runs."""

from __future__ import annotations

import pytest

from tests.scripts import load_script

LOG = """ptxas info    : Compiling entry function 'attention_bwd' for 'sm_80'
ptxas info    : Function properties for attention_bwd
    24 bytes stack frame, 24 bytes spill stores, 24 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 600 bytes cmem[0]
ptxas info    : Compiling entry function 'attention_bwd_prep' for 'sm_80'
ptxas info    : Function properties for attention_bwd_prep
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers
"""


@pytest.fixture(scope="module")
def tool():
    return load_script("tools/cubin_hashes")


def test_every_build_a_plan_can_choose_is_covered(tool):
    names = [build.name for build in tool.builds()]
    assert len(names) == len(set(names)) == 84
    families = (("forward-sm80", 8), ("forward-sm90", 16), ("backward", 44), ("backward-sm90_", 36),
                ("sdd", 16))  # fmt: skip
    for family, count in families:
        assert sum(name.startswith(family) for name in names) == count, family
    assert all(b.targets == ("sm_90a",) for b in tool.builds() if "sm90" in b.name)
    assert all(b.source.is_file() for b in tool.builds())
    tokens = {b.name: dict(b.defines).get("TOKENS") for b in tool.builds()
              if "sm90_" in b.name or b.name.startswith("forward-sm90")}  # fmt: skip
    assert all(value == name.endswith("-tokens") for name, value in tokens.items())
    tall = {b.name: dict(b.defines)["BLOCK_M"] for b in tool.builds() if "bulk" in b.name}
    assert all(value == (128 if "-rows128" in name else 64) for name, value in tall.items())
    assert sum(value == 128 for value in tall.values()) == 4  # bf16, fp16; with token tiles


def test_ptxas_resources_are_read_per_kernel(tool):
    assert tool.parse_ptxas(LOG) == {
        "attention_bwd": {"stack": 24, "spill_stores": 24, "spill_loads": 24, "registers": 255,
                          "params": 600},
        "attention_bwd_prep": {"stack": 0, "spill_stores": 0, "spill_loads": 0, "registers": 24},
    }  # fmt: skip


def test_a_comparison_names_what_changed_and_flags_what_got_worse(tool):
    kernels = tool.parse_ptxas(LOG)
    old = {"b": {"sm_80": {"sha256": "1", "kernels": kernels}}}
    same = tool.compare(old, old)
    assert same == (["b sm_80: identical"], False)
    fewer = {**kernels, "attention_bwd": {**kernels["attention_bwd"], "registers": 250}}
    lines, worse = tool.compare(old, {"b": {"sm_80": {"sha256": "2", "kernels": fewer}}})
    assert lines == ["b sm_80: differs (attention_bwd registers 255 -> 250)"] and not worse
    spills = {**kernels, "attention_bwd_prep": {**kernels["attention_bwd_prep"], "stack": 8}}
    assert tool.compare(old, {"b": {"sm_80": {"sha256": "1", "kernels": spills}}})[1]
    prep = {**kernels["attention_bwd_prep"], "registers": 26}  # allocated: 32 a thread
    start = {"b": {"sm_80": {"sha256": "1", "kernels": {**kernels, "attention_bwd_prep": prep}}}}
    for registers, got_worse in ((30, False), (32, False), (33, True)):
        more = {**kernels, "attention_bwd_prep": {**prep, "registers": registers}}
        assert tool.compare(start, {"b": {"sm_80": {"sha256": "2", "kernels": more}}})[1] == (
            got_worse
        )
    assert tool.compare(old, {}) == (["b: only in the old run"], True)


def test_sass_registers_are_read_per_kernel_and_reported_but_cost_nothing(tool):
    listing = """.text.producer:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   IMAD.WIDE R2, R7, 0x4, R2 ;
.text.consumer:
        /*0000*/                   HGMMA.64x64x16.F32.BF16 R88, R72, gdesc[UR20], R88 ;
        /*0010*/                   FSEL R237, R12, -INF , P0 ;
"""
    assert tool.sass_registers(listing) == {"producer": 8, "consumer": 238}
    kernels = {"k": {"registers": 168, "sass_registers": 230}}
    old = {"b": {"sm_90a": {"sha256": "1", "kernels": kernels}}}
    more = {"k": {"registers": 168, "sass_registers": 238}}
    lines, worse = tool.compare(old, {"b": {"sm_90a": {"sha256": "2", "kernels": more}}})
    assert lines == ["b sm_90a: differs (k sass_registers 230 -> 238)"] and not worse
