"""``benchmarks/api_overhead.py`` on the GPU, shortened: every way to call runs and is timed."""

from __future__ import annotations

import math

import pytest

from tests.scripts import load_script

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def api_overhead():
    return load_script("benchmarks/api_overhead")


def test_every_way_to_call_has_a_host_cost(api_overhead, monkeypatch):
    for name, value in (("CALLS", 2), ("TRIALS", 1), ("SPIN_CYCLES", 1_000_000)):
        monkeypatch.setattr(api_overhead, name, value)
    costs = api_overhead.host_costs()
    assert "torch.ops.blocksparse.attention (dispatcher)" in costs and len(costs) == 11
    assert all(math.isfinite(us) and us > 0 for us in costs.values())


def test_public_call_row_times_every_contender(api_overhead):
    from gpu.bench.flex import FlexSession

    row = api_overhead.public_call_row(api_overhead.CASES[0], FlexSession())
    contenders = {"kernel alone", "public call, plan", "public call, layout tensor", "flex"}
    assert set(row["ms"]) == contenders and all(ms > 0 for ms in row["ms"].values())
