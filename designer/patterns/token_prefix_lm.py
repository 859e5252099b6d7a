"""Prefix-LM in tokens: a bidirectional prefix, causal after it (attention-gym's ``prefix_lm``)."""

from __future__ import annotations

from designer.patterns._tokens import MaskMod, named, token_spec, tokens_param
from designer.validate import check_int


def token_prefix_lm(prefix_tokens: int) -> MaskMod:
    """Every query sees the whole prefix and the keys before it: ``k <= q or k < prefix``.

    ``prefix_tokens=2`` on four tokens::

        ██··
        ██··
        ███·
        ████

    >>> import torch
    >>> token_prefix_lm(2)(0, 0, torch.tensor([0, 0]), torch.tensor([1, 2])).tolist()
    [True, False]
    """
    prefix = check_int("prefix_tokens", prefix_tokens, low=0)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (kv_idx < prefix)

    return named(mask_mod, f"prefix_lm_{prefix}")


SPECS = (
    token_spec(
        "token_prefix_lm",
        "prefix-LM",
        "k <= q or k < prefix_tokens",
        (tokens_param("prefix_tokens", 256, "tokens of the bidirectional prefix", low=0),),
        token_prefix_lm,
        order=320,
    ),
)
