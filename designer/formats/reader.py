"""``read_design_file``: one reader for every file the designer writes, and for others' layouts.

It looks at the content, not the file name, and says what it found (``LoadedDesign.kind``):

=================  ============================================================  ===========
kind               what the file holds                                           block size
=================  ============================================================  ===========
``design``         our ``.pt`` design file (version 2, or version 1)             the file's
``recipe``         our JSON recipe (text starting with ``{``)                     the file's
``blockmask``      FlexAttention ``BlockMask.from_kv_blocks`` arguments           the file's
``csr``            ``row_ptr``, ``col_idx``, ``n_k_blocks``, ``block_size``       the file's
``base_blockmask`` MIT Block-Sparse-Attention ``{"base_blockmask": bool [B,H,M,N]}``  128
``bare``           a bare ``[H, M, N]`` or ``[M, N]`` 0/1 tensor (DeepSpeed)      asked for
=================  ============================================================  ===========

Only a bare tensor takes ``bare_block_size``. Whatever the bytes, the result is a design or a
``ValueError`` of at most ``MAX_MESSAGE_CHARS`` characters, in time and memory bounded by
``max_bytes`` (and ``max_pickle_bytes`` for the part torch unpickles in Python).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from designer.design import Design
from designer.formats.block_mask_file import layout_from_tensors
from designer.formats.csr import from_csr
from designer.formats.json_recipe import MAX_JSON_CHARS, design_from_json
from designer.formats.mit_blockmask import from_base_blockmask
from designer.formats.pt_file import MAX_FILE_BYTES, design_from_content
from designer.formats.torch_file import (
    MAX_PICKLE_BYTES,
    ZIP_MAGIC,
    PathOrFile,
    check_archive,
    file_tensor,
    read_bytes,
    read_torch_file,
)
from designer.layout import MAX_BLOCK_SIZE, Layout
from designer.threads import one_thread
from designer.validate import MAX_LAYOUT_CELLS, capped, check_int, check_keys, error_context

#: Tokens per block of a bare tensor when no block size is given (DeepSpeed's default).
BARE_BLOCK_SIZE = 16
#: Largest version-1 file (int64 layout) read from the designer's own data directory.
MAX_LEGACY_FILE_BYTES = 8 * MAX_LAYOUT_CELLS + MAX_JSON_CHARS

#: What each kind of file is called when the app says what it recognised.
KIND_NAMES = {
    "design": "a designer .pt file",
    "recipe": "a JSON recipe",
    "blockmask": "FlexAttention BlockMask tensors",
    "csr": "CSR tensors (row_ptr, col_idx)",
    "base_blockmask": "an MIT Block-Sparse-Attention base_blockmask",
    "bare": "a bare DeepSpeed-style layout tensor",
}
_PREFIXES = {
    "design": "design file",
    "blockmask": "BlockMask tensors",
    "csr": "CSR file",
    "base_blockmask": "MIT file",
}
#: Kinds whose files carry no causal flag: what they held loads as not causal, and says so.
NO_CAUSAL_FLAG = ("csr", "base_blockmask", "bare")
_BLOCKMASK_KEYS = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")


@dataclass(frozen=True)
class LoadedDesign:
    """What a file held: the design and which kind of file it was (a key of ``KIND_NAMES``)."""

    design: Design
    kind: str

    @property
    def bare(self) -> bool:
        """True for a bare layout tensor: its block size came from the reader, not the file."""
        return self.kind == "bare"

    def describe(self) -> str:
        """What was recognised, for a person: kind, shape and block size."""
        layout = self.design.layout
        h, m, n = layout.shape
        found = (
            f"{KIND_NAMES[self.kind]}: {h} heads × {m} × {n} blocks of {layout.block_size} tokens"
        )
        if self.kind in NO_CAUSAL_FLAG:
            found += (
                "; the format carries no causal flag, so it loads as not causal (turn on "
                "“Causal inside blocks” if it was made causal)"
            )
        return found


def read_design_file(
    path_or_file: PathOrFile,
    *,
    bare_block_size: int = BARE_BLOCK_SIZE,
    max_bytes: int = MAX_FILE_BYTES,
    max_pickle_bytes: int = MAX_PICKLE_BYTES,
    rebuild_recipe: bool = True,
) -> LoadedDesign:
    """Read any file the table above lists, from bytes, a path or a binary file object.

    Raises ``ValueError`` (message capped) for any content, ``TypeError`` for wrong arguments and
    ``OSError`` when a path cannot be opened. ``rebuild_recipe=False`` is for design files this
    designer wrote itself (its data folder): their recipe is not built again to check it.

    >>> import io, torch
    >>> buffer = io.BytesIO()
    >>> torch.save(torch.eye(2, dtype=torch.int64), buffer)
    >>> loaded = read_design_file(buffer.getvalue(), bare_block_size=64)
    >>> loaded.kind, loaded.design.layout.shape, loaded.design.layout.block_size
    ('bare', (1, 2, 2), 64)
    """
    bare_block_size = check_int("bare_block_size", bare_block_size, low=1, high=MAX_BLOCK_SIZE)
    max_bytes = check_int("max_bytes", max_bytes, low=1)
    data = read_bytes(path_or_file, max_bytes, "design file")
    try:
        with one_thread():
            return _read(data, bare_block_size, max_bytes, max_pickle_bytes, rebuild_recipe)
    except (ValueError, TypeError) as error:
        raise ValueError(capped(str(error))) from error
    except RecursionError as error:
        raise ValueError("file nests its values too deeply to be a design") from error
    except MemoryError as error:
        raise ValueError("file needs more memory than a design may take") from error
    except Exception as error:  # the edge of the loader: whatever the bytes, a ValueError
        raise ValueError(
            capped(f"design file could not be read: {type(error).__name__}: {error}")
        ) from error


def load_design(
    path_or_file: PathOrFile,
    *,
    block_size: int | None = None,
    max_bytes: int = MAX_FILE_BYTES,
    max_pickle_bytes: int = MAX_PICKLE_BYTES,
    rebuild_recipe: bool = True,
) -> Design:
    """The design in any file ``read_design_file`` reads (a ``.pt`` design file, most often).

    ``block_size`` is for files that carry none (a bare tensor; default 16); a file that carries
    a different one is refused. Raises as ``read_design_file`` does.

    >>> import io
    >>> from designer.formats.pt_file import save_design
    >>> buffer = io.BytesIO()
    >>> save_design(Design(Layout.zeros(1, 2, 2, 64), name="empty"), buffer)
    >>> load_design(buffer.getvalue()).name
    'empty'
    """
    if block_size is not None:
        check_int("block_size", block_size, low=1)
    loaded = read_design_file(
        path_or_file,
        bare_block_size=block_size or BARE_BLOCK_SIZE,
        max_bytes=max_bytes,
        max_pickle_bytes=max_pickle_bytes,
        rebuild_recipe=rebuild_recipe,
    )
    found = loaded.design.layout.block_size
    if block_size is not None and not loaded.bare and block_size != found:
        raise ValueError(
            f"block_size={block_size} was given, but the design file says block_size={found}"
        )
    return loaded.design


def _read(
    data: bytes, bare_block_size: int, max_bytes: int, max_pickle_bytes: int, rebuild_recipe: bool
) -> LoadedDesign:
    text = data.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark some editors write
    if text.lstrip(b" \t\r\n").startswith(b"{"):
        return LoadedDesign(design_from_json(text), "recipe")
    if not data.startswith(ZIP_MAGIC):
        check_archive(data, max_bytes, "design file")  # raises, saying it is not a torch file
    content = read_torch_file(data, max_bytes, "design file", max_pickle_bytes)
    if not isinstance(content, Mapping):
        with error_context("bare layout tensor", as_value_error=True):
            if not hasattr(content, "shape"):
                raise ValueError(
                    f"design file must hold a dict or a layout tensor, got {type(content).__name__}"
                )
            tensor = file_tensor("layout", content)
            return LoadedDesign(Design(Layout.from_array(tensor, bare_block_size)), "bare")
    kind = _kind(content)
    with error_context(_PREFIXES[kind], as_value_error=True):
        if kind == "design":
            return LoadedDesign(design_from_content(content, rebuild_recipe=rebuild_recipe), kind)
        return LoadedDesign(_design(kind, content), kind)


def _kind(content: Mapping[str, Any]) -> str:
    if "format" in content:
        return "design"
    if "kv_num_blocks" in content:
        return "blockmask"
    if "row_ptr" in content:
        return "csr"
    if "base_blockmask" in content:
        return "base_blockmask"
    keys = ", ".join(repr(key)[:40] for key in list(content)[:6])
    raise ValueError(
        f"file holds a dict with keys {keys}, which is none of: a design file ('format'), "
        f"BlockMask tensors ('kv_num_blocks'), CSR ('row_ptr') or MIT ('base_blockmask')"
    )


def _design(kind: str, content: Mapping[str, Any]) -> Design:
    if kind == "blockmask":
        check_keys("file", content, (*_BLOCKMASK_KEYS, "BLOCK_SIZE", "seq_lengths"), ("layout",))
        layout, causal = layout_from_tensors(content)
        return Design(layout, causal=causal)
    if kind == "csr":
        check_keys("file", content, ("row_ptr", "col_idx", "n_k_blocks", "block_size"))
        row_ptr = file_tensor("row_ptr", content["row_ptr"])
        col_idx = file_tensor("col_idx", content["col_idx"])
        return Design(from_csr(row_ptr, col_idx, content["n_k_blocks"], content["block_size"]))
    check_keys("file", content, ("base_blockmask",))
    return Design(from_base_blockmask(file_tensor("base_blockmask", content["base_blockmask"])))
