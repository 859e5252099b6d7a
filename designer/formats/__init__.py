"""Reading and writing layouts and designs in our files and other libraries' formats.

- ``.pt`` design files: ``save_design`` / ``load_design`` (also bare DeepSpeed-style tensors);
- FlexAttention: ``to_block_mask`` / ``from_block_mask``.
"""

from designer.formats.block_mask import from_block_mask, to_block_mask
from designer.formats.pt_file import load_design, save_design

__all__ = [
    "from_block_mask",
    "load_design",
    "save_design",
    "to_block_mask",
]
