"""Python code that builds a design's FlexAttention ``BlockMask``, offered beside the download.

Two forms, chosen by the design:

- a **closed form** where the recipe is one known family on every head with no edits (causal,
  sliding window, block-diagonal, prefix-LM, attention sinks): ``create_block_mask`` with a
  ``mask_mod`` over block indices, no file needed;
- otherwise the **tensors file** (``block_mask_tensors``): the packed layout popped from it
  makes the ``mask_mod`` (with its partial blocks' bits, for a token-exact design), and
  ``BlockMask.from_kv_blocks`` takes the rest. Without a
  ``mask_mod``, eager ``flex_attention`` (CPU) attends to every token pair whatever the tiles;
  with it, eager and compiled runs agree.

Both add ``q_idx >= kv_idx`` for causal designs, and both give Flex's own 128-token tiles
(``create_block_mask``'s default, and the file's), so on a GPU the snippet compiles
``flex_attention`` and runs its backward as it is. On the CPU it runs eager, forward only (Flex
has no CPU backward), and eager Flex holds every score: past ``CPU_SCORE_BYTES`` of them (16
heads x 16k tokens would be 17 GB) it runs the first tokens of each side, with their own mask.
Names and numbers are embedded with ``repr``.

Both ``mask_mod`` forms run on every Flex backend, FLASH (FA4) included: they read the layout
only at indices computed from their arguments (a one-head layout as its ``[M, N]`` plane), as
``block_mask.layout_mask_mod`` does and for the same reason. The snippet's ``BACKEND`` line picks
the backend; its comment says what FLASH needs and that FA4 raises where it cannot run.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable

from designer.design import Design
from designer.formats.flex_tiles import flex_tile_size
from designer.formats.snippet import check_filename
from designer.patterns.registry import PATTERNS

#: Most memory eager ``flex_attention``'s scores may take in the snippet's CPU run.
CPU_SCORE_BYTES = 1 << 26


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


_BLOCK_RULE = """\
            def mask_mod(b, h, q_idx, kv_idx):
                # Eager flex_attention decides every pair here; compiled, those of partial tiles.
                # Indices computed from the arguments only: the FLASH backend compiles no other.
                return blocks[{pick}q_idx // BLOCK, kv_idx // BLOCK]{causal}
"""
#: A token-exact design's rule: inside a partial block, its bit (slot 0: all ones, full blocks).
_TOKEN_RULE = """\
            parts = stored["partials"]  # partial blocks: (head, q block, k block) and their bits
            bits = parts["bits"].numpy()  # [blocks, BLOCK, BLOCK / 8]
            rows = bits.reshape(len(bits), -1).view(f"V{{bits[0].size}}").reshape(-1)
            found, which = np.unique(rows, return_inverse=True)  # each distinct mask once
            slots = torch.zeros(stored["shape"], dtype=torch.int32)  # 0: no partial block
            slots[tuple(parts["index"].long().T)] = torch.from_numpy(which.reshape(-1) + 1).int()
            # A bool per token pair (bit c % 8 of byte c // 8 is key c): FLASH reads no bits.
            found = found.view(np.uint8).reshape(-1, *bits.shape[1:])
            tokens = np.unpackbits(found, axis=-1, count=BLOCK, bitorder="little")
            ones = torch.ones(1, BLOCK, BLOCK, dtype=torch.bool)
            masks = torch.cat([ones, torch.from_numpy(tokens).bool()]).to(DEVICE)
            slots = slots{plane}.to(DEVICE)

            def mask_mod(b, h, q_idx, kv_idx):
                # Eager flex_attention decides every pair here; compiled, those of partial tiles.
                # Indices computed from the arguments only: the FLASH backend compiles no other.
                qb, kb = q_idx // BLOCK, kv_idx // BLOCK
                row, col = q_idx - qb * BLOCK, kv_idx - kb * BLOCK
                return blocks[{pick}qb, kb] & masks[slots[{pick}qb, kb], row, col]{causal}
"""


def flex_snippet(design: Design, tensors_filename: str) -> str:
    """Code building ``design``'s ``BlockMask`` and running ``flex_attention`` (see above).

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
        """
    )
    head += "import numpy as np\n" if rule is None else ""
    head += textwrap.dedent(
        f"""\
        import torch
        from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

        BLOCK = {layout.block_size}
        HEADS, Q_LEN, KV_LEN = {layout.n_heads}, {layout.seq_len_q}, {layout.seq_len_k}
        DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

        # Eager flex_attention (the CPU) holds every score, HEADS x Q_LEN x KV_LEN floats: past
        # {CPU_SCORE_BYTES >> 20} MiB the CPU runs the first tokens of each side only.
        FULL = Q_LEN, KV_LEN
        if DEVICE == "cpu" and HEADS * Q_LEN * KV_LEN * 4 > {CPU_SCORE_BYTES}:
            shrink = ({CPU_SCORE_BYTES} / (HEADS * Q_LEN * KV_LEN * 4)) ** 0.5
            Q_LEN, KV_LEN = (max(BLOCK, int(n * shrink) // BLOCK * BLOCK) for n in FULL)
            print(f"CPU: eager flex_attention on the first {{Q_LEN}} x {{KV_LEN}} tokens only")
        """
    )
    if rule is not None:
        body = f"""\

            def mask_mod(b, h, q_idx, kv_idx):
                qb, kb = q_idx // BLOCK, kv_idx // BLOCK
                return ({rule}){causal_test}

            # Flex's own 128-token tiles, each full, partial or absent by the pairs mask_mod allows:
            block_mask = create_block_mask(
                mask_mod, B=None, H=None, Q_LEN=Q_LEN, KV_LEN=KV_LEN, device=DEVICE
            )
            """
    else:
        if layout.n_heads == 1:
            plane, kept, pick = "[0]", "one head serves every head: its [q blocks, k blocks]", ""
            mask_heads = None
        else:
            plane, kept, pick = "", "[heads, q blocks, k blocks]", "h, "
            mask_heads = "HEADS"
        tile = flex_tile_size(layout.block_size)
        body = f"""\

            # From the "FlexAttention BlockMask" download: {tile}-token tiles and the layout.
            saved = torch.load({tensors_filename!r}, weights_only=True)
            stored = saved.pop("layout")  # bit-packed [heads, q blocks, k blocks]
            bits = np.unpackbits(stored["bits"].numpy(), count=int(np.prod(stored["shape"])))
            blocks = torch.from_numpy(bits.reshape(stored["shape"]).astype(bool))
            blocks = blocks{plane}.to(DEVICE)  # {kept}

            def mask_mod(b, h, q_idx, kv_idx):
                # Eager flex_attention decides every pair here; compiled, those of partial tiles.
                # Indices computed from the arguments only: the FLASH backend compiles no other.
                return blocks[{pick}q_idx // BLOCK, kv_idx // BLOCK]{causal_test}

            if (Q_LEN, KV_LEN) == FULL:
                block_mask = BlockMask.from_kv_blocks(**saved, mask_mod=mask_mod).to(DEVICE)
            else:  # the first tokens only (on the CPU): a block mask of their own
                block_mask = create_block_mask(
                    mask_mod, B=None, H={mask_heads}, Q_LEN=Q_LEN, KV_LEN=KV_LEN, device=DEVICE
                )
            """
        if layout.partials is not None:
            block_rule = _BLOCK_RULE.format(pick=pick, causal=causal_test)
            token_rule = _TOKEN_RULE.format(pick=pick, causal=causal_test, plane=plane)
            body = body.replace(block_rule, token_rule)
    tail = """\

        # "AUTO" (Triton) or "FLASH": FlexAttention's FA4 backend, on a Hopper or Blackwell GPU
        # with `pip install flash-attn-4`, bf16 or fp16, compiled. FA4 picks its tile by head dim
        # and raises a ValueError where it does not divide the mask's tiles (head dim 256 on
        # Hopper with flash-attn-4 4.0.0b36, for one).
        BACKEND = "AUTO"
        cuda = DEVICE == "cuda"
        dtype = torch.bfloat16 if cuda else torch.float32
        attention = torch.compile(flex_attention, dynamic=False) if cuda else flex_attention
        options = {"BACKEND": BACKEND} if cuda else None  # eager on the CPU: no backend to pick
        q, k, v = (
            torch.randn(1, HEADS, n, 64, device=DEVICE, dtype=dtype, requires_grad=cuda)
            for n in (Q_LEN, KV_LEN, KV_LEN)
        )
        out = attention(q, k, v, block_mask=block_mask, kernel_options=options)
        if cuda:  # training: Flex's compiled backward (Flex has none on the CPU)
            out.sum().backward()
        print(block_mask.shape, out.shape)
        """
    return head + textwrap.dedent(body) + textwrap.dedent(tail)
