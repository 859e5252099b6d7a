"""The backward kernels: the gradients of the forward, in one source with two instruction paths.

- ``fused.py`` / ``fused.cu``: the preprocessing kernel (Δ and the base-2 logsumexp) and the
  dK/dV/dQ kernel, one CTA per key tile, ``mma.sync`` or (Hopper, sm_90a) ``wgmma``;
- ``builds.py``: the build a plan takes per head dim and path, with the measurements behind it;
- ``lut.py``: the forward's table transposed (the query tiles that attend to each key tile).

Its own headers (``attention_bwd_tiles.cuh``, ``attention_bwd_products.cuh``) sit here, the
shared ones in ``gpu/include/``.
"""
