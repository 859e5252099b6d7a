from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.regions import Band


@given(st.integers(1, 12), st.integers(1, 12), st.integers(-14, 14), st.integers(0, 28))
def test_a_band_is_the_diagonals_between_its_offsets(n_rows, n_cols, low, width):
    offset = torch.arange(n_rows)[:, None] - torch.arange(n_cols)[None, :]  # row - col
    want = (offset >= low) & (offset <= low + width)
    assert torch.equal(Band(low, low + width).mask(n_rows, n_cols), want)


def test_a_version_1_band_reads_in_todays_offsets():
    """Version 1 counted col - row; its files still read, as the same blocks."""
    from designer.regions import region_from_dict

    old = region_from_dict({"kind": "band", "lo": -1, "hi": 2})  # col - row in [-1, 2]
    assert old == Band(-2, 1) and old.to_dict() == {"kind": "band", "low": -2, "high": 1}
    assert region_from_dict(old.to_dict()) == old


@pytest.mark.parametrize("shape", [(1024, 65536), (65536, 1024)])
def test_a_band_of_the_widest_grid_costs_its_mask_alone(shape):
    """Once a grid-sized int64 table of offsets (512 MiB) was built for it."""
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from here
    before = _status_kib("VmRSS")
    mask = Band(-5, 3).mask(*shape)
    grown_mib = (_status_kib("VmHWM") - before) / 1024
    assert mask.sum() == sum(min(shape[1], r + 6) - max(0, r - 3) for r in range(shape[0])
                             if r - 3 < shape[1])  # fmt: skip
    assert grown_mib < 200


def _status_kib(field: str) -> int:
    line = next(line for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith(field + ":"))  # fmt: skip
    return int(line.split()[1])
