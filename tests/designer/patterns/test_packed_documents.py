import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import block_diagonal, causal, packed_documents
from tests.designer.patterns.reference import PROPERTY, SHAPES, assert_blocks, from_rule, shapes


def document_of(block, doc_blocks):
    """Walk the documents; None past the last one (padding)."""
    start = 0
    for doc, length in enumerate(doc_blocks):
        if start <= block < start + length:
            return doc
        start += length
    return None


def reference(shape, doc_blocks, causal):
    def rule(h, row, col):
        doc = document_of(row, doc_blocks)
        same = doc is not None and doc == document_of(col, doc_blocks)
        return same and (col <= row or not causal)

    return from_rule(*shape, rule)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("doc_blocks", [[1], [2, 1], [1, 1, 1, 1], [3, 5], [20]])
@pytest.mark.parametrize("is_causal", [True, False])
def test_matches_reference(shape, doc_blocks, is_causal):
    actual = packed_documents(*shape, doc_blocks=doc_blocks, causal=is_causal)
    assert_blocks(actual, reference(shape, doc_blocks, is_causal))


def test_padding_after_the_last_document_is_empty():
    blocks = packed_documents(1, 5, 5, doc_blocks=[2, 1], causal=False)[0]
    assert blocks.int().tolist() == [
        [1, 1, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0],
    ]


@PROPERTY
@given(shapes(), st.integers(1, 5), st.booleans())
def test_equal_documents_are_chunks(shape, length, is_causal):
    documents = [length] * (max(shape[1:]) // length + 1)
    packed = packed_documents(*shape, doc_blocks=documents, causal=is_causal)
    assert torch.equal(packed, block_diagonal(*shape, chunk_blocks=length, causal=is_causal))


@PROPERTY
@given(shapes())
def test_one_long_document_is_plain_causal(shape):
    assert torch.equal(packed_documents(*shape, doc_blocks=[max(shape[1:])]), causal(*shape))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"doc_blocks": []}, ValueError, r"doc_blocks must have 1 to 65536 items, got 0"),
        ({"doc_blocks": [2, 0]}, ValueError, r"doc_blocks\[1\] must be in \[1, 65536\], got 0"),
        ({"doc_blocks": 4}, TypeError, r"doc_blocks must be a list of integers, got int"),
        ({"doc_blocks": [1.5]}, TypeError, r"doc_blocks\[0\] must be an integer, got float"),
        ({"doc_blocks": [4], "causal": None}, TypeError, r"causal must be True or False"),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        packed_documents(1, 4, 4, **kwargs)
