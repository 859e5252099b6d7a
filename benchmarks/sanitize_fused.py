"""Small fused-kernel calls for ``compute-sanitizer``: every feature that moves an address.

Run under the sanitizer with PyTorch's caching allocator off, so that each tensor is its own
allocation and a read past its end is caught (from the repository root)::

    export PYTHONPATH=. PYTORCH_NO_CUDA_MEMORY_CACHING=1
    compute-sanitizer --tool memcheck python benchmarks/sanitize_fused.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_fused.py

Cases: both dtypes and head dims; layout blocks 16 and 128; partial last blocks (Sq = 1000,
Sk = 1500 at block 64; Sq = 100, Sk = 37 at block 16); both causal alignments; GQA 4/1; ``[B, S,
H, D]`` memory read in place; an empty layout; the logsumexp output. Each result is checked
against the fp64 reference, so a case that runs clean but computes wrong still fails.
"""

from __future__ import annotations

import torch

import gpu
from gpu.reference import dense_masked_attention

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 5e-3}


def run_case(name, seq_q, seq_k, block, head_dim, dtype, *, q_heads=2, kv_heads=2, causal=False,
             alignment="top_left", bshd=False, empty=False) -> None:  # fmt: skip
    gen = torch.Generator(device="cuda").manual_seed(seq_q + seq_k + block)
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    blocks = torch.rand(q_heads, n_q, n_k, generator=gen, device="cuda").cpu() < 0.5
    blocks[:, -1, -1] = True
    if empty:
        blocks[:] = False

    def tensor(heads, seq):
        shape = (1, seq, heads, head_dim) if bshd else (1, heads, seq, head_dim)
        x = torch.randn(shape, generator=gen, device="cuda", dtype=dtype)
        return x.transpose(1, 2) if bshd else x

    q, k, v = tensor(q_heads, seq_q), tensor(kv_heads, seq_k), tensor(kv_heads, seq_k)
    plan = gpu.plan(blocks, block, causal=causal, causal_alignment=alignment, seq_q=seq_q,
                    seq_k=seq_k, device="cuda")  # fmt: skip
    out, lse = gpu.block_sparse_attention(q, k, v, plan, return_lse=True)
    torch.cuda.synchronize()
    ref, ref_lse = dense_masked_attention(q, k, v, blocks, block, causal=causal,
                                          causal_alignment=alignment, return_lse=True)  # fmt: skip
    norm = ref.norm()
    error = float((out.double() - ref).norm() / norm) if norm > 0 else float(out.abs().max())
    lse_error = float((lse.double() - ref_lse).nan_to_num(0.0).abs().max())  # -inf - -inf: nan
    same_empty = bool((torch.isinf(lse) == torch.isinf(ref_lse)).all())
    good = error <= TOLERANCE[dtype] and lse_error < 1e-2 and same_empty
    status = "ok" if good and torch.isfinite(out).all() else "WRONG"
    print(f"{name:36s} rel err {error:.1e} lse err {lse_error:.1e} {status}", flush=True)
    if status != "ok":
        raise SystemExit(f"{name}: relative error {error:.2e}")


def main() -> None:
    for dtype in (torch.bfloat16, torch.float16):
        for head_dim in (64, 128):
            tag = f"{str(dtype)[6:]}-d{head_dim}"
            run_case(f"partial 1000x1500 b64 {tag}", 1000, 1500, 64, head_dim, dtype)
            run_case(f"partial causal br 100x37 b16 {tag}", 100, 37, 16, head_dim, dtype,
                     causal=True, alignment="bottom_right")  # fmt: skip
            run_case(f"gqa 4/1 causal b128 {tag}", 384, 384, 128, head_dim, dtype, q_heads=4,
                     kv_heads=1, causal=True)  # fmt: skip
            run_case(f"bshd partial b32 {tag}", 300, 200, 32, head_dim, dtype, bshd=True)
            run_case(f"empty b64 {tag}", 128, 192, 64, head_dim, dtype, empty=True)
    print("all cases done")


if __name__ == "__main__":
    main()
