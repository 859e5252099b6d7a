"""The panel's settings: session-state keys, starting values, and the ``BenchConfig`` they make.

Pure (no Streamlit): the widgets in ``gpu_panel`` are keyed by these names, and ``bench_config``
turns their values and the design into the frozen config the harness takes, spelled as
``python -m gpu.bench`` spells the same case.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from designer.design import Design
from designer.ui.gpu_panel_estimate import DEFAULT_MARGIN
from designer.ui.gpu_panel_runner import DEFAULT_WAIT_S
from designer.ui.gpu_panel_sweep import DENSITY_FACTORS
from gpu.bench import CONTENDERS, DEFAULT_CONTENDERS, BenchConfig

# ----------------------------------------------------------------- widgets
BATCH, HEAD_DIM, DTYPE, CAUSAL, CONTENDER_PICK = (
    "gpu_batch", "gpu_head_dim", "gpu_dtype", "gpu_causal", "gpu_contenders"
)  # fmt: skip
WARMUP, REPS, FLUSH, SEED, MARGIN, CHECK_ERROR, WAIT_S = (
    "gpu_warmup", "gpu_reps", "gpu_flush", "gpu_seed", "gpu_margin", "gpu_check_error",
    "gpu_wait_s",
)  # fmt: skip
SWEEP_KIND, SWEEP_LENGTH_PICK, SWEEP_FACTOR_PICK, SWEEP_RANDOM, SWEEP_CHECK = (
    "gpu_sweep_kind", "gpu_sweep_lengths", "gpu_sweep_factors", "gpu_sweep_random",
    "gpu_sweep_check",
)  # fmt: skip
RUN_BUTTON, SWEEP_BUTTON, CPU_BUTTON = "gpu_run", "gpu_sweep_run", "gpu_cpu_check_run"
# ----------------------------------------------------------------- the panel's own state
#: The design's causal flag the causal toggle was last set from.
CAUSAL_FROM = "gpu_causal_from"
#: The widgets' values as last drawn: Streamlit forgets a widget's value while its tab is
#: hidden, and the panel restores them from here.
REMEMBERED = "gpu_remembered"
#: ``{"digest", "doc", "error"}`` of the last run / sweep / CPU check of this session.
LAST_RUN, LAST_SWEEP, LAST_CPU_CHECK = "gpu_last_run", "gpu_last_sweep", "gpu_last_cpu_check"

SWEEP_KINDS = ("sequence length", "density")
#: Left out of the default contenders: they compile for minutes (autotuning) on first use.
SLOW_TO_COMPILE = ("flex_tuned",)


def flex_installed() -> bool:
    """Whether the installed torch has FlexAttention."""
    return importlib.util.find_spec("torch.nn.attention.flex_attention") is not None


def offered_contenders() -> tuple[str, ...]:
    """Contenders a user can pick here, in the harness's order."""
    return tuple(c for c in CONTENDERS if not c.startswith("flex") or flex_installed())


def default_contenders(design: Design) -> list[str]:
    """The harness's defaults but those slow to compile, plus SDD at start width 1 when the
    design's start width is larger (to show what the segmentation buys)."""
    offered = offered_contenders()
    chosen = [c for c in DEFAULT_CONTENDERS if c in offered and c not in SLOW_TO_COMPILE]
    return chosen + (["sdd_w1"] if design.effective_start_width > 1 else [])


def panel_defaults(design: Design) -> dict[str, Any]:
    """Every panel widget's starting value (the harness's standard method)."""
    return {
        BATCH: 1, HEAD_DIM: 64, DTYPE: "bf16", CAUSAL: design.causal,
        CONTENDER_PICK: default_contenders(design), WARMUP: 3, REPS: 10, FLUSH: True, SEED: 0,
        MARGIN: DEFAULT_MARGIN, CHECK_ERROR: True, WAIT_S: int(DEFAULT_WAIT_S),
        SWEEP_KIND: SWEEP_KINDS[0], SWEEP_LENGTH_PICK: [1024, 4096, 16384],
        SWEEP_FACTOR_PICK: list(DENSITY_FACTORS), SWEEP_RANDOM: True, SWEEP_CHECK: False,
    }  # fmt: skip


def bench_config(design: Design, values: Mapping[str, Any]) -> BenchConfig:
    """The ``BenchConfig`` the widget ``values`` describe for ``design``'s layout."""
    picked = values[CONTENDER_PICK]
    config = BenchConfig(
        batch=values[BATCH],
        head_dim=values[HEAD_DIM],
        dtype=values[DTYPE],
        causal=values[CAUSAL],
        contenders=tuple(c for c in CONTENDERS if c in picked),
        warmup=values[WARMUP],
        reps=values[REPS],
        flush_l2=values[FLUSH],
        start_width=design.start_width,
        seed=values[SEED],
        check_error=values[CHECK_ERROR],
    )
    return config_for(config, design)


def config_for(config: BenchConfig, design: Design) -> BenchConfig:
    """``config`` with the heads and sequence lengths of ``design`` (``seq_k`` None when it
    equals ``seq_q``, as the command line writes it)."""
    layout = design.layout
    seq_k = None if layout.seq_len_k == layout.seq_len_q else layout.seq_len_k
    return replace(config, heads=layout.n_heads, seq_q=layout.seq_len_q, seq_k=seq_k)
