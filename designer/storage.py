"""Designs on disk: a library of named designs and one autosave per browser session.

Everything lives under one data directory: ``$BSD_DATA_DIR`` when set, else
``$XDG_DATA_HOME/blocksparse-designer``, else ``~/.local/share/blocksparse-designer``::

    library/<name>.pt        designs the user saved by name (shared by every session)
    autosave/<session>.pt    the current design of one browser session, rewritten on each change

Files are ``designer.formats`` design files, written atomically (a temporary file in the same
directory, then ``os.replace``), so a crash mid-write leaves the previous version intact.

How a reload finds its autosave: the server issues each new session a random 128-bit id, keeps
it in the page URL (``?session=...``) and autosaves at once, so the id is known by its file. A
reload or a server restart brings the same URL back, hence the same file; another browser tab
opened on the bare address gets a new id and its own file. An id the server never issued (no
autosave of that name) starts a fresh session under a new id. Opening a copied URL in a second
tab shares that session on purpose. The library, by contrast, is shared by everyone using the
server; give each user their own with ``BSD_DATA_DIR``.

Two tabs on one session id must not overwrite each other's work: each remembers the version of
the autosave it last read or wrote (``autosave_version``: the file's inode, time and size) and
passes it to ``autosave``, which raises ``AutosaveConflict`` instead of writing when the file has
changed since (the app then saves that tab's design under a new id). The check and the write
hold one lock, within one server process.

Files are written with fsync on the file and its directory. ``tidy`` runs once per server start:
it removes temporary files left by a crash mid-write and autosaves untouched for
``$BSD_AUTOSAVE_DAYS`` days (default 30).
"""

from __future__ import annotations

import io
import os
import re
import secrets
import threading
import time
import unicodedata
from dataclasses import replace
from pathlib import Path

from designer.design import Design, now_iso
from designer.fileio import atomic_write
from designer.formats import design_from_json, load_design, save_design
from designer.formats.reader import MAX_LEGACY_FILE_BYTES
from designer.validate import shown

DATA_DIR_ENV = "BSD_DATA_DIR"
AUTOSAVE_DAYS_ENV = "BSD_AUTOSAVE_DAYS"
#: Days an autosave is kept after its last change, unless ``$BSD_AUTOSAVE_DAYS`` says otherwise.
AUTOSAVE_DAYS = 30
#: A temporary file this old is a crash's leftover, not a write in progress.
ORPHAN_SECONDS = 600
SUFFIX = ".pt"
#: The design a new session opens on: 8 heads, 4096 tokens, blocks of 64, BigBird-style.
DEFAULT_DESIGN_FILE = Path(__file__).resolve().parents[1] / "assets" / "default_design.json"

#: ``autosave_version`` of a session with no autosave.
NO_AUTOSAVE = ""

_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
_AUTOSAVING = threading.Lock()
#: Letters and digits of any script, ``_``, then also spaces and ``. + -``: safe as a file name.
_LIBRARY_NAME = re.compile(r"\w[\w .+-]{0,79}")


class AutosaveConflict(ValueError):
    """The autosave changed since this session last read or wrote it (another tab wrote it)."""


def default_data_dir() -> Path:
    """Where designs live unless told otherwise (see the module docstring)."""
    if configured := os.environ.get(DATA_DIR_ENV):
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(xdg) / "blocksparse-designer"


def autosave_days() -> float:
    """Days to keep autosaves: ``$BSD_AUTOSAVE_DAYS`` when set (a positive number), else 30."""
    text = os.environ.get(AUTOSAVE_DAYS_ENV)
    if text is None:
        return AUTOSAVE_DAYS
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not days > 0:
        raise ValueError(f"{AUTOSAVE_DAYS_ENV} must be a number of days > 0, got {text!r:.40}")
    return days


def design_bytes(design: Design) -> bytes:
    """The design as the bytes of a ``.pt`` design file."""
    buffer = io.BytesIO()
    save_design(design, buffer)
    return buffer.getvalue()


def load_default_design() -> Design:
    """The embedded default design, stamped as created now."""
    loaded = design_from_json(DEFAULT_DESIGN_FILE.read_text(encoding="utf-8"))
    stamp = now_iso()
    return replace(loaded, created=stamp, modified=stamp)


def new_session_id() -> str:
    """A fresh, unguessable session id: 128 random bits, URL-safe (22 characters)."""
    return secrets.token_urlsafe(16)


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a well-formed id; it names a file, so nothing else passes."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise ValueError(
            f"session id must be 8 to 64 letters, digits, '-' or '_', got {session_id!r}"
        )
    return session_id


def check_library_name(name: object) -> str:
    """Return ``name`` stripped if it can name a library file, or raise saying what is allowed."""
    if isinstance(name, str):
        name = unicodedata.normalize("NFC", name.strip())
        if _LIBRARY_NAME.fullmatch(name):
            return name
    raise ValueError(
        "design name must be 1 to 80 letters (any script), digits, spaces or '_ . + -', not "
        f"starting with a space, '.' or '-', got {shown(name)}"
    )


class DesignStore:
    """The library and the autosaves under one data directory.

    >>> store = DesignStore(tmp_path)                                # doctest: +SKIP
    >>> store.save("bigbird 8k", design); store.names()              # doctest: +SKIP
    ['bigbird 8k']
    """

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_data_dir()
        self.library_dir = self.root / "library"
        self.autosave_dir = self.root / "autosave"

    # ----------------------------------------------------------------- library
    def names(self) -> list[str]:
        """Names of the saved designs, sorted case-insensitively."""
        if not self.library_dir.is_dir():
            return []
        names = (p.name[: -len(SUFFIX)] for p in self.library_dir.glob(f"*{SUFFIX}"))
        return sorted((n for n in names if _LIBRARY_NAME.fullmatch(n)), key=str.casefold)

    def save(self, name: str, design: Design) -> Path:
        """Save ``design`` under ``name`` (replacing one of that name) and return its path."""
        path = self._library_path(name)
        atomic_write(path, design_bytes(design))
        return path

    def load(self, name: str) -> Design:
        """The design saved under ``name``; ``ValueError`` if there is none or it is unreadable."""
        path = self._library_path(name)
        if not path.is_file():
            raise ValueError(f"no design named {name!r} in the library at {self.library_dir}")
        return _read(path)

    def delete(self, name: str) -> None:
        """Remove the design saved under ``name`` (no error if it is already gone)."""
        self._library_path(name).unlink(missing_ok=True)

    # ----------------------------------------------------------------- autosave
    def autosave(self, session_id: str, design: Design, *, expected: str | None = None) -> str:
        """Write the current design of one browser session; return the new version.

        With ``expected`` (a version from ``autosave_version``, ``restore_versioned`` or the last
        ``autosave``; ``NO_AUTOSAVE`` for none yet), raise ``AutosaveConflict`` and write nothing
        if the autosave is no longer that version.
        """
        path = self._autosave_path(session_id)
        data = design_bytes(design)
        with _AUTOSAVING:
            found = _version(path)
            if expected is not None and found != expected:
                raise AutosaveConflict(
                    "the autosave of this session changed since this tab last saved it"
                )
            atomic_write(path, data)
            return _version(path)

    def autosave_version(self, session_id: str) -> str:
        """The version of a session's autosave (``NO_AUTOSAVE`` if it has none)."""
        return _version(self._autosave_path(session_id))

    def restore(self, session_id: str) -> Design | None:
        """The autosaved design of a session, or None if it never saved one."""
        restored = self.restore_versioned(session_id)
        return None if restored is None else restored[0]

    def restore_versioned(self, session_id: str) -> tuple[Design, str] | None:
        """``(design, version)`` of a session's autosave, or None if it never saved one.

        The version is the one before reading: if a write came in between, the next
        ``autosave(expected=version)`` sees a conflict rather than overwriting what it missed.
        """
        path = self._autosave_path(session_id)
        version = _version(path)
        if version == NO_AUTOSAVE or not path.is_file():
            return None
        return _read(path), version

    # ----------------------------------------------------------------- housekeeping
    def tidy(self, max_age_days: float | None = None, *, now: float | None = None) -> list[Path]:
        """Remove crash leftovers and old autosaves; return what was removed.

        Temporary files older than ``ORPHAN_SECONDS`` and autosaves not written for
        ``max_age_days`` (default ``autosave_days()``) go; the library is never pruned.
        """
        max_age = (autosave_days() if max_age_days is None else max_age_days) * 86400
        now = time.time() if now is None else now
        removed = []
        for directory in (self.library_dir, self.autosave_dir):
            if not directory.is_dir():
                continue
            for path in directory.iterdir():
                try:
                    age = now - path.lstat().st_mtime
                except OSError:
                    continue
                orphan = path.name.startswith(".") and path.name.endswith(".tmp")
                stale = directory == self.autosave_dir and path.suffix == SUFFIX
                if (orphan and age > ORPHAN_SECONDS) or (stale and age > max_age):
                    path.unlink(missing_ok=True)
                    removed.append(path)
        return removed

    def _library_path(self, name: str) -> Path:
        return self.library_dir / f"{check_library_name(name)}{SUFFIX}"

    def _autosave_path(self, session_id: str) -> Path:
        return self.autosave_dir / f"{check_session_id(session_id)}{SUFFIX}"


def _version(path: Path) -> str:
    """A file's version: its inode, modification time and size (an atomic write changes the
    inode), or ``NO_AUTOSAVE`` when there is none."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return NO_AUTOSAVE
    return f"{stat.st_ino}-{stat.st_mtime_ns}-{stat.st_size}"


def _read(path: Path) -> Design:
    try:
        # Our own files: version 1 too (int64 layout, recipe as lists in the pickle).
        return load_design(
            path, max_bytes=MAX_LEGACY_FILE_BYTES, max_pickle_bytes=MAX_LEGACY_FILE_BYTES
        )
    except ValueError as error:
        raise ValueError(f"cannot read {path}: {error}") from error
