"""The backward kernels: the gradients of the forward, on two families of kernels.

- ``fused.py`` / ``fused.cu``: the preprocessing kernel (Δ and the base-2 logsumexp, which every
  build runs) and the dK/dV/dQ kernel, one CTA per key tile, ``mma.sync`` or (Hopper, sm_90a)
  ``wgmma``: every GPU's build;
- ``sm90.py`` / ``sm90.cu``: Hopper's warp-specialised key-major backward (TMA producer, two
  consumer warpgroups on a 128-key tile), dQ by bulk reductions, by atomics, or by
- ``sm90_dq.py`` / ``sm90_dq.cu``: the query-major dQ kernel (deterministic, no atomics);
- ``builds.py``: the build a plan takes, with the measurements behind the table;
- ``lut.py``: the forward's table transposed (the query tiles that attend to each key tile).

Their own headers (``attention_bwd_tiles.cuh``, ``attention_bwd_products.cuh``,
``attention_bwd_scores.cuh``) sit here, the shared ones in ``gpu/include/``.
"""
