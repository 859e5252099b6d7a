"""The panel's settings: the config they make, and the contenders offered and picked."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from designer.design import Design
from designer.layout import Layout
from gpu.bench import (
    BACKWARD_CONTENDERS,
    CONTENDERS,
    DEFAULT_BACKWARD_CONTENDERS,
    DEFAULT_CONTENDERS,
    peers,
)
from ui import keys
from ui.bench import settings


def design(n_q=4, n_k=4, block=64, **changes):
    return Design(Layout(torch.ones(2, n_q, n_k, dtype=torch.bool), block), **changes)


def test_bench_config_takes_the_layout_shape_and_the_widgets():
    current = design(start_width=3)
    values = {**settings.panel_defaults(current), keys.GPU_CONTENDER_PICK: ["sdpa", "fused"]}
    config = settings.bench_config(current, values)
    assert (config.heads, config.seq_q, config.seq_k) == (2, 256, None)
    assert config.contenders == ("fused", "sdpa")  # the harness's order
    assert (config.batch, config.head_dim, config.dtype, config.reps) == (1, 128, "bf16", 10)
    assert config.start_width == 3 and config.check_error and config.flush_l2
    cross = settings.bench_config(design(n_k=8), values)
    assert (cross.seq_q, cross.seq_k) == (256, 512)


def test_the_panel_starts_at_the_designs_model_shape():
    from dataclasses import replace

    from designer.model_shape import ModelShape

    shaped = replace(design(), model_shape=ModelShape(batch=4, head_dim=80))
    values = settings.panel_defaults(shaped)
    assert (values[keys.GPU_BATCH], values[keys.GPU_HEAD_DIM]) == (4, 64)  # the nearest it takes


def test_bench_config_refuses_what_the_harness_refuses():
    current = design(start_width=0)  # the design allows "no tiles"; the SDD contenders do not
    with pytest.raises(ValueError, match="start_width must be in"):
        settings.bench_config(current, settings.panel_defaults(current))
    values = {**settings.panel_defaults(design()), keys.GPU_BATCH: 0}
    with pytest.raises(ValueError, match="batch must be in"):
        settings.bench_config(design(), values)


@pytest.mark.parametrize("installed", [False, True])
def test_default_contenders_leave_out_slow_compiles_and_add_the_segmentation_baseline(
    installed, monkeypatch
):
    absent = lambda name: None if installed or name not in peers.PEERS else "absent"  # noqa: E731
    monkeypatch.setattr(peers, "missing", absent)
    peer = {"flex_flash", "cudnn_bsa"}
    wide = settings.default_contenders(design(block=16))  # start width 8
    assert wide == [
        c for c in DEFAULT_CONTENDERS
        if c not in settings.SLOW_TO_COMPILE and (installed or c not in peer)
    ] + ["sdd_w1"]  # fmt: skip
    assert "sdd_w1" not in settings.default_contenders(design(block=128))  # start width 1
    assert set(settings.offered_contenders()) >= peer  # offered either way: picked, they say why


def test_flex_is_offered_only_when_torch_has_it(monkeypatch):
    assert settings.offered_contenders() == CONTENDERS
    monkeypatch.setattr(settings, "flex_installed", lambda: False)
    assert not any(c.startswith("flex") for c in settings.offered_contenders())
    assert "flex" not in settings.default_contenders(design())


def test_forward_backward_mode_has_its_own_contender_pick():
    current = design()
    values = settings.panel_defaults(current)
    assert values[keys.GPU_BACKWARD] is False
    assert values[keys.GPU_BACKWARD_CONTENDER_PICK] == [
        c for c in DEFAULT_BACKWARD_CONTENDERS
        if c not in settings.SLOW_TO_COMPILE and peers.installed(c)
    ]  # fmt: skip
    assert settings.offered_contenders(backward=True) == BACKWARD_CONTENDERS
    config = settings.bench_config(
        current, {**values, keys.GPU_BACKWARD: True, keys.GPU_BACKWARD_CONTENDER_PICK: ["flex"]}
    )
    assert config.backward and config.contenders == ("flex",)
    assert settings.contender_key(True) == keys.GPU_BACKWARD_CONTENDER_PICK
    forward = settings.bench_config(current, values)
    assert not forward.backward and "sdd" in forward.contenders


def test_config_for_follows_a_sweep_point():
    config = settings.bench_config(design(), settings.panel_defaults(design()))
    point = design(n_q=16, n_k=16)
    assert replace(config, seq_q=1024) == settings.config_for(config, point)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (keys.GPU_MARGIN, -0.5, r"memory margin must be in \[0.0, 10.0\], got -0.5"),
        (keys.GPU_WAIT_S, 0, r"wait for the GPU \(s\) must be in \[1, 3600\], got 0"),
        (keys.GPU_SEED, -1, r"seed must be in \[0, 2147483648\], got -1"),
    ],
)
def test_run_settings_outside_their_range_say_so(key, value, message):
    values = {**settings.panel_defaults(design()), key: value}
    settings.check_run_settings(settings.panel_defaults(design()))  # the defaults pass
    with pytest.raises(ValueError, match=message):
        settings.check_run_settings(values)
