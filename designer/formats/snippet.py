"""A short Python program that loads a saved ``.pt`` design, offered beside the download."""

from __future__ import annotations

import textwrap

#: Longest file name the snippet will embed.
MAX_FILENAME_CHARS = 255


def check_filename(filename: object) -> str:
    """``filename`` if it is 1 to ``MAX_FILENAME_CHARS`` printable characters (code embeds it)."""
    if not isinstance(filename, str):
        raise TypeError(f"filename must be a str, got {type(filename).__name__}")
    if not filename or len(filename) > MAX_FILENAME_CHARS or not filename.isprintable():
        raise ValueError(
            f"filename must be 1 to {MAX_FILENAME_CHARS} printable characters, got {filename!r:.80}"
        )
    return filename


def python_snippet(filename: str) -> str:
    """Python code loading ``filename`` with ``designer.formats.load_design`` and with plain torch.

    The name is embedded as a Python string literal (``repr``), so any name stays data.

    >>> print(python_snippet("sliding.pt").splitlines()[2])
    design = load_design('sliding.pt')
    """
    name = repr(check_filename(filename))
    return textwrap.dedent(
        f"""\
        # With the designer installed:
        from designer.formats import load_design
        design = load_design({name})
        layout = design.layout  # Layout: .blocks is a bool [heads, q_blocks, k_blocks] tensor
        print(design.name, layout.shape, "block", layout.block_size, "density", layout.density)

        # With torch and numpy alone (weights_only: the file holds only tensors and plain values):
        import numpy as np
        import torch
        saved = torch.load({name}, weights_only=True)
        bits, shape = saved["layout"]["bits"], saved["layout"]["shape"]  # bit-packed, MSB first
        blocks = np.unpackbits(bits.numpy(), count=int(np.prod(shape))).reshape(shape)
        print(saved["name"], blocks.shape, "block", saved["block_size"])
        """
    )
