"""FlexAttention ``BlockMask`` both ways.

A ``BlockMask`` lists, for each ``[batch, head, q_block]`` row, the key blocks to visit: ``full``
ones (every token pair attends, ``mask_mod`` is skipped) and partial ones (``mask_mod`` decides per
token pair). Compiled ``flex_attention`` (GPU) reads only those lists; eager ``flex_attention``
(CPU) ignores them and applies ``mask_mod`` to every pair. So an exported mask carries both, and
they agree:

- without ``causal``, every active block is full;
- with ``causal`` (``q_idx >= kv_idx`` inside blocks), blocks below the diagonal are full, diagonal
  blocks partial, and blocks above it are dropped (no pair there may attend);
- ``mask_mod(b, h, q_idx, kv_idx)`` is ``layout[h, q_idx // block, kv_idx // block]`` (and the
  causal test), so the eager result is the layout's attention too.

The block size of the ``BlockMask`` is the layout's block size: a layout with 16-token blocks gives
``BLOCK_SIZE = (16, 16)``. Compiled kernels need it divisible by their tiles (128 by default): for
smaller blocks pass ``kernel_options={"BLOCK_M": block, "BLOCK_N": block}`` to ``flex_attention``
(checked on an H200 with torch 2.11 for blocks of 16, 32 and 64). The batch dimension is 1 (it
broadcasts); a one-head layout broadcasts over heads.

``block_mask_tensors`` gives the block lists alone, as ``BlockMask.from_kv_blocks`` arguments, for
a file: tensors and plain values that ``torch.load(..., weights_only=True)`` reads back. A function
cannot travel that way, so a causal mask rebuilt from a file needs its ``mask_mod`` again.

>>> bm = to_block_mask(Layout(torch.eye(2, dtype=torch.int64)[None], 128))
>>> bm.BLOCK_SIZE, from_block_mask(bm)[0].nnz
((128, 128), 2)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.nn.attention.flex_attention import BlockMask

from designer.formats.torch_file import file_tensor
from designer.layout import MAX_BLOCK_SIZE, Layout
from designer.validate import MAX_LAYOUT_CELLS, check_bool, check_int, check_layout_shape


def _ordered(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[H, M, N]`` blocks as int32 ``(num [1, H, M], indices [1, H, M, N])``, active first."""
    num = dense.sum(dim=-1, dtype=torch.int32)
    indices = torch.argsort((~dense).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return num[None], indices[None]


def to_block_mask(
    layout: Layout,
    block_size: int | None = None,
    *,
    causal: bool = False,
    device: str | torch.device = "cpu",
) -> BlockMask:
    """A ``BlockMask`` (and matching ``mask_mod``) giving ``layout``'s attention on ``device``.

    ``block_size`` defaults to the layout's and, when given, must equal it.
    """
    _check_layout(layout)
    block = layout.block_size
    if block_size is not None and check_int("block_size", block_size, low=1) != block:
        raise ValueError(
            f"block_size must be the layout's block size {block}, got {block_size}; the BlockMask "
            f"uses the layout's blocks as they are"
        )
    arguments = block_mask_tensors(layout, causal=causal)
    for key, value in arguments.items():
        if isinstance(value, torch.Tensor):
            arguments[key] = value.to(device)
    mask_mod = layout_mask_mod(layout.blocks.to(device), block, causal)
    return BlockMask.from_kv_blocks(**arguments, mask_mod=mask_mod)


def block_mask_tensors(layout: Layout, *, causal: bool = False) -> dict[str, Any]:
    """The block lists of ``to_block_mask(layout, causal=causal)`` as ``from_kv_blocks`` arguments.

    >>> arguments = block_mask_tensors(Layout(torch.ones(1, 2, 2, dtype=torch.int64), 16))
    >>> arguments["full_kv_num_blocks"].tolist(), arguments["seq_lengths"]
    ([[[2, 2]]], (32, 32))
    """
    _check_layout(layout)
    causal = check_bool("causal", causal)
    blocks = layout.blocks
    if causal:
        rows = torch.arange(layout.n_q_blocks)[:, None]
        cols = torch.arange(layout.n_k_blocks)[None, :]
        full, partial = blocks & (cols < rows), blocks & (cols == rows)
    else:
        full, partial = blocks, torch.zeros_like(blocks)
    kv_num, kv_indices = _ordered(partial)
    full_num, full_indices = _ordered(full)
    return {
        "kv_num_blocks": kv_num,
        "kv_indices": kv_indices,
        "full_kv_num_blocks": full_num,
        "full_kv_indices": full_indices,
        "BLOCK_SIZE": layout.block_size,
        "seq_lengths": (layout.seq_len_q, layout.seq_len_k),
    }


def _check_layout(layout: Any) -> None:
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout, got {type(layout).__name__}")


def layout_mask_mod(blocks: torch.Tensor, block_size: int, causal: bool):
    """``mask_mod(b, h, q_idx, kv_idx)``: ``blocks[h, q_idx // block, kv_idx // block]`` (and
    ``q_idx >= kv_idx`` when causal); a one-head ``blocks`` serves every head."""
    one_head = blocks.shape[0] == 1

    def mask_mod(b, h, q_idx, kv_idx):
        allowed = blocks[0 if one_head else h, q_idx // block_size, kv_idx // block_size]
        return allowed & (q_idx >= kv_idx) if causal else allowed

    h, m, n = blocks.shape
    mask_mod.__name__ = f"layout_{h}x{m}x{n}_block{block_size}" + ("_causal" if causal else "")
    return mask_mod


def from_block_mask(block_mask: BlockMask) -> tuple[Layout, int]:
    """The layout of a ``BlockMask``'s blocks (partial and full together) and its block size.

    Only the block lists are read; a ``mask_mod`` that masks tokens inside blocks is not part of
    a layout. Every batch entry must have the same blocks, blocks must be square and the sequence
    lengths whole multiples of the block size.
    """
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"block_mask must be a BlockMask, got {type(block_mask).__name__}")
    q_block, kv_block = block_mask.BLOCK_SIZE
    if q_block != kv_block:
        raise ValueError(
            f"block_mask must have square blocks, got BLOCK_SIZE ({q_block}, {kv_block})"
        )
    dense = block_mask.to_dense().to("cpu").bool()  # [B, H, M, N]: partial | full
    if not torch.equal(dense, dense[:1].expand_as(dense)):
        raise ValueError(
            f"block_mask must have the same blocks in every batch entry, got a batch of "
            f"{dense.shape[0]} whose entries differ"
        )
    layout = Layout(dense[0], q_block)
    seq_lengths = tuple(block_mask.seq_lengths)
    if seq_lengths != (layout.seq_len_q, layout.seq_len_k):
        raise ValueError(
            f"block_mask seq_lengths must be whole blocks: {layout.n_q_blocks} x "
            f"{layout.n_k_blocks} blocks of {q_block} tokens cover {layout.seq_len_q} x "
            f"{layout.seq_len_k}, got {seq_lengths[0]} x {seq_lengths[1]}"
        )
    return layout, q_block


def layout_from_tensors(tensors: Mapping[str, Any]) -> tuple[Layout, bool]:
    """The layout and causal flag of ``block_mask_tensors`` output read from a file.

    Tensors are checked (shape, dtype, ranges, bytes really stored) before any is expanded. The
    design counts as causal when its partial blocks are all on the diagonal and its full ones all
    below it, which is how ``block_mask_tensors(causal=True)`` writes one.
    """
    block = tensors["BLOCK_SIZE"]
    if isinstance(block, (tuple, list)) and len(block) == 2 and block[0] == block[1]:
        block = block[0]
    block = check_int("BLOCK_SIZE", block, low=1, high=MAX_BLOCK_SIZE)
    lengths = tensors["seq_lengths"]
    if not isinstance(lengths, (tuple, list)) or len(lengths) != 2:
        raise ValueError("seq_lengths must be a pair (seq_len_q, seq_len_k)")
    seq_q = check_int("seq_len_q", lengths[0], low=1)
    seq_k = check_int("seq_len_k", lengths[1], low=1)
    if seq_q % block or seq_k % block:
        raise ValueError(
            f"seq_lengths ({seq_q}, {seq_k}) must be whole blocks of BLOCK_SIZE {block}"
        )
    found = []
    for num_key, index_key in (
        ("kv_num_blocks", "kv_indices"),
        ("full_kv_num_blocks", "full_kv_indices"),
    ):
        if tensors[num_key] is None and tensors[index_key] is None:
            found.append(None)
            continue
        num = file_tensor(num_key, tensors[num_key])
        indices = file_tensor(index_key, tensors[index_key])
        found.append(_blocks_of(num_key, num, index_key, indices, seq_q // block, seq_k // block))
    partial, full = found
    if partial is None and full is None:
        raise ValueError("kv_num_blocks and full_kv_num_blocks are both None: no blocks at all")
    blocks = partial if full is None else full if partial is None else partial | full
    causal = False
    if partial is not None and full is not None and bool(partial.any()):
        m, n = blocks.shape[1:]
        rows, cols = torch.arange(m)[:, None], torch.arange(n)[None, :]
        causal = not bool((partial & (cols != rows)).any() or (full & (cols >= rows)).any())
    return Layout(blocks, block), causal


def _blocks_of(
    num_key: str, num: torch.Tensor, index_key: str, indices: torch.Tensor, m: int, n: int
) -> torch.Tensor:
    """Bool ``[H, M, N]`` blocks listed by one ``(num [1, H, M], indices [1, H, M, K])`` pair."""
    for key, value, rank in ((num_key, num, 3), (index_key, indices, 4)):
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise ValueError(f"{key} must hold integers, got dtype {value.dtype}")
        if value.dim() != rank or value.shape[0] != 1:
            raise ValueError(
                f"{key} must have rank {rank} with batch 1, got shape {list(value.shape)}"
            )
    h = num.shape[1]
    check_layout_shape(h, m, n)
    if tuple(num.shape) != (1, h, m) or tuple(indices.shape[:3]) != (1, h, m):
        raise ValueError(
            f"{num_key} {list(num.shape)} and {index_key} {list(indices.shape)} must be "
            f"[1, H, {m}] and [1, H, {m}, K] for {m} query blocks"
        )
    k = indices.shape[3]
    if h * m * k > MAX_LAYOUT_CELLS or k > n:
        raise ValueError(f"{index_key} lists {k} blocks per row, more than the {n} key blocks")
    num, indices = num[0].to(torch.int64), indices[0].to(torch.int64)
    if num.numel() and (int(num.min()) < 0 or int(num.max()) > k):
        raise ValueError(f"{num_key} must be in [0, {k}], got [{int(num.min())}, {int(num.max())}]")
    listed = torch.arange(k) < num[..., None]  # [H, M, K]
    chosen = indices[listed]
    if chosen.numel() and (int(chosen.min()) < 0 or int(chosen.max()) >= n):
        raise ValueError(
            f"{index_key} must be in [0, {n - 1}], got [{int(chosen.min())}, {int(chosen.max())}]"
        )
    blocks = torch.zeros(h, m, n, dtype=torch.bool)
    heads, rows, _ = listed.nonzero(as_tuple=True)
    blocks[heads, rows, chosen] = True
    return blocks
