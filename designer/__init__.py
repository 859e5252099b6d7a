"""Block-Sparse Attention Designer: layouts, patterns, segmentation, editing and formats.

Pure Python with numpy and torch on the CPU: no Streamlit, no GPU.
"""

from designer.design import Design
from designer.layout import Layout
from designer.mask_mod import from_mask_mod
from designer.partials import PartialBlocks

__all__ = ["Design", "Layout", "PartialBlocks", "from_mask_mod"]
