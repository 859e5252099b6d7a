import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from designer.patterns import neighborhood_2d
from tests.designer.patterns.reference import PROPERTY, SHAPES, assert_blocks, of_head, shapes


def reference(shape, height, width, radius, dilation):
    """Token-level picture: place each block on the image, then look around it pixel by pixel."""
    n_heads, n_q, n_k = shape
    out = torch.zeros(shape, dtype=torch.bool)
    position = {y * width + x: (y, x) for y in range(height) for x in range(width)}
    for h in range(n_heads):
        reach, step = of_head(radius, h), of_head(dilation, h)
        for row in range(n_q):
            if row not in position:
                continue
            y, x = position[row]
            for dy in range(-reach, reach + 1):
                for dx in range(-reach, reach + 1):
                    ny, nx = y + dy * step, x + dx * step
                    col = ny * width + nx
                    if 0 <= ny < height and 0 <= nx < width and col < n_k:
                        out[h, row, col] = True
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("height", "width"), [(1, 1), (2, 2), (2, 3), (3, 2), (4, 4)])
@pytest.mark.parametrize(("radius", "dilation"), [(0, 1), (1, 1), (1, 2), (2, 1), (3, 3)])
def test_matches_reference(shape, height, width, radius, dilation):
    actual = neighborhood_2d(*shape, height=height, width=width, radius=radius, dilation=dilation)
    assert_blocks(actual, reference(shape, height, width, radius, dilation))


def test_radius_and_dilation_per_head():
    shape = (2, 12, 12)
    actual = neighborhood_2d(*shape, height=3, width=4, radius=[1, 2], dilation=[2, 1])
    assert_blocks(actual, reference(shape, 3, 4, [1, 2], [2, 1]))


def test_one_row_image_is_a_one_dimensional_window():
    actual = neighborhood_2d(1, 5, 5, height=1, width=5, radius=1)
    assert actual[0].int().tolist() == [
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1],
        [0, 0, 0, 1, 1],
    ]


@PROPERTY
@given(st.integers(1, 5), st.integers(1, 5), st.integers(0, 3), st.integers(1, 3), shapes())
def test_symmetric_and_sees_itself(height, width, radius, dilation, shape):
    side = height * width
    blocks = neighborhood_2d(
        1, side, side, height=height, width=width, radius=radius, dilation=dilation
    )
    assert torch.equal(blocks, blocks.transpose(1, 2))
    assert blocks[0].diagonal().all()
    assert int(blocks.sum(dim=2).max()) <= (2 * radius + 1) ** 2
    cut = neighborhood_2d(*shape, height=height, width=width, radius=radius, dilation=dilation)
    m, n = min(shape[1], side), min(shape[2], side)
    assert torch.equal(cut[:, :m, :n], blocks[:, :m, :n].expand(shape[0], -1, -1))
    assert not cut[:, m:, :].any() and not cut[:, :, n:].any()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"height": 0, "width": 2, "radius": 1},
            ValueError,
            r"height must be in \[1, 65536\], got 0",
        ),
        (
            {"height": 2, "width": 0, "radius": 1},
            ValueError,
            r"width must be in \[1, 32768\], got 0",
        ),
        (
            {"height": 256, "width": 257, "radius": 1},
            ValueError,
            r"width must be in \[1, 256\], got 257",
        ),
        (
            {"height": 2, "width": 2, "radius": -1},
            ValueError,
            r"radius must be in \[0, 65536\], got -1",
        ),
        (
            {"height": 2, "width": 2, "radius": 1, "dilation": 0},
            ValueError,
            r"dilation must be in \[1, ",
        ),
        (
            {"height": 2, "width": 2, "radius": [1]},
            ValueError,
            r"radius must be one value or one per",
        ),
        (
            {"height": 2.0, "width": 2, "radius": 1},
            TypeError,
            r"height must be an integer, got float",
        ),
    ],
)
def test_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        neighborhood_2d(2, 4, 4, **kwargs)
