"""Sliding and dilated windows in tokens (attention-gym's ``sliding_window``)."""

from __future__ import annotations

from designer.patterns._common import causal_param
from designer.patterns._tokens import MaskMod, named, token_spec, tokens_param
from designer.patterns.specs import ParamSpec
from designer.validate import check_bool, check_int


def token_sliding_window(window_tokens: int, *, causal: bool = True) -> MaskMod:
    """Keys at most ``window_tokens`` from the query: ``0 <= q - k <= window_tokens`` (causal)
    or ``|q - k| <= window_tokens``.

    ``window_tokens=1``, causal and bidirectional, on four tokens::

        █···   ██··
        ██··   ███·
        ·██·   ·███
        ··██   ··██

    >>> import torch
    >>> token_sliding_window(1)(0, 0, torch.tensor([3, 3]), torch.tensor([2, 1])).tolist()
    [True, False]
    """
    window = check_int("window_tokens", window_tokens, low=1)
    causal = check_bool("causal", causal)

    def mask_mod(b, h, q_idx, kv_idx):
        if causal:
            return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)
        return (q_idx - kv_idx).abs() <= window

    return named(mask_mod, f"sliding_window_{window}" + "_causal" * causal)


def token_dilated_window(window_tokens: int, dilation: int, *, causal: bool = True) -> MaskMod:
    """Every ``dilation``-th key of the window: the sliding window and ``(q - k) % dilation ==
    0``.

    >>> import torch
    >>> token_dilated_window(4, 2)(0, 0, torch.tensor([4, 4]), torch.tensor([2, 1])).tolist()
    [True, False]
    """
    window = token_sliding_window(window_tokens, causal=causal)
    dilation = check_int("dilation", dilation, low=1, high=1 << 20)

    def mask_mod(b, h, q_idx, kv_idx):
        return window(b, h, q_idx, kv_idx) & ((q_idx - kv_idx) % dilation == 0)

    return named(mask_mod, f"dilated_{window.__name__}_every_{dilation}")


SPECS = (
    token_spec(
        "token_sliding_window",
        "sliding window",
        "0 <= q - k <= window_tokens (causal), |q - k| <= window_tokens otherwise",
        (
            tokens_param("window_tokens", 256, "keys on each side of the query, in tokens"),
            causal_param(True, "keep only k <= q"),
        ),
        token_sliding_window,
        order=300,
    ),
    token_spec(
        "token_dilated_window",
        "dilated window",
        "the sliding window, every dilation-th key: (q - k) % dilation == 0",
        (
            tokens_param("window_tokens", 512, "keys on each side of the query, in tokens"),
            ParamSpec("dilation", "int", 2, low=1, high=1 << 20, help="attend every n-th key"),
            causal_param(True, "keep only k <= q"),
        ),
        token_dilated_window,
        order=310,
    ),
)
