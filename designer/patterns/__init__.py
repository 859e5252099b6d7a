"""The pattern library: DeepSpeed's ``SparsityConfig`` family and block-level generators.

A pattern lives in one module: its function and its ``SPECS`` (name, label, rule, parameters with
defaults, ranges and help, builder). ``PATTERNS`` and ``make_pattern`` (``registry.py``, which
finds the modules itself) name them all for the app and for recipes.
Every generator takes the shape positionally, ``(n_heads, n_q_blocks, n_k_blocks)``, then
keyword-only parameters (several may be one value per head), validates them all, and returns a
compact ``torch.bool`` tensor ``[n_heads, n_q_blocks, n_k_blocks]``. With ``n_q_blocks !=
n_k_blocks`` the grid is aligned at the top-left corner: query block ``row`` and key block ``col``
are compared as indices, so ``col <= row`` is causal, as in ``Layout.causal_clip``.

>>> sliding_window(2, 8, 8, window_blocks=[2, 4]).shape
torch.Size([2, 8, 8])
"""

from designer.patterns.attention_sinks import attention_sinks
from designer.patterns.block_diagonal import block_diagonal
from designer.patterns.causal import causal
from designer.patterns.deepspeed_base import DenseSparsityConfig, SparsityConfig
from designer.patterns.deepspeed_fixed import FixedSparsityConfig
from designer.patterns.deepspeed_variable import VariableSparsityConfig
from designer.patterns.deepspeed_window import (
    BigBirdSparsityConfig,
    BSLongformerSparsityConfig,
    LocalSlidingWindowSparsityConfig,
)
from designer.patterns.dilated_window import dilated_window
from designer.patterns.global_tokens import global_tokens
from designer.patterns.neighborhood_2d import neighborhood_2d
from designer.patterns.packed_documents import packed_documents
from designer.patterns.prefix_lm import prefix_lm
from designer.patterns.random_blocks import random_blocks
from designer.patterns.registry import PATTERNS, ParamSpec, PatternSpec, make_pattern
from designer.patterns.sliding_window import sliding_window
from designer.patterns.vertical_slash import vertical_slash

__all__ = [
    "PATTERNS",
    "BSLongformerSparsityConfig",
    "BigBirdSparsityConfig",
    "DenseSparsityConfig",
    "FixedSparsityConfig",
    "LocalSlidingWindowSparsityConfig",
    "ParamSpec",
    "PatternSpec",
    "SparsityConfig",
    "VariableSparsityConfig",
    "attention_sinks",
    "block_diagonal",
    "causal",
    "dilated_window",
    "global_tokens",
    "make_pattern",
    "neighborhood_2d",
    "packed_documents",
    "prefix_lm",
    "random_blocks",
    "sliding_window",
    "vertical_slash",
]
