import base64
import io

import numpy as np
from PIL import Image

from ui.figures import (
    head_density_figure,
    legend_html,
    png_bytes,
    png_data_uri,
)


def decode(uri):
    assert uri.startswith("data:image/png;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))))


def test_png_round_trip(rng):
    picture = rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    assert np.array_equal(decode(png_data_uri(picture)), picture)
    assert png_bytes(picture)[:8] == b"\x89PNG\r\n\x1a\n"


def test_head_density_figure():
    figure = head_density_figure([0.5, 0.25])
    assert list(figure.data[0].y) == [50.0, 25.0]


def test_legend_escapes_labels():
    text = legend_html([("#123456", "width <2>")])
    assert "#123456" in text and "width &lt;2&gt;" in text and "<2>" not in text
