"""Reading a ``torch.save`` file that nobody vouches for: bounded bytes, a real zip, plain data.

Every ``.pt`` reader of the designer goes through ``read_torch_file``. In order:

1. Only bytes, binary file objects and *regular* files are read (a FIFO or ``/dev/zero`` is
   refused before a byte is read), never more than ``max_bytes + 1`` bytes.
2. The bytes must be a zip archive from offset 0 (``PK\\x03\\x04``), which is what ``torch.save``
   writes. A legacy (pre-1.6) stream is refused, and so is a legacy stream with a zip appended,
   so torch's legacy reader never sees the bytes. Entries must be stored or deflated and unpack
   to at most ``max_bytes``, or ``MAX_UNPACKED_BYTES`` if more, all together (no zip bombs): a
   large export is a deflated archive (``deflated``) that still fits an upload.
3. ``torch.load(weights_only=True)`` unpickles tensors and plain values only: a file asking to
   call a function is refused without running it.

``file_tensor`` then checks a tensor from such a file before anything reads its values: a plain
strided CPU tensor whose storage really holds its bytes (an expanded, stride-0 tensor declares
cells the file never paid for). Every failure is a ``ValueError`` with a short message.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import zipfile
from typing import IO, Any

import torch

from designer.validate import capped

PathOrFile = str | os.PathLike | bytes | bytearray | IO[bytes]

#: The first bytes of a zip archive's first local file header.
ZIP_MAGIC = b"PK\x03\x04"
#: Largest pickle read. torch's ``weights_only`` unpickler runs in Python, about 4 s for a 24 MB
#: pickle of small ints, so the pickle is bounded on its own; a design's pickle holds settings
#: only (its layout and recipe are tensors, read as raw bytes), a few KiB.
MAX_PICKLE_BYTES = 1 << 20
#: Most bytes an archive may unpack to: a bool layout of the largest size (64 MiB) and room for
#: its settings or index lists. Reading it stays within a few hundred MB.
MAX_UNPACKED_BYTES = (1 << 26) + (32 << 20)
#: Bytes ``deflated`` copies at a time.
COPY_CHUNK = 4 << 20


def read_torch_file(
    path_or_file: PathOrFile,
    max_bytes: int,
    what: str = "design file",
    max_pickle_bytes: int = MAX_PICKLE_BYTES,
) -> Any:
    """What ``torch.save`` wrote to ``path_or_file``, read safely (see the module docstring).

    Raises ``ValueError`` naming ``what`` for anything that is not a small, plain torch file,
    ``TypeError`` for a wrong argument and ``OSError`` if a path cannot be opened.
    """
    data = read_bytes(path_or_file, max_bytes, what)
    check_archive(data, max_bytes, what, max_pickle_bytes)
    return _unpickle(data, what)


def read_bytes(path_or_file: PathOrFile, max_bytes: int, what: str) -> bytes:
    """The file's bytes, never reading more than ``max_bytes + 1`` and only from regular files."""
    if isinstance(path_or_file, (bytes, bytearray)):
        data = bytes(path_or_file)
    elif isinstance(path_or_file, (str, os.PathLike)):
        data = _read_regular_file(path_or_file, max_bytes, what)
    elif isinstance(path_or_file, io.TextIOBase):
        raise TypeError("file object must be opened in binary mode ('rb'), got a text file")
    elif hasattr(path_or_file, "read"):
        data = path_or_file.read(max_bytes + 1)
        if not isinstance(data, bytes):
            raise TypeError(f"file object must give bytes, read() gave {type(data).__name__}")
    else:
        raise TypeError(
            f"path_or_file must be bytes, a path or a binary file object, "
            f"got {type(path_or_file).__name__}"
        )
    if len(data) > max_bytes:
        raise ValueError(f"{what} is more than the limit of {max_bytes:,} bytes")
    return data


def _read_regular_file(path: str | os.PathLike, max_bytes: int, what: str) -> bytes:
    # O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
    handle = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{what} must be a regular file; {os.fspath(path)!r:.200} is not")
        if info.st_size > max_bytes:
            raise ValueError(
                f"{what} is {info.st_size:,} bytes, more than the limit of {max_bytes:,}"
            )
    except BaseException:
        os.close(handle)
        raise
    with os.fdopen(handle, "rb") as file:
        return file.read(max_bytes + 1)


def check_archive(
    data: bytes, max_bytes: int, what: str, max_pickle_bytes: int = MAX_PICKLE_BYTES
) -> None:
    """Refuse anything but one complete zip archive from offset 0 that unpacks to ``max_bytes``
    and whose pickle is at most ``max_pickle_bytes``."""
    if not data.startswith(ZIP_MAGIC):
        raise ValueError(
            f"{what} is not a torch file: torch.save writes a zip archive, and these bytes do not "
            f"start with one (legacy torch streams are not read)"
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError, NotImplementedError, EOFError) as error:
        raise ValueError(
            f"{what} is not a complete zip archive, or it is truncated ({capped(str(error), 120)})"
        ) from error
    if entries and entries[0].header_offset != 0:
        raise ValueError(f"{what} has bytes before its zip archive; only a plain archive is read")
    methods = {entry.compress_type for entry in entries}
    if not methods <= {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}:
        raise ValueError(f"{what} uses a zip compression torch does not write")
    unpacked = sum(entry.file_size for entry in entries)
    most = max(max_bytes, MAX_UNPACKED_BYTES)
    if unpacked > most:
        raise ValueError(f"{what} unpacks to {unpacked:,} bytes, more than the limit of {most:,}")
    for entry in entries:
        if entry.filename.endswith("data.pkl") and entry.file_size > max_pickle_bytes:
            raise ValueError(
                f"{what} has a {entry.file_size:,}-byte pickle, more than the limit of "
                f"{max_pickle_bytes:,}: a design keeps its data in tensors, not in Python lists"
            )


def deflated(archive: bytes | IO[bytes]) -> bytes:
    """A ``torch.save`` archive (its bytes, or a binary file holding them) with its entries
    deflated: ``torch.load`` reads it as it is, and a sparse layout's tensors shrink many times
    (level 1: fast, most of the gain). Entries are streamed, so a large archive in a file costs
    little memory beyond the result."""
    source_file = io.BytesIO(archive) if isinstance(archive, bytes) else archive
    out = io.BytesIO()
    with (
        zipfile.ZipFile(source_file) as source,
        zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as target,
    ):
        for entry in source.infolist():
            with source.open(entry) as reader, target.open(entry.filename, "w") as writer:
                shutil.copyfileobj(reader, writer, COPY_CHUNK)
    return out.getvalue()


def _unpickle(data: bytes, what: str) -> Any:
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds; each becomes a ValueError saying why
        text = str(error)
        if "Weights only load failed" in text:
            asked = re.search(r"GLOBAL ([\w.]+)", text)
            detail = re.search(r"WeightsUnpickler error:\s*(.+)", text)
            if asked:
                why = f"it asks for {asked.group(1)}"
            else:
                why = f"its pickle is not plain data ({detail.group(1) if detail else text})"
            raise ValueError(
                capped(
                    f"{what} refused: {why}; only tensors and plain values may be loaded, "
                    f"since anything else could run code"
                )
            ) from error
        first_line = text.splitlines()[0] if text else "no details"
        raise ValueError(
            capped(f"{what} could not be read by torch.load: {type(error).__name__}: {first_line}")
        ) from error


def file_tensor(name: str, value: Any) -> torch.Tensor:
    """``value`` if it is a plain CPU tensor whose storage holds every byte it shows.

    Sparse, quantized, meta or other-device tensors are refused, and so are views that show more
    bytes than their storage has (``expand`` gives stride 0): their size is not what was read.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(value).__name__}")
    if value.layout != torch.strided:
        raise ValueError(f"{name} must be a dense (strided) tensor, got layout {value.layout}")
    if value.is_quantized:
        raise ValueError(f"{name} must not be quantized, got dtype {value.dtype}")
    if value.device.type != "cpu":
        raise ValueError(f"{name} must be a CPU tensor, got device {value.device}")
    shown_bytes = value.numel() * value.element_size()
    stored = value.untyped_storage().nbytes()
    if stored < shown_bytes:
        raise ValueError(
            f"{name} shows {shown_bytes:,} bytes {list(value.shape)} over a storage of "
            f"{stored:,} bytes (an expanded view); save a contiguous tensor"
        )
    return value
