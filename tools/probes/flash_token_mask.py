"""Which ways of reading a partial block's token bits FlexAttention's FLASH backend (FA4, CuTe
DSL) compiles: each form of the same ``mask_mod`` on one token-exact layout, in compiled Flex on
FLASH and on Triton, forward and backward against fp64.

``python3 tools/probes/flash_token_mask.py [--out PATH]``

The layout is ``from_mask_mod`` of a 200-token causal window at blocks of 64 and 1000 tokens,
two heads; its BlockMask is ``designer.formats.to_block_mask``'s. Each form replaces only the
BlockMask's ``mask_mod``:

- ``packed_uint8``: the bits as stored (bit ``col % 8`` of byte ``col // 8``, shifts on uint8);
- ``packed_int32``: the same bytes widened to int32 first;
- ``unpacked_bool``: one bool per token pair, read directly (what the export reads);
- ``unpacked_int32``: one int32 0/1 per token pair, compared with 1.

Per form and backend: ``ok`` with the largest relative error of out, dq, dk, dv, or the error's
first lines. The JSON (default ``benchmarks/results/checks/<date>-flash-token-mask.json``) holds
them with the date, GPU and versions.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention.flex_attention import flex_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout, uninstalled

from designer import from_mask_mod
from designer.formats import to_block_mask
from designer.patterns.token_window import token_sliding_window
from gpu.bench.report import environment
from gpu.reference import dense_masked_attention

SEQ, BLOCK, HEADS, DIM = 1000, 64, 2, 64
BACKENDS = {"TRITON": None, "FLASH": {"BACKEND": "FLASH"}}


def forms(layout) -> dict:
    """Each form of the layout's ``mask_mod`` (block table, slot table, token bits)."""
    partials = layout.partials
    blocks = layout.blocks.cuda()
    slots = torch.zeros(layout.shape, dtype=torch.int32)
    slots[tuple(partials.index.long().T)] = torch.arange(1, partials.count + 1, dtype=torch.int32)
    slots = slots.cuda()
    ones = torch.full((1, *partials.bits.shape[1:]), 0xFF, dtype=torch.uint8)
    packed = torch.cat([ones, partials.bits]).cuda()  # the bits the export read before
    unpacked = torch.ones(1 + partials.count, BLOCK, BLOCK, dtype=torch.bool)
    _, n_q, n_k = layout.shape
    tokens = torch.zeros(layout.n_heads, n_q * BLOCK, n_k * BLOCK, dtype=torch.bool)
    tokens[:, :SEQ, :SEQ] = layout.token_mask()  # whole blocks: the last ones' tail masked
    for p, (h, i, j) in enumerate(partials.index.long().tolist()):
        unpacked[1 + p] = tokens[h, i * BLOCK : (i + 1) * BLOCK, j * BLOCK : (j + 1) * BLOCK]
    unpacked = unpacked.cuda()
    tables = {"packed_uint8": packed, "packed_int32": packed.to(torch.int32),
              "unpacked_bool": unpacked, "unpacked_int32": unpacked.to(torch.int32)}  # fmt: skip

    def make(name: str):
        table = tables[name]

        def mask_mod(b, h, q_idx, kv_idx):
            qb, kb = q_idx // BLOCK, kv_idx // BLOCK
            row, col = q_idx - qb * BLOCK, kv_idx - kb * BLOCK
            slot = slots[h, qb, kb]
            if name.startswith("packed"):
                bit = ((table[slot, row, col // 8] >> (col % 8)) & 1) == 1
            elif name == "unpacked_bool":
                bit = table[slot, row, col]
            else:
                bit = table[slot, row, col] == 1
            return blocks[h, qb, kb] & bit

        mask_mod.__name__ = f"token_bits_{name}"
        return mask_mod

    return {name: make(name) for name in tables}


def reference(layout, q, k, v, grad) -> list[torch.Tensor]:
    """Out, dq, dk, dv of fp64 attention under the layout's blocks and token bits (autograd)."""
    leaves = [t.double().cpu().requires_grad_() for t in (q, k, v)]
    partials = (layout.partials.index, layout.partials.bits)
    out = dense_masked_attention(*leaves, layout.blocks, BLOCK, partials=partials)
    out.backward(grad.double().cpu())
    return [out, *(leaf.grad for leaf in leaves)]


def run_form(mask_mod, block_mask, backend: str, inputs, expected) -> dict:
    torch._dynamo.reset()
    compiled = torch.compile(flex_attention, dynamic=False, fullgraph=True)
    block_mask.mask_mod = mask_mod
    leaves = [t.clone().requires_grad_() for t in inputs[:3]]
    try:
        out = compiled(*leaves, block_mask=block_mask, kernel_options=BACKENDS[backend])
        out.backward(inputs[3])
        torch.cuda.synchronize()
    except Exception as error:
        lines = [line for line in str(error).splitlines() if line.strip()]
        return {"ok": False, "error": f"{type(error).__name__}: " + " | ".join(lines[:6])}
    got = [out, *(leaf.grad for leaf in leaves)]
    pairs = zip(got, expected, strict=True)
    worst = max(float((g.double().cpu() - e).norm() / e.norm()) for g, e in pairs)
    return {"ok": worst <= 2e-2, "worst_rel_error": worst}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the JSON (default benchmarks/results/checks/...)")
    args = parser.parse_args()
    started = time.time()
    layout = from_mask_mod(token_sliding_window(200), heads=HEADS, seq_q=SEQ, seq_k=SEQ,
                           block_size=BLOCK)  # fmt: skip
    block_mask = to_block_mask(layout, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = [torch.randn(1, HEADS, SEQ, DIM, generator=gen, device="cuda", dtype=torch.bfloat16)
              for _ in range(4)]  # fmt: skip
    expected = reference(layout, *inputs)
    results = {}
    for name, mask_mod in forms(layout).items():
        for backend in BACKENDS:
            record = run_form(mask_mod, block_mask, backend, inputs, expected)
            results[f"{name}/{backend}"] = record
            print(f"{name:16s} {backend:7s}", record, flush=True)
    date = datetime.date.today().isoformat()
    out = Path(args.out or f"benchmarks/results/checks/{date}-flash-token-mask.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {"date": date, "environment": environment(), "command": " ".join(sys.argv),
                "layout": f"200-token window, {HEADS} heads, {SEQ} tokens, blocks of {BLOCK}",
                "results": results, "seconds": time.time() - started}  # fmt: skip
    out.write_text(json.dumps(document, indent=1))
    print(f"wrote {out}; {time.time() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
