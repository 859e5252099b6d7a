"""Benchmark runs kept with their design, and the repository's committed results.

Runs live in the data directory, beside the design library (``DesignStore.root``)::

    runs/<design digest>/<UTC time>-<random>.json

one benchmark document per file (``gpu.bench`` JSON plus the panel's keys), keyed by the design's
digest (every block, block size, start width: ``design_digest``): a design's runs come back
whenever that exact layout is open, under any name and in any session. Files are written
atomically. The committed results are ``benchmarks/results/*.json`` of the repository: a
checkout finds them beside its packages; an installed package carries none (``benchmarks/`` is
not package data), so ``RESULTS_DIR`` is None there and there are no committed results to show.
Unreadable files are reported, never fatal.
"""

from __future__ import annotations

import functools
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from designer.fileio import atomic_write
from gpu.bench.results import (
    claims_benchmark_format,
    document_bytes,
    document_label,
    read_document,
)

_ROOT = Path(__file__).resolve().parents[2]
#: The checkout's committed results (a checkout: the folder holding ``pyproject.toml``), or None
#: when the package is installed.
RESULTS_DIR = _ROOT / "benchmarks" / "results" if (_ROOT / "pyproject.toml").is_file() else None
#: Larger files are not read (a sweep of every standard case is well under 1 MiB).
MAX_DOCUMENT_BYTES = 32 << 20
_DIGEST = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class StoredDocument:
    """A benchmark document and where it came from."""

    path: Path
    doc: dict[str, Any]

    @property
    def label(self) -> str:
        return document_label(self.doc, self.path.name)


def read_documents(
    paths: list[Path], *, others_too: bool = True
) -> tuple[list[StoredDocument], list[str]]:
    """Every readable document of ``paths``, newest first, and a line per unreadable one.

    Without ``others_too``, a JSON file that does not say it is a benchmark document (another
    script's results: no ``format``, or another one) is left out without a word; one that says
    it is but is broken is still reported.
    """
    stored, problems = [], []
    for path in paths:
        try:
            if path.stat().st_size > MAX_DOCUMENT_BYTES:
                raise ValueError(f"{path.name} is larger than {MAX_DOCUMENT_BYTES >> 20} MiB")
            data = path.read_bytes()
            if not others_too and not claims_benchmark_format(data):
                continue
            stored.append(StoredDocument(path, read_document(data, path.name)))
        except (OSError, ValueError) as error:
            problems.append(str(error))
    stored.sort(key=lambda s: (str(s.doc.get("date", "")), s.path.name), reverse=True)
    return stored, problems


def committed_results(results_dir: Path | None = None) -> tuple[list[StoredDocument], list[str]]:
    """The committed benchmark documents of ``benchmarks/results/*.json`` (or
    ``results_dir``'s), newest first, and a line per broken one; none in an installed package.

    The folder also holds other scripts' results (the cost tools, the API overhead, training
    runs, the panel check's summaries); they are not benchmark documents and are left out.
    """
    folder = results_dir or RESULTS_DIR
    if folder is None:
        return [], []
    paths = sorted(Path(folder).glob("*.json"))
    stamps = []
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            continue
        stamps.append((str(path), info.st_mtime_ns, info.st_size))
    stored, problems = _read_committed(tuple(stamps))
    return list(stored), list(problems)


@functools.lru_cache(maxsize=4)
def _read_committed(
    stamps: tuple[tuple[str, int, int], ...],
) -> tuple[tuple[StoredDocument, ...], tuple[str, ...]]:
    """The committed documents, read once per set of files (their names, times and sizes):
    they weigh megabytes of JSON and change only with the checkout, while the GPU tab opens on
    every visit."""
    stored, problems = read_documents([Path(path) for path, _, _ in stamps], others_too=False)
    return tuple(stored), tuple(problems)


class RunStore:
    """The runs of every design under one data directory.

    >>> store = RunStore(tmp_path)                              # doctest: +SKIP
    >>> store.save(design_digest(design), doc); store.runs(design_digest(design))  # doctest: +SKIP
    """

    def __init__(self, root: Path | str) -> None:
        self.runs_dir = Path(root) / "runs"

    def save(self, digest: str, doc: dict[str, Any]) -> Path:
        """Store ``doc`` with the design of ``digest``; returns the new file."""
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = self._dir(digest) / f"{stamp}-{secrets.token_hex(4)}.json"
        atomic_write(path, document_bytes(doc))
        return path

    def runs(self, digest: str) -> tuple[list[StoredDocument], list[str]]:
        """The design's stored runs, newest first, and a line per unreadable file."""
        folder = self._dir(digest)
        return read_documents(sorted(folder.glob("*.json")) if folder.is_dir() else [])

    def _dir(self, digest: str) -> Path:
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise ValueError(f"digest must be 32 lowercase hex digits, got {digest!r}")
        return self.runs_dir / digest
