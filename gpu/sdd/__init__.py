"""The SDD pipeline (``impl="sdd"``): SDD, block-sparse softmax and DSD as three kernels.

- ``pipeline.py`` / ``pipeline.cu``: the kernels, their plan and launches;
- ``lut.py``: the tables they read, from the layout's ``sdd_segment`` tiling.
"""
