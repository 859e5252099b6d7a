"""Python code that builds a design's FlexAttention ``BlockMask``, offered beside the download.

Two forms, chosen by the design:

- a **closed form** where the recipe is one known family on every head with no edits (causal,
  sliding window, block-diagonal, prefix-LM, attention sinks): ``create_block_mask`` with a
  ``mask_mod`` over block indices, no file needed;
- otherwise the **tensors file** (``block_mask_tensors``): ``BlockMask.from_kv_blocks`` rebuilt
  with the layout's own ``mask_mod``. Without one, eager ``flex_attention`` (CPU) attends to every
  token pair whatever the blocks; with it, eager and compiled runs agree.

Both add ``q_idx >= kv_idx`` for causal designs. Names and numbers are embedded with ``repr``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable

from designer.design import Design
from designer.formats.snippet import check_filename
from designer.patterns.registry import PATTERNS


def closed_form(design: Design) -> str | None:
    """The ``mask_mod`` rule (over ``qb``, ``kb``: block indices) of a known family, or None.

    Known: causal, sliding window, block-diagonal, prefix-LM and attention sinks, each as the one
    step of the recipe on every head, with one value per parameter and no edits.
    """
    recipe = design.recipe
    if recipe is None or recipe.edits or len(recipe.steps) != 1:
        return None
    step = recipe.steps[0]
    if step.heads is not None or step.combine not in ("replace", "union"):
        return None
    spec = PATTERNS[step.pattern]
    values = {param.name: step.params.get(param.name, param.default) for param in spec.params}
    if any(isinstance(value, (list, tuple)) for value in values.values()):
        return None  # one value per head: not one closed form
    rule = _RULES.get(step.pattern)
    return None if rule is None else rule(**values)


def _sliding_window(window_blocks: int, causal: bool) -> str:
    if causal:
        return f"(qb - kb >= 0) & (qb - kb < {window_blocks})"
    return f"(qb - kb < {window_blocks}) & (kb - qb < {window_blocks})"


def _block_diagonal(chunk_blocks: int, causal: bool) -> str:
    same_chunk = f"(qb // {chunk_blocks} == kb // {chunk_blocks})"
    return f"{same_chunk} & (kb <= qb)" if causal else same_chunk


#: Each family's rule, exactly as its generator's docstring states it.
_RULES: dict[str, Callable[..., str]] = {
    "causal": lambda: "kb <= qb",
    "sliding_window": _sliding_window,
    "block_diagonal": _block_diagonal,
    "prefix_lm": lambda prefix_blocks: f"(kb <= qb) | (kb < {prefix_blocks})",
    "attention_sinks": lambda sink_blocks, window_blocks: (
        f"(qb - kb >= 0) & ((kb < {sink_blocks}) | (qb - kb < {window_blocks}))"
    ),
}


def flex_snippet(design: Design, tensors_filename: str) -> str:
    """Code building ``design``'s ``BlockMask`` on CPU and running eager ``flex_attention``.

    ``tensors_filename`` is the BlockMask tensors download, read when there is no closed form.
    """
    if not isinstance(design, Design):
        raise TypeError(f"design must be a Design, got {type(design).__name__}")
    tensors_filename = check_filename(tensors_filename)
    layout = design.layout
    causal_test = " & (q_idx >= kv_idx)" if design.causal else ""
    rule = closed_form(design)
    head = textwrap.dedent(
        f"""\
        # {design.name!r}: {layout.n_heads} heads, {layout.seq_len_q} x {layout.seq_len_k} tokens,
        # blocks of {layout.block_size}.
        import torch
        from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

        BLOCK = {layout.block_size}
        HEADS, Q_LEN, KV_LEN = {layout.n_heads}, {layout.seq_len_q}, {layout.seq_len_k}
        """
    )
    if rule is not None:
        body = f"""\

            def mask_mod(b, h, q_idx, kv_idx):
                qb, kb = q_idx // BLOCK, kv_idx // BLOCK
                return ({rule}){causal_test}

            block_mask = create_block_mask(
                mask_mod, B=None, H=None, Q_LEN=Q_LEN, KV_LEN=KV_LEN, BLOCK_SIZE=BLOCK, device="cpu"
            )
            """
    else:
        pick = "0" if layout.n_heads == 1 else "h"
        body = f"""\

            # The block lists of the design, from the "FlexAttention BlockMask" download:
            saved = torch.load({tensors_filename!r}, weights_only=True)
            blocks = BlockMask.from_kv_blocks(**saved).to_dense()[0].bool()  # [heads, q, k blocks]

            def mask_mod(b, h, q_idx, kv_idx):
                # Eager flex_attention decides with this alone: it must encode the layout.
                return blocks[{pick}, q_idx // BLOCK, kv_idx // BLOCK]{causal_test}

            block_mask = BlockMask.from_kv_blocks(**saved, mask_mod=mask_mod)
            """
    tail = """\

        q, k, v = (torch.randn(1, HEADS, n, 64) for n in (Q_LEN, KV_LEN, KV_LEN))
        out = flex_attention(q, k, v, block_mask=block_mask)  # eager on CPU; compile it on a GPU
        print(block_mask.shape, out.shape)
        """
    return head + textwrap.dedent(body) + textwrap.dedent(tail)
