"""The forward kernels: one flash-attention algorithm on the plan's look-up tables, in two builds.

- ``sm80.py`` / ``sm80.cu``: ``mma.sync`` (any GPU from sm_80), one CTA per query tile;
- ``sm90.py`` / ``sm90.cu``: Hopper (sm_90a), a TMA producer and ``wgmma`` consumers in
  persistent CTAs, its operands described by tensor maps (``tensor_maps.py``);
- ``builds.py``: which build a plan takes, with the measurements behind the table;
- ``lut.py``: the tables (which key tiles each query tile visits, and their masks);
- ``launch.py``: a plan's launch state, the checks of a call and the launch.

Their headers are in ``gpu/include/``, where the backward's Hopper dQ kernel also reads the
forward's masking and packing (``attention_forward.cuh``) and work order
(``persistent_units.cuh``).
"""
