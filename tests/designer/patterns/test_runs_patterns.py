import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.patterns import make_pattern
from designer.patterns.attention_sinks import attention_sinks, attention_sinks_runs
from designer.patterns.causal import causal, causal_runs
from designer.patterns.dilated_window import dilated_window, dilated_window_runs
from designer.patterns.global_tokens import global_tokens, global_tokens_runs
from designer.patterns.registry import PATTERNS, RUNS_PATTERNS
from designer.patterns.sliding_window import sliding_window, sliding_window_runs
from designer.threads import one_thread

shapes = st.tuples(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9))
sizes = st.integers(1, 10)


@pytest.fixture(autouse=True)
def _one_thread():
    with one_thread():
        yield


def same(runs, dense):
    assert torch.equal(runs.to_dense(), dense)


@settings(max_examples=40, deadline=None)
@given(shapes, st.lists(sizes, min_size=3, max_size=3), st.booleans())
def test_windows_as_runs_are_the_dense_windows(shape, windows, causal_flag):
    per_head = windows[: shape[0]]
    same(sliding_window_runs(*shape, window_blocks=per_head, causal=causal_flag),
         sliding_window(*shape, window_blocks=per_head, causal=causal_flag))  # fmt: skip
    same(causal_runs(*shape), causal(*shape))


@settings(max_examples=40, deadline=None)
@given(shapes, st.integers(0, 10), sizes)
def test_sinks_as_runs_are_the_dense_sinks(shape, sink, window):
    same(attention_sinks_runs(*shape, sink_blocks=sink, window_blocks=window),
         attention_sinks(*shape, sink_blocks=sink, window_blocks=window))  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(shapes, sizes, st.integers(1, 4), st.booleans())
def test_dilated_windows_as_runs_are_the_dense_ones(shape, window, dilation, causal_flag):
    params = {"window_blocks": window, "dilation": dilation, "causal": causal_flag}
    same(dilated_window_runs(*shape, **params), dilated_window(*shape, **params))


@settings(max_examples=40, deadline=None)
@given(shapes, st.data(), st.sampled_from([(True, True), (True, False), (False, True)]))
def test_global_blocks_as_runs_are_the_dense_ones(shape, data, sides):
    rows, columns = sides
    high = min(n for n, used in ((shape[1], rows), (shape[2], columns)) if used) - 1
    chosen = data.draw(st.lists(st.integers(0, high), min_size=1, max_size=4))
    params = {"global_blocks": chosen, "rows": rows, "columns": columns}
    same(global_tokens_runs(*shape, **params), global_tokens(*shape, **params))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(0, 14), st.data(), st.booleans(), st.booleans())
def test_deepspeed_windows_as_runs_are_deepspeed_s(n_blocks, window, data, causal_flag, spans):
    if window > n_blocks:
        return
    starts = data.draw(st.lists(st.integers(0, n_blocks - 1), min_size=1, max_size=3, unique=True))
    ends = [start + data.draw(st.integers(1, 3)) for start in starts] if spans else []
    attention = "unidirectional" if causal_flag else "bidirectional"
    for name, params in (
        ("deepspeed_longformer", {"different_layout_per_head": False,
                                  "num_sliding_window_blocks": window,
                                  "global_block_indices": starts,
                                  "global_block_end_indices": [min(e, n_blocks) for e in ends],
                                  "attention": attention}),
        ("deepspeed_local_sliding_window", {"num_sliding_window_blocks": window,
                                            "attention": attention}),
    ):  # fmt: skip
        spec = PATTERNS[name]
        if (
            name == "deepspeed_longformer"
            and spans
            and any(s >= min(e, n_blocks) for s, e in zip(starts, ends, strict=True))
        ):
            continue
        dense = spec.build(2, n_blocks, n_blocks, 16, params)
        same(spec.build_runs(2, n_blocks, n_blocks, params), dense)


def test_long_contexts_are_made_as_runs():
    layout = make_pattern("attention_sinks", 32, 16384, 16384, 64,
                          {"sink_blocks": 1, "window_blocks": 64})  # fmt: skip
    assert layout.runs is not None and layout.shape == (32, 16384, 16384)
    assert layout.nnz == 32 * (64 * 16384 - 63 * 64 // 2 + 16384 - 64)
    small = make_pattern("attention_sinks", 2, 64, 64, 64, {"sink_blocks": 1, "window_blocks": 8})
    assert small.runs is None
    assert torch.equal(small.blocks, attention_sinks(2, 64, 64, sink_blocks=1, window_blocks=8))


def test_dense_only_patterns_refuse_long_contexts_naming_the_others():
    assert set(RUNS_PATTERNS) == {
        "causal", "sliding_window", "dilated_window", "global_tokens", "attention_sinks",
        "deepspeed_longformer", "deepspeed_local_sliding_window",
    }  # fmt: skip
    with pytest.raises(
        ValueError,
        match=r"is made on a dense grid, at most 67,108,864 cells, "
        r"got 134,217,728 .*use a pattern made as row runs: causal, sliding_window",
    ):
        make_pattern("random_per_row", 32, 2048, 2048, 64, {})
    assert PATTERNS["random_per_row"].build_runs is None


def test_too_many_active_blocks_are_refused_after_the_runs_are_made():
    with pytest.raises(ValueError, match=r"at most 67,108,864 active blocks, got 4,295,229,440"):
        make_pattern("causal", 32, 16384, 16384, 64, {})
