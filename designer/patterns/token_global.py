"""Global tokens and attention sinks, in tokens (attention-gym's global and streaming masks)."""

from __future__ import annotations

from designer.patterns._tokens import MaskMod, named, token_spec, tokens_param
from designer.validate import check_int


def token_global(global_tokens: int) -> MaskMod:
    """The first ``global_tokens`` tokens attend everywhere and are attended by every query:
    ``q < g or k < g``.

    >>> import torch
    >>> token_global(1)(0, 0, torch.tensor([3, 3]), torch.tensor([0, 2])).tolist()
    [True, False]
    """
    count = check_int("global_tokens", global_tokens, low=1)

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx < count) | (kv_idx < count)

    return named(mask_mod, f"global_{count}")


def token_sinks(sink_tokens: int, window_tokens: int) -> MaskMod:
    """Streaming attention: causal, keys at most ``window_tokens`` back plus the first
    ``sink_tokens``: ``k <= q and (k < sinks or q - k <= window)``.

    >>> import torch
    >>> token_sinks(1, 1)(0, 0, torch.tensor([3, 3, 3]), torch.tensor([0, 1, 2])).tolist()
    [True, False, True]
    """
    sinks = check_int("sink_tokens", sink_tokens, low=0)
    window = check_int("window_tokens", window_tokens, low=0)

    def mask_mod(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & ((kv_idx < sinks) | (q_idx - kv_idx <= window))

    return named(mask_mod, f"sinks_{sinks}_window_{window}")


SPECS = (
    token_spec(
        "token_global",
        "global tokens",
        "q < global_tokens or k < global_tokens",
        (tokens_param("global_tokens", 16, "tokens at the start that attend and are attended"),),
        token_global,
        order=350,
    ),
    token_spec(
        "token_sinks",
        "sinks + window",
        "k <= q and (k < sink_tokens or q - k <= window_tokens)",
        (
            tokens_param("sink_tokens", 4, "first tokens every query attends", low=0),
            tokens_param("window_tokens", 256, "keys before the query, in tokens", low=0),
        ),
        token_sinks,
        order=360,
    ),
)
