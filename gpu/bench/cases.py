"""The standard benchmark cases: H200, bf16, B=1, H=16, S=16384, D=64 and 128.

The same cases run at other lengths (``seq_len``, ``python -m gpu.bench --seq``: 4096 and, with
``--batch 4``, 65536). Each family keeps its token-level definition, so a band's width and the
global tokens stay the same number of tokens and the densities in the names are those at
S = 16384 (the results record each layout's own density). A layout stores its 16 heads while
they fit in the layout size limit (``MAX_LAYOUT_CELLS``); past it (S = 65536 with 16-token
blocks), a family whose heads are all the same keeps one head, which serves all 16, and bigbird,
whose random blocks are drawn per head, cannot be built.

Layout families, each defined at token level and built at block sizes 128, 64 and 16:

- ``banded_2pct`` / ``banded_7pct`` / ``banded_25pct``: a bidirectional local band of half-width
  ``W`` = 192, 576 and 2112 tokens: ``sliding_window(window_blocks=round(W / b + 0.5))``, i.e.
  windows of 2, 5 and 17 blocks at b = 128 (2.3 %, 6.9 %, 24 % dense), a finer staircase at
  smaller blocks.
- ``bigbird_10pct``: the same 192-token band, plus global tokens 0..127 (rows and columns), plus
  random blocks drawn per head with probability 1/16 (seeded).
- ``causal``: the causal layout, with ``causal=True`` (masking inside diagonal blocks).
- ``dense``: every block.

The SDD segmentation study adds, on the banded cases at block 16, the SDD pipeline and the SDD
kernel alone with start width 1 (``sdd_w1``, ``sdd_qk_w1``) beside the segment-driven ones.
``quick`` shrinks S to 4096 and the reps, to check the harness end to end in seconds.
``backward`` times training steps (forward then backward) of the contenders that have a
backward pass (``DEFAULT_BACKWARD_CONTENDERS``: ours fused, both Flex builds, dense SDPA).

The long-context cases (``long_context_design``, ``python -m gpu.bench --long-context 128K``)
are the designs of ``benchmarks/long_context.py``: 32 heads of a causal sliding window of 4,096
tokens plus a one-block sink, 64-token blocks, at 128K tokens (2,048^2 blocks) and 1M (16,384^2),
held as row runs; B=1, D=128. Their contenders (``LONG_CONTEXT_CONTENDERS``) are those that run
a layout without its dense grid: ours, Flex on Triton and on FA4, and dense causal SDPA (flash)
for scale.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from designer.design import Design
from designer.layout import Layout
from designer.patterns import causal as causal_pattern
from designer.patterns import global_tokens, random_blocks, sliding_window
from designer.patterns.attention_sinks import attention_sinks_runs
from designer.validate import MAX_LAYOUT_CELLS, check_choice, check_int, error_context
from gpu.bench.config import DEFAULT_BACKWARD_CONTENDERS, DEFAULT_CONTENDERS, BenchConfig
from gpu.support import HEAD_DIMS

HEADS = 16
SEQ_LEN = 16384
QUICK_SEQ_LEN = 4096
#: The longest ``seq_len`` (a ``seq_len`` must also be a multiple of the largest block).
MAX_SEQ_LEN = 1 << 20
#: The layout block sizes of the cases (of ``gpu.support.BLOCK_SIZES``), largest first.
BLOCK_SIZES = (128, 64, 16)
BAND_HALF_WIDTHS = {"banded_2pct": 192, "banded_7pct": 576, "banded_25pct": 2112}
FAMILIES = (*BAND_HALF_WIDTHS, "bigbird_10pct", "causal", "dense")
GLOBAL_TOKENS = 128
RANDOM_PROBABILITY = 1 / 16
STUDY_CONTENDERS = ("sdd_w1", "sdd_qk", "sdd_qk_w1")
#: The sweep also times the public call with a plan beside the kernel alone.
STANDARD_CONTENDERS = ("fused", "fused_api", *DEFAULT_CONTENDERS[1:])
#: The long-context designs: query (= key) blocks by name, heads, block, window and sinks.
LONG_CONTEXT_BLOCKS = {"128K": 2048, "1M": 16384}
LONG_CONTEXT_HEADS, LONG_CONTEXT_BLOCK, LONG_CONTEXT_WINDOW_TOKENS, LONG_CONTEXT_SINK_BLOCKS = (
    32, 64, 4096, 1,
)  # fmt: skip
#: What a long-context case runs by default: the forward's, and the training step's.
LONG_CONTEXT_CONTENDERS = ("fused", "fused_api", "flex", "flex_flash", "sdpa_flash")
LONG_CONTEXT_BACKWARD_CONTENDERS = ("fused", "flex", "flex_flash", "sdpa_flash")


@dataclass(frozen=True)
class StandardCase:
    family: str
    block_size: int
    head_dim: int

    @property
    def name(self) -> str:
        return f"{self.family}-b{self.block_size}-d{self.head_dim}"

    @property
    def causal(self) -> bool:
        return self.family == "causal"

    @property
    def in_segmentation_study(self) -> bool:
        return self.family in BAND_HALF_WIDTHS and self.block_size == 16

    def config(
        self, *, quick: bool = False, backward: bool = False, seq_len: int | None = None
    ) -> BenchConfig:
        """The case's config; ``seq_len`` (default: ``SEQ_LEN``, ``QUICK_SEQ_LEN`` when
        ``quick``) sets S, ``quick`` also few reps."""
        contenders = STANDARD_CONTENDERS
        if self.in_segmentation_study:
            contenders = (*contenders, *STUDY_CONTENDERS)
        if backward:
            contenders = DEFAULT_BACKWARD_CONTENDERS
        return BenchConfig(
            heads=HEADS,
            seq_q=case_seq_len(quick=quick, seq_len=seq_len),
            head_dim=self.head_dim,
            causal=self.causal,
            contenders=contenders,
            warmup=1 if quick else 3,
            reps=3 if quick else 10,
            backward=backward,
        )

    def layout(self, *, quick: bool = False, seq_len: int | None = None) -> Layout:
        """The case's layout at ``config(quick=quick, seq_len=seq_len).seq_q`` tokens; raises
        ``ValueError`` when it is past the layout size limit."""
        n_blocks = case_seq_len(quick=quick, seq_len=seq_len) // self.block_size
        with error_context(f"{self.name} at S={n_blocks * self.block_size}"):
            blocks = family_blocks(self.family, n_blocks, self.block_size)
            if HEADS * n_blocks * n_blocks <= MAX_LAYOUT_CELLS:  # every head, as a design has
                blocks = blocks.expand(HEADS, -1, -1)
            return Layout(blocks, self.block_size)


def case_seq_len(*, quick: bool = False, seq_len: int | None = None) -> int:
    """S of the standard cases: ``seq_len``, checked, or the default of the mode.

    >>> case_seq_len(), case_seq_len(quick=True), case_seq_len(seq_len=65536)
    (16384, 4096, 65536)
    """
    if seq_len is None:
        return QUICK_SEQ_LEN if quick else SEQ_LEN
    largest = max(BLOCK_SIZES)
    check_int("seq_len", seq_len, low=largest, high=MAX_SEQ_LEN)
    if seq_len % largest:
        raise ValueError(f"seq_len must be a multiple of {largest}, got {seq_len}")
    return seq_len


def family_blocks(family: str, n_blocks: int, block_size: int) -> torch.Tensor:
    """The bool layout of one family at ``block_size`` (see module doc): ``[1, n, n]`` when every
    head is the same, else ``[HEADS, n, n]``."""
    if family in BAND_HALF_WIDTHS:
        return _band(family, n_blocks, block_size)
    if family == "bigbird_10pct":
        band = _band("banded_2pct", n_blocks, block_size)
        n_global = max(1, GLOBAL_TOKENS // block_size)
        globals_ = global_tokens(1, n_blocks, n_blocks, global_blocks=list(range(n_global)))
        random = random_blocks(HEADS, n_blocks, n_blocks, seed=0, probability=RANDOM_PROBABILITY)
        return band | globals_ | random
    if family == "causal":
        return causal_pattern(1, n_blocks, n_blocks)
    if family == "dense":
        return torch.ones(1, n_blocks, n_blocks, dtype=torch.bool)
    raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")


def _band(family: str, n_blocks: int, block_size: int) -> torch.Tensor:
    window = round(BAND_HALF_WIDTHS[family] / block_size + 0.5)
    return sliding_window(1, n_blocks, n_blocks, window_blocks=window, causal=False)


def standard_cases() -> list[StandardCase]:
    """Every standard case, grouped by head dim (one Flex compilation each), then block size."""
    return [
        StandardCase(family, block, dim)
        for dim in HEAD_DIMS
        for block in BLOCK_SIZES
        for family in FAMILIES
    ]


def find_case(name: str) -> StandardCase:
    """The standard case called ``name`` (``family-b<block>-d<dim>``)."""
    for case in standard_cases():
        if case.name == name:
            return case
    raise ValueError(
        f"case must be a standard case name such as banded_2pct-b128-d64, got {name!r}"
    )


def iter_sweep(
    *, quick: bool = False, seq_len: int | None = None
) -> Iterator[tuple[StandardCase, BenchConfig, Layout]]:
    """``(case, config, layout)`` for the whole standard sweep, layouts built lazily."""
    for case in standard_cases():
        yield (case, case.config(quick=quick, seq_len=seq_len),
               case.layout(quick=quick, seq_len=seq_len))  # fmt: skip


def long_context_design(name: str, heads: int = LONG_CONTEXT_HEADS) -> Design:
    """The long-context design called ``name`` (``LONG_CONTEXT_BLOCKS``), causal, built as row
    runs (a layout past a dense grid's size stays so)."""
    check_choice("long context", name, tuple(LONG_CONTEXT_BLOCKS))
    n_blocks = LONG_CONTEXT_BLOCKS[name]
    window = LONG_CONTEXT_WINDOW_TOKENS // LONG_CONTEXT_BLOCK
    runs = attention_sinks_runs(heads, n_blocks, n_blocks, sink_blocks=LONG_CONTEXT_SINK_BLOCKS,
                                window_blocks=window)  # fmt: skip
    return Design(Layout(runs, LONG_CONTEXT_BLOCK), name=f"long context {name}", causal=True)
