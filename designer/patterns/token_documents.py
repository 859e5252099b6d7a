"""Packed documents in tokens: attention within each document of a list of lengths, causal or
not (attention-gym's ``document_mask``)."""

from __future__ import annotations

import torch

from designer.patterns._tokens import MAX_TOKENS, MaskMod, named, token_spec
from designer.patterns.specs import ParamSpec
from designer.validate import check_bool, check_int_list

#: Most documents a list may hold.
MAX_DOCUMENTS = 4096


def token_documents(doc_tokens: list[int], *, causal: bool = False) -> MaskMod:
    """Tokens attend within their document: ``doc(q) == doc(k)`` (and ``k <= q`` when causal).

    Documents follow each other from token 0 in the order given; tokens past the last one
    form one more document. ``doc_tokens=[1, 3]`` on four tokens, and causal::

        █···   █···
        ·███   ·█··
        ·███   ·██·
        ·███   ·███

    >>> import torch
    >>> token_documents([1, 3])(0, 0, torch.tensor([0, 1]), torch.tensor([1, 3])).tolist()
    [False, True]
    """
    lengths = check_int_list("doc_tokens", doc_tokens, low=1, high=MAX_TOKENS, min_len=1,
                             max_len=MAX_DOCUMENTS)  # fmt: skip
    causal = check_bool("causal", causal)
    ends = torch.tensor(lengths, dtype=torch.int64).cumsum(0)
    total = int(ends[-1])
    document = torch.searchsorted(ends, torch.arange(total), right=True)

    def mask_mod(b, h, q_idx, kv_idx):
        # past the table: the one more document, numbered after the listed ones
        same = document[q_idx.clamp(max=total - 1)] == document[kv_idx.clamp(max=total - 1)]
        same = torch.where((q_idx >= total) | (kv_idx >= total),
                           (q_idx >= total) & (kv_idx >= total), same)  # fmt: skip
        return same & (kv_idx <= q_idx) if causal else same

    return named(mask_mod, f"documents_{len(lengths)}_of_{total}" + "_causal" * causal)


def token_causal_documents(doc_tokens: list[int]) -> MaskMod:
    """``token_documents(doc_tokens, causal=True)``."""
    return token_documents(doc_tokens, causal=True)


def _lengths_param(default: tuple[int, ...]) -> ParamSpec:
    help = "each document's length in tokens; past them, one more document"
    return ParamSpec("doc_tokens", "int_list", default, low=1, high=MAX_TOKENS, help=help)


SPECS = (
    token_spec(
        "token_documents",
        "packed documents",
        "doc(q) == doc(k), documents of doc_tokens tokens one after another",
        (_lengths_param((100, 400, 524)),),
        token_documents,
        order=330,
    ),
    token_spec(
        "token_causal_documents",
        "causal documents",
        "doc(q) == doc(k) and k <= q",
        (_lengths_param((100, 400, 524)),),
        token_causal_documents,
        order=340,
    ),
)
