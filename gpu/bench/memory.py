"""How much GPU memory one benchmark case needs, counted before anything is launched.

The harness keeps q, k, v (16-bit), the L2 flush buffer and the fp64 reference output for the
whole case (its sampled rows in a large case, see ``checks.py``), and runs the contenders one
after another. So the peak is those, plus the largest of: the fp64 reference while it is
computed (one chunk of scores with its temporaries), or one contender's output and workspace
together with the error check (fp64 copies of the checked rows). Workspaces counted: the SDD
pipeline's packed fp32 scores and 16-bit probabilities, FlexAttention's token mask, block
tables (at its smallest tile) and log-sum-exp, and the peers' (cuDNN BSA, FA4) block lists at
64-token blocks with their log-sum-exp. The estimate is compared with the free memory
times a safety margin; ``margin=0`` turns the check off.

A training step (``config.backward``) adds the output gradient and a contender's dq, dk, dv (with
one more output: the forward graph kept while the backward alone is timed), the fp64 reference
gradients, a larger reference chunk (the backward's score-sized temporaries), and a backward
workspace (an fp32 dq accumulator, the saved log-sum-exp and rowsum(dO∘O)); the ``reference``
contender keeps its whole autograd graph, a few fp32 ``Sq × Sk`` score tensors per head. In a
sampled case the reference gradients are dq's sampled rows, and each window's reference
backward holds a whole fp64 dk and dv while it runs.

>>> config = BenchConfig(seq_q=4096, contenders=("fused",), flush_l2=False, check_error=False)
>>> estimate_memory(config, 16 * 32 * 32, 128).total  # q, k, v and one output
33554432
"""

from __future__ import annotations

from dataclasses import dataclass

from designer.units import bytes_text
from designer.validate import check_float, check_int
from gpu.bench.checks import row_sample
from gpu.bench.config import BenchConfig
from gpu.bench.contenders import sdd_packed_bytes
from gpu.bench.flex import MIN_TILE
from gpu.bench.flex_masks import MASK_GRANULARITY
from gpu.bench.timing import FLUSH_BYTES
from gpu.reference import DEFAULT_CHUNK_BYTES

#: Score-sized fp64 tensors alive at once inside one reference chunk (scores, masked copy,
#: shifted scores, their exponentials).
REFERENCE_LIVE_SCORES = 4
#: ... and inside one chunk of the reference backward (scores, masked copy, shifted scores,
#: exponentials, probabilities; then dO·Vᵀ, minus Δ, and dS).
REFERENCE_BACKWARD_LIVE_SCORES = 6
#: fp32 score-sized tensors the ``reference`` contender's autograd graph keeps per head
#: (scores, masked scores, softmax).
REFERENCE_GRAPH_SCORES = 3
#: fp64 tensors of the output's size alive during the error check (copy, difference, its abs).
ERROR_CHECK_COPIES = 3
#: Refuse a case when ``margin x estimate`` exceeds the free memory.
DEFAULT_MARGIN = 1.25
MAX_MARGIN = 10.0
SDD_CONTENDERS = ("sdd", "sdd_w1", "sdd_qk", "sdd_qk_w1")
#: Contenders that hold block lists of their own (a row of key blocks per query block).
LIST_CONTENDERS = ("cudnn_bsa", "fa4")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes each part of one case needs on the GPU (0 for parts the case does not use)."""

    inputs: int  # q, k, v and one output, 16-bit
    flush: int  # the L2 flush buffer
    reference: int  # the fp64 reference output, kept for the whole case
    reference_chunk: int  # one chunk of fp64 scores while the reference is computed
    error_check: int  # fp64 copies while a contender's output is compared
    sdd_scores: int  # the SDD pipeline's packed scores and probabilities
    flex_workspace: int  # FlexAttention's mask buffer, block tables, output and log-sum-exp
    peer_workspace: int = 0  # cuDNN BSA's or FA4's block lists, output and log-sum-exp
    grads: int = 0  # a step's output gradient, dq, dk, dv and the kept output, 16-bit
    reference_grads: int = 0  # the fp64 reference dq, dk, dv, kept for the whole case
    backward_workspace: int = 0  # fp32 dq accumulator, saved LSE and rowsum(dO∘O)
    reference_graph: int = 0  # the reference contender's autograd graph

    @property
    def total(self) -> int:
        """The peak: what lives all along, plus the largest stage."""
        workspace = max(self.sdd_scores, self.flex_workspace, self.peer_workspace,
                        self.reference_graph)  # fmt: skip
        contender = workspace + self.backward_workspace + self.error_check
        kept = self.inputs + self.flush + self.reference + self.reference_grads + self.grads
        return kept + max(self.reference_chunk, contender)

    def parts(self) -> list[tuple[str, int]]:
        """``(what, bytes)`` of each part in use, for a table or a message."""
        named = [
            ("q, k, v and an output", self.inputs),
            ("L2 flush buffer", self.flush),
            ("fp64 reference output", self.reference),
            ("fp64 reference chunk", self.reference_chunk),
            ("error check (fp64 copies)", self.error_check),
            ("SDD packed scores", self.sdd_scores),
            ("FlexAttention workspace", self.flex_workspace),
            ("cuDNN BSA / FA4 block lists", self.peer_workspace),
            ("output gradient and gradients", self.grads),
            ("fp64 reference gradients", self.reference_grads),
            ("backward workspace", self.backward_workspace),
            ("reference contender's autograd graph", self.reference_graph),
        ]
        return [(name, size) for name, size in named if size]


def estimate_memory(config: BenchConfig, nnz: int, block_size: int) -> MemoryEstimate:
    """The memory ``config`` needs for a layout of ``nnz`` active blocks (over all
    ``config.heads`` heads, after broadcasting) of side ``block_size`` tokens."""
    if not isinstance(config, BenchConfig):
        raise TypeError(f"config must be a BenchConfig, got {type(config).__name__}")
    nnz = check_int("nnz", nnz, low=0)
    block_size = check_int("block_size", block_size, low=1)
    batch, heads, seq_q, seq_k, dim = (
        config.batch, config.heads, config.seq_q, config.seq_len_k, config.head_dim
    )  # fmt: skip
    element = config.torch_dtype.itemsize
    output = element * batch * heads * seq_q * dim
    q_elements, k_elements = batch * heads * seq_q * dim, batch * heads * seq_k * dim
    reference = reference_chunk = error_check = reference_grads = 0
    if config.check_error:
        sample = row_sample(batch, seq_q, seq_k, block_size)
        checked_q = q_elements if sample is None else batch * heads * sample.rows * dim
        reference = 8 * checked_q
        live = REFERENCE_BACKWARD_LIVE_SCORES if config.backward else REFERENCE_LIVE_SCORES
        reference_chunk = _reference_chunk_bytes(batch, seq_q, seq_k, dim, block_size, live)
        checked = checked_q
        if config.backward and sample is None:  # dk and dv are checked too
            checked = max(q_elements, k_elements)
            reference_grads = 8 * (q_elements + 2 * k_elements)
        elif config.backward:  # dq's rows; each window's reference makes a whole fp64 dk, dv
            reference_grads = 8 * checked_q
            reference_chunk += 2 * 8 * k_elements
        error_check = ERROR_CHECK_COPIES * 8 * checked
    grads = backward_workspace = reference_graph = 0
    if config.backward:
        grads = element * (3 * q_elements + 2 * k_elements)  # dO, kept output, dq, dk, dv
        backward_workspace = 4 * q_elements + 2 * 4 * batch * heads * seq_q
        if "reference" in config.contenders:
            reference_graph = REFERENCE_GRAPH_SCORES * 4 * batch * heads * seq_q * seq_k
    sdd = 0
    if any(name in config.contenders for name in SDD_CONTENDERS):
        sdd = sdd_packed_bytes(batch, nnz, block_size, element)
    flex = 0
    if any(name.startswith("flex") for name in config.contenders):
        mask = heads * (seq_q // MASK_GRANULARITY) * (seq_k // MASK_GRANULARITY)
        tiles = heads * -(-seq_q // MIN_TILE) * -(-seq_k // MIN_TILE)
        flex = mask + 4 * 4 * tiles + output + 4 * batch * heads * seq_q
    peer = 0
    if any(name in config.contenders for name in LIST_CONTENDERS):  # lists and their transpose
        lists = 2 * 4 * batch * heads * -(-seq_q // MIN_TILE) * -(-seq_k // MIN_TILE)
        peer = lists + output + 4 * batch * heads * seq_q
    return MemoryEstimate(
        inputs=element * batch * heads * dim * (seq_q + 2 * seq_k) + output,
        flush=FLUSH_BYTES if config.flush_l2 else 0,
        reference=reference,
        reference_chunk=reference_chunk,
        error_check=error_check,
        sdd_scores=sdd,
        flex_workspace=flex,
        peer_workspace=peer,
        grads=grads,
        reference_grads=reference_grads,
        backward_workspace=backward_workspace,
        reference_graph=reference_graph,
    )


def _reference_chunk_bytes(
    batch: int, seq_q: int, seq_k: int, dim: int, block: int, live: int
) -> int:
    """One chunk of ``gpu.reference.dense_masked_attention`` (or its backward): its rows as that
    function picks them, fp64 copies of one head's k and v, and ``live`` score-sized tensors."""
    rows = max(1, DEFAULT_CHUNK_BYTES // max(1, batch * seq_k * 8 * block)) * block
    rows = min(rows, seq_q)
    scores = 8 * batch * rows * seq_k
    return live * scores + 2 * rows * seq_k + 8 * batch * dim * (2 * seq_k + rows)


def refusal(estimate: MemoryEstimate, free_bytes: int, margin: float) -> str | None:
    """Why the case cannot fit in ``free_bytes`` with ``margin``, or None when it can."""
    free_bytes = check_int("free_bytes", free_bytes, low=0)
    margin = check_float("margin", margin, low=0.0, high=MAX_MARGIN)
    if estimate.total * margin <= free_bytes:
        return None
    parts = ", ".join(f"{name} {bytes_text(size)}" for name, size in estimate.parts())
    return (
        f"Refused before launch: this case needs about {bytes_text(estimate.total)} of GPU "
        f"memory ({parts}); with the safety margin ×{margin:g} that is "
        f"{bytes_text(int(estimate.total * margin))}, but only {bytes_text(free_bytes)} are "
        "free. Lower the batch, the head dim or the sequence length, or drop contenders."
    )
