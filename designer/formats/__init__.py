"""Reading and writing layouts and designs in our files and other libraries' formats.

- ``.pt`` design files: ``save_design`` / ``load_design``; ``read_design_file`` reads every file
  below and bare DeepSpeed-style tensors, and says which it found (``LoadedDesign.kind``);
- FlexAttention: ``to_block_mask`` / ``from_block_mask`` at Flex's 128-token tiles, which its
  compiled forward and backward take on the Triton and the FLASH (FA4) backend alike;
  ``block_mask_tensors`` for a file;
- CSR: ``to_csr`` / ``from_csr``;
- MIT Block-Sparse-Attention: ``to_base_blockmask`` / ``from_base_blockmask``;
- JSON recipe: ``recipe_to_json`` / ``design_from_json``;
- code for users' scripts: ``python_snippet`` loads a saved design and runs it as
  ``gpu.BlockSparseAttention`` (``module_snippet``: that use alone), ``flex_snippet`` builds its
  FlexAttention ``BlockMask`` with a ``mask_mod``, ``deepspeed_snippet`` is a ``SparsityConfig``
  subclass returning it.
"""

from designer.formats.block_mask import block_mask_tensors, from_block_mask, to_block_mask
from designer.formats.csr import from_csr, to_csr
from designer.formats.deepspeed_snippet import deepspeed_snippet
from designer.formats.flex_snippet import flex_snippet
from designer.formats.json_recipe import design_from_json, recipe_to_json
from designer.formats.mit_blockmask import MIT_BLOCK_SIZE, from_base_blockmask, to_base_blockmask
from designer.formats.pt_file import save_design
from designer.formats.reader import LoadedDesign, load_design, read_design_file
from designer.formats.snippet import module_snippet, python_snippet

__all__ = [
    "MIT_BLOCK_SIZE",
    "LoadedDesign",
    "block_mask_tensors",
    "deepspeed_snippet",
    "design_from_json",
    "flex_snippet",
    "from_base_blockmask",
    "from_block_mask",
    "from_csr",
    "load_design",
    "module_snippet",
    "python_snippet",
    "read_design_file",
    "recipe_to_json",
    "save_design",
    "to_base_blockmask",
    "to_block_mask",
    "to_csr",
]
