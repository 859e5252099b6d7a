"""The panel's settings: session-state keys, starting values, and the ``BenchConfig`` they make.

Pure (no Streamlit): the widgets in ``panel`` are keyed by these names, and ``bench_config``
turns their values and the design into the frozen config the harness takes, spelled as
``python -m gpu.bench`` spells the same case.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from designer.design import Design
from designer.sweep import DENSITY_FACTORS
from designer.validate import check_float, check_int
from gpu.bench import (
    BACKWARD_CONTENDERS,
    CONTENDERS,
    DEFAULT_BACKWARD_CONTENDERS,
    DEFAULT_CONTENDERS,
    BenchConfig,
    peers,
)
from gpu.bench.memory import DEFAULT_MARGIN, MAX_MARGIN
from gpu.bench.runner import DEFAULT_WAIT_S
from gpu.support import HEAD_DIMS
from ui import keys

#: Longest wait for another session's run, in seconds, and the largest seed offered.
MAX_WAIT_S = 3600
MAX_SEED = 2**31
SWEEP_KINDS = ("sequence length", "density")
#: Left out of the default contenders: they compile for minutes (autotuning) on first use.
SLOW_TO_COMPILE = ("flex_tuned",)


def flex_installed() -> bool:
    """Whether the installed torch has FlexAttention."""
    return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


def offered_contenders(backward: bool = False) -> tuple[str, ...]:
    """Contenders a user can pick here, in the harness's order (those with a backward pass in
    forward + backward mode). The peers are offered without their packages too: picked, they
    say which ``pip install`` brings them."""
    names = BACKWARD_CONTENDERS if backward else CONTENDERS
    return tuple(c for c in names if not c.startswith("flex") or flex_installed())


def contender_key(backward: bool) -> str:
    """The session key of the contender pick of a mode: each mode remembers its own."""
    return keys.GPU_BACKWARD_CONTENDER_PICK if backward else keys.GPU_CONTENDER_PICK


def default_contenders(design: Design) -> list[str]:
    """The harness's defaults but those slow to compile and the peers not installed, plus SDD
    at start width 1 when the design's start width is larger (to show what the segmentation
    buys)."""
    chosen = _defaults(DEFAULT_CONTENDERS, offered_contenders())
    return chosen + (["sdd_w1"] if design.effective_start_width > 1 else [])


def default_backward_contenders() -> list[str]:
    """The harness's training-step defaults but those slow to compile and the peers not
    installed."""
    return _defaults(DEFAULT_BACKWARD_CONTENDERS, offered_contenders(backward=True))


def _defaults(defaults: tuple[str, ...], offered: tuple[str, ...]) -> list[str]:
    return [c for c in defaults
            if c in offered and c not in SLOW_TO_COMPILE and peers.installed(c)]  # fmt: skip


def panel_defaults(design: Design) -> dict[str, Any]:
    """Every panel widget's starting value: the design's model batch and head dim (the nearest
    head dim the kernels take), then the harness's standard method."""
    shape = design.model_shape
    return {
        keys.GPU_BATCH: shape.batch,
        keys.GPU_HEAD_DIM: min(HEAD_DIMS, key=lambda d: (abs(d - shape.head_dim), d)),
        keys.GPU_DTYPE: "bf16",
        keys.GPU_CAUSAL: design.causal,
        keys.GPU_CONTENDER_PICK: default_contenders(design),
        keys.GPU_BACKWARD: False,
        keys.GPU_BACKWARD_CONTENDER_PICK: default_backward_contenders(),
        keys.GPU_WARMUP: 3,
        keys.GPU_REPS: 10,
        keys.GPU_FLUSH: True,
        keys.GPU_SEED: 0,
        keys.GPU_MARGIN: DEFAULT_MARGIN,
        keys.GPU_CHECK_ERROR: True,
        keys.GPU_WAIT_S: int(DEFAULT_WAIT_S),
        keys.GPU_SWEEP_KIND: SWEEP_KINDS[0],
        keys.GPU_SWEEP_LENGTH_PICK: [1024, 4096, 16384],
        keys.GPU_SWEEP_FACTOR_PICK: list(DENSITY_FACTORS),
        keys.GPU_SWEEP_RANDOM: True,
        keys.GPU_SWEEP_CHECK: False,
    }


def bench_config(design: Design, values: Mapping[str, Any]) -> BenchConfig:
    """The ``BenchConfig`` the widget ``values`` describe for ``design``'s layout (a training
    step's, with the mode's own contender pick, when forward + backward is on)."""
    backward = values[keys.GPU_BACKWARD]
    picked = values[contender_key(backward)]
    config = BenchConfig(
        batch=values[keys.GPU_BATCH],
        head_dim=values[keys.GPU_HEAD_DIM],
        dtype=values[keys.GPU_DTYPE],
        causal=values[keys.GPU_CAUSAL],
        contenders=tuple(c for c in CONTENDERS if c in picked),
        warmup=values[keys.GPU_WARMUP],
        reps=values[keys.GPU_REPS],
        flush_l2=values[keys.GPU_FLUSH],
        start_width=design.start_width,
        seed=values[keys.GPU_SEED],
        check_error=values[keys.GPU_CHECK_ERROR],
        backward=backward,
    )
    return config_for(config, design)


def check_run_settings(values: Mapping[str, Any]) -> None:
    """Check the settings a ``BenchConfig`` does not hold (memory margin, wait) and the seed's
    range; raises naming the setting, its range and the value (the number boxes have no
    bounds: the browser would refuse an out-of-range number without a word)."""
    check_float("memory margin", values[keys.GPU_MARGIN], low=0.0, high=MAX_MARGIN)
    check_int("wait for the GPU (s)", values[keys.GPU_WAIT_S], low=1, high=MAX_WAIT_S)
    check_int("seed", values[keys.GPU_SEED], low=0, high=MAX_SEED)


def config_for(config: BenchConfig, design: Design) -> BenchConfig:
    """``config`` with the heads and sequence lengths of ``design`` (``seq_k`` None when it
    equals ``seq_q``, as the command line writes it)."""
    layout = design.layout
    seq_k = None if layout.seq_len_k == layout.seq_len_q else layout.seq_len_k
    return replace(config, heads=layout.n_heads, seq_q=layout.seq_len_q, seq_k=seq_k)
