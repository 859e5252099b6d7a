"""The Hopper backward probes' CPU parts: the config fields ``backward_sm90.py --with`` changes,
what ``backward_profile.py`` reads from Nsight Compute's CSV, and what ``peer_profile.py`` runs
and prints (their GPU runs are the device's)."""

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


def test_the_peer_profile_runs_the_harness_and_ranks_stalls():
    profile = load_script("tools/probes/peer_profile")
    command = profile.harness_command("dense-b128-d64", "flex_flash", backward=True)
    assert command[1:] == ["-m", "gpu.bench", "--case", "dense-b128-d64", "--contenders",
                           "flex_flash", "--warmup", "1", "--reps", "2", "--backward"]  # fmt: skip
    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    metrics = {"SpeedOfLight: Duration": "3.20 ms", "x: " + stall.format("wait"): "0.70",
               "x: " + stall.format("long_scoreboard"): "1.20", "Other: metric": "1"}  # fmt: skip
    assert profile.summary(metrics) == [
        "  SpeedOfLight: Duration: 3.20 ms", "  stalls per issue: long_scoreboard 1.20, wait 0.70"
    ]  # fmt: skip
