import numpy as np
import pytest
import torch

from designer.validate import (
    as_block_tensor,
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_int_list,
    check_keys,
    check_layout_shape,
    error_context,
    per_head,
)


def test_check_int_accepts_numpy_ints_and_rejects_bool_and_float():
    assert check_int("n", np.int64(3), low=1) == 3
    with pytest.raises(TypeError, match=r"n must be an integer, got bool True"):
        check_int("n", True)
    with pytest.raises(TypeError, match=r"n must be an integer, got float 2.0"):
        check_int("n", 2.0)


@pytest.mark.parametrize(
    ("low", "high", "value", "message"),
    [
        (1, 64, 0, r"window_blocks must be in \[1, 64\], got 0"),
        (1, None, -3, r"window_blocks must be >= 1, got -3"),
        (None, 5, 6, r"window_blocks must be <= 5, got 6"),
    ],
)
def test_check_int_range_message(low, high, value, message):
    with pytest.raises(ValueError, match=message):
        check_int("window_blocks", value, low=low, high=high)


def test_check_float():
    assert check_float("p", 0.5, low=0, high=1) == 0.5
    with pytest.raises(ValueError, match=r"p must be finite, got nan"):
        check_float("p", float("nan"))
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\], got 1.5"):
        check_float("p", 1.5, low=0, high=1)
    with pytest.raises(TypeError, match="p must be a number"):
        check_float("p", "0.5")


def test_check_bool_and_choice():
    assert check_bool("causal", np.bool_(True)) is True
    with pytest.raises(TypeError, match="causal must be True or False, got int 1"):
        check_bool("causal", 1)
    assert check_choice("mode", "safe", ("safe", "deepspeed")) == "safe"
    with pytest.raises(ValueError, match="mode must be one of 'safe', 'deepspeed', got 'x'"):
        check_choice("mode", "x", ("safe", "deepspeed"))


def test_check_int_list_names_the_bad_item():
    assert check_int_list("g", (0, 3), low=0) == [0, 3]
    with pytest.raises(ValueError, match=r"g\[1\] must be >= 0, got -1"):
        check_int_list("g", [0, -1], low=0)
    with pytest.raises(TypeError, match="g must be a list of integers, got str"):
        check_int_list("g", "01")
    with pytest.raises(ValueError, match=r"g must have 1 to 2 items, got 3"):
        check_int_list("g", [1, 2, 3], min_len=1, max_len=2)


@pytest.mark.parametrize(
    ("min_len", "max_len", "values", "message"),
    [
        (2, 2, [1], r"g must have 2 items, got 1"),
        (1, 1, [], r"g must have 1 item, got 0"),
        (1, None, [], r"g must have at least 1 item, got 0"),
        (3, None, [1], r"g must have at least 3 items, got 1"),
        (0, 1, [1, 2], r"g must have at most 1 item, got 2"),
        (0, 2, [1, 2, 3], r"g must have at most 2 items, got 3"),
    ],
)
def test_check_int_list_count_message(min_len, max_len, values, message):
    with pytest.raises(ValueError, match=message):
        check_int_list("g", values, min_len=min_len, max_len=max_len)


def test_check_layout_shape_returns_ints():
    assert check_layout_shape(2, 3, 4) == (2, 3, 4)


@pytest.mark.parametrize(
    ("shape", "error", "message"),
    [
        ((0, 4, 4), ValueError, r"n_heads must be in \[1, 1024\], got 0"),
        ((1, 0, 4), ValueError, r"n_q_blocks must be in \[1, 65536\], got 0"),
        ((1, 4, 70000), ValueError, r"n_k_blocks must be in \[1, 65536\], got 70000"),
        ((1.0, 4, 4), TypeError, r"n_heads must be an integer, got float 1.0"),
        ((1, "4", 4), TypeError, r"n_q_blocks must be an integer, got str"),
        ((64, 2048, 2048), ValueError, r"must be <= 67,108,864, got 268,435,456"),
    ],
)
def test_check_layout_shape_errors(shape, error, message):
    with pytest.raises(error, match=message):
        check_layout_shape(*shape)


def test_check_keys_names_missing_and_unknown_keys():
    assert check_keys("x", {"a": 1}, ("a",), ("b",)) == {"a": 1}
    with pytest.raises(ValueError, match="x is missing 'a', 'c'"):
        check_keys("x", {"b": 1}, ("a", "c"), ("b",))
    with pytest.raises(ValueError, match=r"x has unknown keys \['d'\]; allowed: 'a', 'b'"):
        check_keys("x", {"a": 1, "d": 2}, ("a",), ("b",))


def test_error_context_prefixes_the_message_and_keeps_the_kind():
    prefixed = pytest.raises(TypeError, match=r"^steps\[1\]: x must be an integer")
    with prefixed as caught, error_context("steps[1]"):
        check_int("x", 1.5)
    assert isinstance(caught.value.__cause__, TypeError)
    as_value = pytest.raises(ValueError, match=r"^file: x must be an integer")
    with as_value, error_context("file", as_value_error=True):
        check_int("x", 1.5)
    with pytest.raises(KeyError), error_context("file", as_value_error=True):
        raise KeyError("other errors pass through unchanged")


def test_per_head_broadcasts_or_checks_length():
    def check(name, value):
        return check_int(name, value, low=1)

    assert per_head("w", 2, 3, check) == [2, 2, 2]
    assert per_head("w", [1, 2, 3], 3, check) == [1, 2, 3]
    with pytest.raises(ValueError, match=r"w must be one value or one per head \(3\), got 2"):
        per_head("w", [1, 2], 3, check)
    with pytest.raises(ValueError, match=r"w\[1\] must be >= 1, got 0"):
        per_head("w", [1, 0, 1], 3, check)


def test_as_block_tensor_copies_and_converts():
    source = torch.tensor([[[0, 1], [1, 0]]], dtype=torch.int32)
    result = as_block_tensor("layout", source)
    assert result.dtype == torch.bool and result.tolist() == [[[False, True], [True, False]]]
    result[0, 0, 0] = True
    assert source[0, 0, 0] == 0, "the input must never be shared or mutated"
    assert as_block_tensor("layout", np.eye(3, dtype=np.uint8), allow_2d=True).shape == (1, 3, 3)


@pytest.mark.parametrize(
    ("array", "error", "message"),
    [
        (torch.ones(2, 2, 2), TypeError, "must hold integers or bools, got dtype torch.float32"),
        (np.ones((2, 2, 2), dtype=np.float64), TypeError, "got dtype float64"),
        ([[[1]]], TypeError, "layout must be a torch tensor or numpy array, got list"),
        (torch.ones(2, 2, dtype=torch.int64), ValueError, r"must have rank 3 \(\[H, M, N\]\)"),
        (torch.full((1, 2, 2), 2), ValueError, r"only 0 and 1, got values in \[2, 2\]"),
        (torch.full((1, 2, 2), -1), ValueError, r"only 0 and 1, got values in \[-1, -1\]"),
    ],
)
def test_as_block_tensor_rejects(array, error, message):
    with pytest.raises(error, match=message):
        as_block_tensor("layout", array)


def test_as_block_tensor_refuses_huge_before_copying():
    huge = torch.zeros(1, 1, 1, dtype=torch.uint8).expand(1000, 1000, 1000)  # no memory used
    with pytest.raises(ValueError, match="1,000,000,000 cells"):
        as_block_tensor("layout", huge)
