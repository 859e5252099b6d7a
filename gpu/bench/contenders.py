"""The contenders: what each one runs, prepared outside the timed region.

``prepare(name, case)`` does all host work (plans, look-up tables, compilation, a first call that
proves the backend supports the shape) and returns a ``Prepared``: a zero-argument ``run`` that
only launches, and whether its output is the layout's attention (then its error is checked).

- ``fused``: our flash-style kernel (``gpu.forward``), plan outside, ``run_fused`` timed.
- ``fused_api``: the same kernel through the public call a model makes,
  ``gpu.block_sparse_attention(q, k, v, plan)`` with a ``gpu.plan`` built outside.
- ``sdd`` / ``sdd_w1``: our SDD → softmax → DSD pipeline, segment-driven (128-token tiles) or
  with start width 1 (one block per SDD tile: the segmentation study's baseline). Its packed
  ``[B, nnz, b, b]`` scores grow with the layout: a case whose scores do not fit in the free
  memory, or whose per-head layout exceeds the layout size limit, is unavailable.
- ``sdd_qk`` / ``sdd_qk_w1``: the SDD kernel alone (QKᵀ on active blocks) for the same study.
- ``flex`` / ``flex_tuned``: FlexAttention, same token-level mask (see ``flex.py``), compiled
  with Inductor's default tiles or with ``max-autotune-no-cudagraphs``. Each returns
  ``Variants``, one per ``FlexVariant`` that runs the case exactly (tile size, gather or closed
  form ``mask_mod``); the harness measures each and keeps the fastest accurate one.
- ``flex_flash``: FlexAttention on its FLASH backend (FlashAttention-4), its variants the same
  way (the lookup ``mask_mod``, or the causal or dense form).
- ``cudnn_bsa``: cuDNN frontend's block-sparse attention (``cudnn_bsa.py``); ``fa4``:
  FlashAttention-4's own call (``fa4.py``, not a default). These three peers need packages of
  their own (``peers.py``); without them they are unavailable with the ``pip install`` line.
- ``sdpa`` / ``sdpa_cudnn`` / ``sdpa_flash``: dense PyTorch SDPA with its default backend, and
  with cuDNN or flash forced; ``is_causal=True`` in causal cases. They compute dense (or causal)
  attention, so their error is checked only when the layout is all ones.
- ``reference``: our dense masked reference in fp32 (runs on the CPU too).

In a training step (``Case.grad_out`` set, q, k, v requiring grad) ``fused`` is the public
call with a plan, ``gpu.block_sparse_attention(q, k, v, plan, impl="fused")``, differentiable
through its registered autograd; Flex, the peers and SDPA use their own backward passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from designer.layout import Layout
from designer.units import bytes_text
from designer.validate import MAX_LAYOUT_CELLS
from gpu.bench import peers
from gpu.bench.config import BACKWARD_CONTENDERS
from gpu.bench.cudnn_bsa import bsa_call
from gpu.bench.fa4 import fa4_call
from gpu.bench.flex import (
    FLASH,
    TRITON,
    FlexSession,
    FlexUnavailable,
    FlexVariant,
    flex_variants,
    runs_variants,
)
from gpu.reference import dense_masked_attention

#: The ``torch.compile`` mode of the ``flex_tuned`` contender.
FLEX_TUNED_MODE = "max-autotune-no-cudagraphs"
#: Contenders that run a layout held as row runs (the others need its dense grid).
RUNS_CONTENDERS = (
    "fused", "fused_api", "flex", "flex_tuned", "flex_flash", "sdpa", "sdpa_cudnn", "sdpa_flash",
)  # fmt: skip


class Unavailable(RuntimeError):
    """This contender cannot run this case here (missing backend, unsupported shape...)."""


@dataclass(frozen=True)
class Case:
    """One case's inputs, shared by every contender."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    blocks: torch.Tensor | None  # CPU bool [H or 1, M, N] (one head serves every head); None
    # when the layout is held as row runs (``runs_layout``)
    block_size: int
    causal: bool
    scale: float
    start_width: int | None
    flex: FlexSession
    plans: dict[tuple, Any] = field(default_factory=dict)  # shared by contenders of this case
    grad_out: torch.Tensor | None = None  # a training step's output gradient (None: forward)
    runs_layout: Layout | None = None  # a layout held as row runs, past a dense grid's size

    @property
    def backward(self) -> bool:
        """A training step: q, k, v require grad and the backward pass is timed too."""
        return self.grad_out is not None

    @property
    def dense_layout(self) -> bool:
        """Every block active: dense SDPA computes the same function."""
        if self.blocks is None:
            return self.runs_layout.nnz == self.runs_layout.cells
        return bool(self.blocks.all())

    @property
    def layout_source(self) -> torch.Tensor | Layout:
        """What ``gpu.plan`` takes: the dense blocks, or the layout held as row runs."""
        return self.runs_layout if self.blocks is None else self.blocks


@dataclass(frozen=True)
class Prepared:
    run: Callable[[], torch.Tensor]
    computes_layout: bool


@dataclass(frozen=True)
class Variants:
    """Several ways one contender can run a case: ``(name, prepare, graph)`` triples, each
    ``prepare`` doing that way's host work when called (a failure belongs to that variant), and
    ``graph`` what, beside the name and the case's shapes, makes its compiled code (so a variant
    that failed to compile is not compiled again for the next case of that shape)."""

    options: tuple[tuple[str, Callable[[], Prepared], Any], ...]


def prepare(name: str, case: Case) -> Prepared | Variants:
    """Do ``name``'s host work for ``case`` and return its launcher (or its variants)."""
    makers: dict[str, Callable[[Case], Prepared | Variants]] = {
        "fused": lambda c: _fused_api(c) if c.backward else _fused(c),
        "fused_api": _fused_api,
        "sdd": lambda c: _sdd(c, c.start_width),
        "sdd_w1": lambda c: _sdd(c, 1),
        "sdd_qk": lambda c: _sdd_qk(c, c.start_width),
        "sdd_qk_w1": lambda c: _sdd_qk(c, 1),
        "flex": lambda c: _flex(c, None, TRITON),
        "flex_tuned": lambda c: _flex(c, FLEX_TUNED_MODE, TRITON),
        "flex_flash": lambda c: _flex(c, None, FLASH),
        "cudnn_bsa": lambda c: _peer(c, "cuDNN BSA", bsa_call),
        "fa4": lambda c: _peer(c, "FA4", fa4_call),
        "sdpa": lambda c: _sdpa(c, None),
        "sdpa_cudnn": lambda c: _sdpa(c, "CUDNN_ATTENTION"),
        "sdpa_flash": lambda c: _sdpa(c, "FLASH_ATTENTION"),
        "reference": _reference,
    }
    if reason := peers.missing(name):
        raise Unavailable(reason)
    if case.q.device.type != "cuda" and name != "reference":
        raise Unavailable(f"{name} needs a CUDA device")
    if case.backward and name not in BACKWARD_CONTENDERS:
        raise Unavailable(f"{name} has no backward pass")
    if case.blocks is None and name not in RUNS_CONTENDERS:
        h, m, n = case.runs_layout.shape
        raise Unavailable(
            f"{name} needs the dense [H, M, N] grid, and this {h} x {m:,} x {n:,} layout is held "
            f"as row runs; {', '.join(RUNS_CONTENDERS)} run it"
        )
    return makers[name](case)


def _our_kernel_args(case: Case) -> dict[str, Any]:
    return {
        "causal": case.causal,
        "head_dim": case.q.shape[3],
        "dtype": case.q.dtype,
        "device": case.q.device,
    }


def _fused(case: Case) -> Prepared:
    from gpu import plan as layout_plan
    from gpu.forward.launch import kv_row_strides, run_fused

    plan = layout_plan(case.layout_source, case.block_size, causal=case.causal,
                       device=case.q.device)  # fmt: skip
    plan = plan.fused(case.q.dtype, case.q.shape[3], *kv_row_strides(case.k, case.v))
    out = torch.empty_like(case.q)
    return Prepared(
        lambda: run_fused(plan, case.q, case.k, case.v, scale=case.scale, out=out), True
    )


def _fused_api(case: Case) -> Prepared:
    from gpu import block_sparse_attention, plan

    the_plan = plan(case.layout_source, case.block_size, causal=case.causal, device=case.q.device)
    if case.backward:  # autograd takes no ``out``: the output is a new tensor each step

        def step() -> torch.Tensor:
            return block_sparse_attention(
                case.q, case.k, case.v, the_plan, scale=case.scale, impl="fused"
            )

        return Prepared(step, True)
    out = torch.empty_like(case.q)

    def run() -> torch.Tensor:
        return block_sparse_attention(case.q, case.k, case.v, the_plan, scale=case.scale, out=out)

    return Prepared(run, True)


def _sdd(case: Case, start_width: int | None) -> Prepared:
    from gpu.sdd.pipeline import run_sdd

    plan = _sdd_plan(case, start_width)
    out = torch.empty_like(case.q)
    return Prepared(lambda: run_sdd(plan, case.q, case.k, case.v, scale=case.scale, out=out), True)


def _sdd_qk(case: Case, start_width: int | None) -> Prepared:
    from gpu.sdd.pipeline import sdd_scores

    plan = _sdd_plan(case, start_width)
    return Prepared(lambda: sdd_scores(plan, case.q, case.k, scale=case.scale), False)


def _sdd_plan(case: Case, start_width: int | None) -> Any:
    """The SDD plan of ``case`` (the pipeline segments each query head's layout)."""
    from gpu.sdd.pipeline import plan_sdd

    heads = case.q.shape[1]
    if reason := sdd_refusal(case, heads, free_device_bytes(case.q.device)):
        raise Unavailable(reason)
    blocks = case.blocks.expand(heads, -1, -1).contiguous()
    return plan_sdd(blocks, case.block_size, start_width=start_width, **_our_kernel_args(case))


def sdd_refusal(case: Case, heads: int, free_bytes: int) -> str | None:
    """Why the SDD pipeline cannot take ``case`` with ``heads`` query heads: its layout is past
    the layout size limit, or its packed scores and probabilities (``sdd_packed_bytes``) exceed
    ``free_bytes``; None when it can."""
    _, n_q, n_k = case.blocks.shape
    if heads * n_q * n_k > MAX_LAYOUT_CELLS:
        return (
            f"the SDD pipeline segments every head: {heads} x {n_q} x {n_k} blocks exceed the "
            f"layout limit of {MAX_LAYOUT_CELLS:,} cells"
        )
    nnz = int(case.blocks.sum()) * (heads // case.blocks.shape[0])
    packed = sdd_packed_bytes(case.q.shape[0], nnz, case.block_size, case.q.dtype.itemsize)
    if packed > free_bytes:
        return (
            f"the SDD pipeline's packed scores and probabilities need {bytes_text(packed)}, more "
            f"than the {bytes_text(free_bytes)} free"
        )
    return None


def free_device_bytes(device: torch.device | None = None) -> int:
    """Memory a contender can use on a CUDA device (default: the current one): free on the
    device plus what torch's allocator holds unused."""
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def sdd_packed_bytes(batch: int, nnz: int, block_size: int, element_bytes: int) -> int:
    """Packed fp32 scores and 16-bit probabilities, ``[B, nnz, b, b]`` each."""
    return batch * nnz * block_size * block_size * (4 + element_bytes)


def _flex(case: Case, mode: str | None, backend: str) -> Variants:
    try:
        if case.blocks is None:
            variants = runs_variants(case.runs_layout, backend=backend)
        else:
            variants = flex_variants(case.blocks, case.block_size, causal=case.causal,
                                     backend=backend)  # fmt: skip
    except FlexUnavailable as error:
        raise Unavailable(str(error)) from error
    heads = (case.blocks if case.blocks is not None else case.runs_layout).shape[0]
    return Variants(tuple((v.name, partial(_flex_variant, case, mode, v), heads)
                          for v in variants))  # fmt: skip


def _flex_variant(case: Case, mode: str | None, variant: FlexVariant) -> Prepared:
    try:
        if case.blocks is None:
            call = case.flex.prepare_runs(case.runs_layout, causal=case.causal, mode=mode,
                                          device=case.q.device, variant=variant,
                                          backward=case.backward)  # fmt: skip
        else:
            call = case.flex.prepare(case.blocks, case.block_size, causal=case.causal,
                                     device=case.q.device, mode=mode, variant=variant,
                                     heads=case.q.shape[1])  # fmt: skip
    except FlexUnavailable as error:
        raise Unavailable(str(error)) from error

    def run() -> torch.Tensor:
        return call(case.q, case.k, case.v, scale=case.scale)

    run()  # compiles now, outside any timing; a failure is this variant's
    return Prepared(run, True)


def _peer(case: Case, label: str, make: Callable[[Case], Callable[[], torch.Tensor]]) -> Prepared:
    """A peer's call ``make(case)``, which raises ``ValueError`` for a case the peer cannot
    express; a first call (compiling it) proves it runs."""
    try:
        run = make(case)
    except ValueError as error:
        raise Unavailable(str(error)) from error
    try:
        out = run()
        if case.backward:
            torch.autograd.grad(out, (case.q, case.k, case.v), case.grad_out)
    except NotImplementedError as error:  # the peer's own word on a shape it does not take
        raise Unavailable(f"{label}: {str(error).splitlines()[0]}") from error
    return Prepared(run, True)


def _sdpa(case: Case, backend: str | None) -> Prepared:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    def call() -> torch.Tensor:
        return scaled_dot_product_attention(
            case.q, case.k, case.v, is_causal=case.causal, scale=case.scale
        )

    if backend is None:
        run = call
    else:
        chosen = getattr(SDPBackend, backend)

        def run() -> torch.Tensor:
            with sdpa_kernel(chosen):
                return call()

    try:
        out = run()  # a backend that cannot take this shape says so here
        if case.backward:
            torch.autograd.grad(out, (case.q, case.k, case.v), case.grad_out)
    except RuntimeError as error:
        raise Unavailable(f"SDPA {backend or 'default'}: {str(error).splitlines()[0]}") from error
    return Prepared(run, case.dense_layout)


def _reference(case: Case) -> Prepared:
    def run() -> torch.Tensor:
        return dense_masked_attention(
            case.q, case.k, case.v, case.blocks, case.block_size,
            causal=case.causal, scale=case.scale, compute_dtype=torch.float32,
        ).to(case.q.dtype)  # fmt: skip

    return Prepared(run, True)
