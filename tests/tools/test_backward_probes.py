"""The Hopper backward probes' CPU parts: the config fields ``backward_sm90.py --with`` changes,
and what ``backward_profile.py`` reads from Nsight Compute's CSV (their GPU runs are the
device's)."""

from __future__ import annotations

import pytest

from gpu.backward.sm90 import HopperBackwardConfig
from tests.scripts import load_script


def test_with_changes_the_named_fields_of_a_build():
    probe = load_script("tools/probes/backward_sm90")
    config = probe.changed(HopperBackwardConfig("bf16", 128), "stages=3,dq_first=1")
    assert (config.stages, config.dq_first, config.dq) == (3, True, "bulk")
    assert probe.changed(config, "dq_first=0").dq_first is False
    with pytest.raises(ValueError, match="HopperBackwardConfig has no field 'stage'"):
        probe.changed(config, "stage=3")
    with pytest.raises(ValueError, match="stages must be one of 2, 3, got 4"):
        probe.changed(config, "stages=4")


def test_the_profile_reads_every_metric_of_ncus_details_page():
    probe = load_script("tools/probes/backward_profile")
    output = "\n".join([
        "==PROF== Connected to process 7",
        "the probe's own line",
        '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"',
        '"0","attention_bwd_hopper","GPU Speed Of Light Throughput","Duration","ns","9,477,920"',
        '"0","attention_bwd_hopper","Command line profiler metrics",'
        '"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active","%","64.19"',
    ])  # fmt: skip
    assert probe.parse_details(output) == {
        "GPU Speed Of Light Throughput: Duration": "9,477,920 ns",
        "Command line profiler metrics: "
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "64.19 %",
    }
