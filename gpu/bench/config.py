"""What one benchmark run measures: a frozen, validated ``BenchConfig``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from designer.validate import check_bool, check_choice, check_int
from gpu.support import DTYPES

#: Every contender the harness knows, in table order (see ``contenders.py``).
CONTENDERS = (
    "fused",
    "fused_api",
    "sdd",
    "sdd_w1",
    "sdd_qk",
    "sdd_qk_w1",
    "flex",
    "flex_tuned",
    "flex_flash",
    "cudnn_bsa",
    "fa4",
    "sdpa",
    "sdpa_cudnn",
    "sdpa_flash",
    "reference",
)
#: The defaults: ours, every Flex build, the peers and dense SDPA (the SDD study's variants, the
#: public call beside the kernel, ``fa4`` and the reference run on request).
DEFAULT_CONTENDERS = (
    "fused", "sdd", "flex", "flex_tuned", "flex_flash", "cudnn_bsa", "sdpa", "sdpa_cudnn",
    "sdpa_flash",
)  # fmt: skip
#: Contenders with a backward pass, which ``backward=True`` (a training step) can time.
BACKWARD_CONTENDERS = (
    "fused", "flex", "flex_tuned", "flex_flash", "cudnn_bsa", "fa4", "sdpa", "sdpa_cudnn",
    "sdpa_flash", "reference",
)  # fmt: skip
DEFAULT_BACKWARD_CONTENDERS = tuple(c for c in BACKWARD_CONTENDERS if c in DEFAULT_CONTENDERS)
#: What a case times: the forward alone, or a training step (forward then backward).
FORWARD, FORWARD_BACKWARD = "forward", "forward+backward"


@dataclass(frozen=True)
class BenchConfig:
    """Shapes, dtype and method of one benchmark case.

    ``seq_k`` None means ``seq_k = seq_q``. Every contender is timed ``reps`` times after
    ``warmup`` untimed runs, each rep preceded (when ``flush_l2``) by writing a 256 MiB buffer so
    no rep starts with a warm L2. ``start_width`` is the SDD segmentation start width (None:
    128-token tiles). ``device`` is "cuda" for real runs; "cpu" only serves the reference.
    ``backward`` times one training step's attention (forward, then backward with a fixed
    random output gradient) instead of the forward alone; ``contenders`` None means the
    defaults of the mode (``DEFAULT_CONTENDERS`` or ``DEFAULT_BACKWARD_CONTENDERS``).

    >>> BenchConfig(seq_q=1024, head_dim=128).shape_q
    (1, 16, 1024, 128)
    """

    batch: int = 1
    heads: int = 16
    seq_q: int = 16384
    seq_k: int | None = None
    head_dim: int = 64
    dtype: str = "bf16"
    causal: bool = False
    contenders: tuple[str, ...] | None = None
    warmup: int = 3
    reps: int = 10
    flush_l2: bool = True
    start_width: int | None = None
    seed: int = 0
    device: str = "cuda"
    check_error: bool = True
    backward: bool = False

    def __post_init__(self) -> None:
        check_bool("backward", self.backward)
        if self.contenders is None:  # frozen: set the mode's defaults once, here
            defaults = DEFAULT_BACKWARD_CONTENDERS if self.backward else DEFAULT_CONTENDERS
            object.__setattr__(self, "contenders", defaults)
        check_int("batch", self.batch, low=1, high=1024)
        check_int("heads", self.heads, low=1, high=1024)
        check_int("seq_q", self.seq_q, low=1, high=1 << 20)
        if self.seq_k is not None:
            check_int("seq_k", self.seq_k, low=1, high=1 << 20)
        check_int("head_dim", self.head_dim, low=1, high=512)
        check_choice("dtype", self.dtype, tuple(DTYPES))
        check_bool("causal", self.causal)
        if not isinstance(self.contenders, tuple) or not self.contenders:
            raise TypeError(f"contenders must be a non-empty tuple, got {self.contenders!r}")
        for name in self.contenders:
            check_choice("contenders item", name, CONTENDERS)
            if self.backward and name not in BACKWARD_CONTENDERS:
                raise ValueError(
                    f"contenders item {name!r} has no backward pass; with backward=True pick "
                    f"from {', '.join(BACKWARD_CONTENDERS)}"
                )
        if len(set(self.contenders)) != len(self.contenders):
            raise ValueError(f"contenders must not repeat, got {self.contenders}")
        check_int("warmup", self.warmup, low=0, high=1000)
        check_int("reps", self.reps, low=1, high=10000)
        check_bool("flush_l2", self.flush_l2)
        if self.start_width is not None:
            check_int("start_width", self.start_width, low=1, high=1 << 16)
        check_int("seed", self.seed, low=0)
        check_choice("device", self.device, ("cuda", "cpu"))
        check_bool("check_error", self.check_error)

    @property
    def mode(self) -> str:
        return FORWARD_BACKWARD if self.backward else FORWARD

    @property
    def seq_len_k(self) -> int:
        return self.seq_q if self.seq_k is None else self.seq_k

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def shape_q(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.seq_q, self.head_dim)

    @property
    def shape_k(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.seq_len_k, self.head_dim)
