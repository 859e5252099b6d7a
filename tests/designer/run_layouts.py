"""Row runs of small dense layouts, for the tests of functions that read runs: a slow, plainly
right converter and a hypothesis strategy of layouts with the shapes runs must get right."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from designer.run_arrays import RunArrays


def dense_to_runs(dense: np.ndarray) -> RunArrays:
    """The maximal runs of each block row of a ``[H, M, N]`` 0/1 array, one cell at a time."""
    n_heads, n_rows, n_cols = dense.shape
    row_ptr, starts, stops = [0], [], []
    for h in range(n_heads):
        for m in range(n_rows):
            n = 0
            while n < n_cols:
                if dense[h, m, n]:
                    first = n
                    while n < n_cols and dense[h, m, n]:
                        n += 1
                    starts.append(first)
                    stops.append(n)
                else:
                    n += 1
            row_ptr.append(len(starts))
    return RunArrays(
        (n_heads, n_rows, n_cols),
        np.array(row_ptr, dtype=np.int64),
        np.array(starts, dtype=np.int32),
        np.array(stops, dtype=np.int32),
    )


@st.composite
def dense_layouts(draw, max_side: int = 24) -> np.ndarray:
    """Random ``[H, M, N]`` bool layouts, M and N drawn apart: random densities, empty and
    all-ones heads, long runs (bands and whole rows) and sinks beside a window."""
    n_heads = draw(st.integers(1, 3))
    n_rows, n_cols = draw(st.integers(1, max_side)), draw(st.integers(1, max_side))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    heads = []
    for _ in range(n_heads):
        kind = draw(st.sampled_from(["random", "empty", "ones", "band", "rows", "sinks"]))
        rows, cols = np.arange(n_rows)[:, None], np.arange(n_cols)[None, :]
        if kind == "random":
            head = rng.random((n_rows, n_cols)) < draw(st.floats(0.05, 0.95))
        elif kind == "empty":
            head = np.zeros((n_rows, n_cols), dtype=bool)
        elif kind == "ones":
            head = np.ones((n_rows, n_cols), dtype=bool)
        elif kind == "band":
            width = draw(st.integers(1, max_side))
            head = (rows - cols >= 0) & (rows - cols < width)
        elif kind == "rows":
            head = np.repeat(rng.random((n_rows, 1)) < 0.5, n_cols, axis=1)
        else:
            window = draw(st.integers(1, max_side))
            head = (cols <= rows) & ((cols < draw(st.integers(1, 3))) | (rows - cols < window))
        heads.append(head)
    return np.stack(heads)
