"""A DeepSpeed ``SparsityConfig`` subclass whose ``make_layout`` returns the design, as code.

DeepSpeed-style code takes a layout from a config's ``make_layout(seq_len)``: an int64
``[num_heads, nb, nb]`` tensor. The snippet defines ``DesignSparsityConfig``, which loads the
"DeepSpeed layout" download (that tensor, saved with ``torch.save``) and returns it for the
design's sequence length, refusing any other. It imports ``SparsityConfig`` from DeepSpeed where
installed, else from ``designer.patterns`` (the same class, kept with exact parity).
"""

from __future__ import annotations

import textwrap

from designer.design import Design
from designer.formats.snippet import check_filename


def deepspeed_snippet(design: Design, layout_filename: str) -> str:
    """Code of a ``SparsityConfig`` subclass returning ``design``'s layout from ``layout_filename``.

    Only square layouts fit DeepSpeed (one ``seq_len`` for queries and keys); others raise.
    """
    if not isinstance(design, Design):
        raise TypeError(f"design must be a Design, got {type(design).__name__}")
    layout_filename = check_filename(layout_filename)
    layout = design.layout
    if layout.n_q_blocks != layout.n_k_blocks:
        raise ValueError(
            f"DeepSpeed layouts are square (one seq_len); this one is {layout.n_q_blocks} x "
            f"{layout.n_k_blocks} blocks"
        )
    kept = (
        "one saved head serves every head"
        if layout.n_heads == 1
        else f"the {layout.n_heads} saved heads, one per head"
    )
    return textwrap.dedent(
        f"""\
        # {design.name!r} as a DeepSpeed sparsity config.
        import torch

        try:
            from deepspeed.ops.sparse_attention import SparsityConfig
        except ImportError:  # DeepSpeed removed sparse attention; the designer keeps the class
            from designer.patterns import SparsityConfig


        class DesignSparsityConfig(SparsityConfig):
            \"\"\"The designed layout, {layout.n_heads} heads of {layout.n_q_blocks}² blocks.\"\"\"

            HEADS, BLOCK, SEQ_LEN = {layout.n_heads}, {layout.block_size}, {layout.seq_len_q}
            LAYOUT_FILE = {layout_filename!r}

            def __init__(self, num_heads=HEADS, block=BLOCK, layout_file=None):
                super().__init__(num_heads, block, different_layout_per_head=True)
                self.layout_file = layout_file or self.LAYOUT_FILE

            def make_layout(self, seq_len):
                layout = self.setup_layout(seq_len)  # checks seq_len % block
                if seq_len != self.SEQ_LEN:
                    raise ValueError(f"the design is for seq_len {{self.SEQ_LEN}}, got {{seq_len}}")
                saved = torch.load(self.layout_file, weights_only=True)  # int64 [heads, nb, nb]
                layout[:] = saved.to(layout.dtype)  # {kept}
                return layout


        config = DesignSparsityConfig()
        layout = config.make_layout(DesignSparsityConfig.SEQ_LEN)
        print(tuple(layout.shape), layout.dtype, int(layout.sum()), "active blocks")
        """
    )
