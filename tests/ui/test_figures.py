import base64
import io

import numpy as np
from PIL import Image

from designer.ui.figures import (
    editor_figure,
    head_density_figure,
    legend_html,
    png_bytes,
    png_data_uri,
)
from designer.ui.selection import MarkerGrid


def decode(uri):
    assert uri.startswith("data:image/png;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))


def test_png_round_trip(rng):
    picture = rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    assert np.array_equal(decode(png_data_uri(picture)), picture)
    assert png_bytes(picture)[:8] == b"\x89PNG\r\n\x1a\n"


def test_editor_figure_has_picture_under_selectable_markers(rng):
    picture = rng.integers(0, 256, size=(6, 9, 3), dtype=np.uint8)
    grid = MarkerGrid.for_shape(6, 9)
    figure = editor_figure(picture, grid, head=3)
    image, markers = figure.data
    assert image.type == "image" and markers.type == "scattergl"
    assert np.array_equal(decode(image.source), picture)
    assert (image.x0, image.dx, image.y0, image.dy) == (0, 1, 0, 1)
    assert len(markers.x) == 54 and markers.marker.symbol == "square"
    custom = np.asarray(markers.customdata)
    assert custom.shape == (54, 3) and (custom[:, 0] == 3).all()
    assert custom[10].tolist() == [3, 1, 1] and (markers.x[10], markers.y[10]) == (1, 1)
    assert figure.layout.dragmode == "select"
    assert tuple(figure.layout.yaxis.range) == (5.5, -0.5)  # query rows top to bottom


def test_editor_figure_places_a_shrunk_picture_on_block_coordinates():
    grid = MarkerGrid.for_shape(300, 300)
    picture = np.zeros((150, 150, 3), dtype=np.uint8)
    image, markers = editor_figure(picture, grid, head=0, blocks_per_pixel=2).data
    assert (image.x0, image.dx) == (0.5, 2)  # pixel 0 covers blocks 0 and 1
    assert grid.stride == 3 and len(markers.x) == 100 * 100
    assert (markers.x[0], markers.y[0]) == (1, 1)  # centre of blocks 0..2


def test_head_density_figure():
    figure = head_density_figure([0.5, 0.25])
    assert list(figure.data[0].y) == [50.0, 25.0]


def test_legend_escapes_labels():
    text = legend_html([("#123456", "width <2>")])
    assert "#123456" in text and "width &lt;2&gt;" in text and "<2>" not in text
