"""Designs on disk: a library of named designs and one autosave per browser session.

Everything lives under one data directory: ``$BSD_DATA_DIR`` when set, else
``$XDG_DATA_HOME/blocksparse-designer``, else ``~/.local/share/blocksparse-designer``::

    library/<name>.pt        designs the user saved by name (shared by every session)
    autosave/<session>.pt    the current design of one browser session, rewritten on each change
    autosave/<session>.model.pt   the model design (a design per layer) that session is making
    snapshots/<id>.pt        frozen copies shared by a link (``?snapshot=<id>``), never changed

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
``$BSD_AUTOSAVE_DAYS`` days (default 30). Nothing in the folder stops it (a directory where a
file was expected, a file it may not remove, a read-only folder, a bad setting): it says what it
could not do and goes on, and keeps every autosave when the setting is not a number of days.

Library names are matched as people read them: NFKC-normalised and case-folded, so "ﬁle" and
"file", "Ａ" and "A", "File" and "file" name one design, stored under the spelling last saved.
Messages never show a server path (``reason`` words an ``OSError`` without its file name).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import threading
import time
import unicodedata
from dataclasses import dataclass, field, replace
from pathlib import Path

from designer.design import MAX_NAME_CHARS, Design, now_iso
from designer.fileio import atomic_write
from designer.formats import design_from_json, load_design
from designer.formats.model_file import model_file_bytes, read_model_file
from designer.formats.pt_file import design_file_bytes
from designer.formats.reader import MAX_LEGACY_FILE_BYTES
from designer.model_design import ModelDesign
from designer.validate import shown

DATA_DIR_ENV = "BSD_DATA_DIR"
AUTOSAVE_DAYS_ENV = "BSD_AUTOSAVE_DAYS"
#: Days an autosave is kept after its last change, unless ``$BSD_AUTOSAVE_DAYS`` says otherwise.
AUTOSAVE_DAYS = 30
#: A temporary file this old is a crash's leftover, not a write in progress.
ORPHAN_SECONDS = 600
SUFFIX = ".pt"
MODEL_SUFFIX = ".model.pt"
#: The design a new session opens on: 8 heads, 4096 tokens, blocks of 64, BigBird-style. It is
#: package data beside this module, so an installed package opens on it as a checkout does.
DEFAULT_DESIGN_FILE = Path(__file__).resolve().parent / "default_design.json"

#: Snapshots kept, and their bytes together: past either, the oldest make room for a new one.
MAX_SNAPSHOTS = 1000
MAX_SNAPSHOT_BYTES = 512 << 20

#: ``autosave_version`` of a session with no autosave.
NO_AUTOSAVE = ""

_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")
_AUTOSAVING = threading.Lock()
#: Letters and digits of any script, ``_``, then also spaces and ``. + -``: safe as a file name.
_LIBRARY_NAME = re.compile(rf"\w[\w .+-]{{0,{MAX_NAME_CHARS - 1}}}")
#: Most UTF-8 bytes of a library name: its temporary file ``.<name>.pt.<8 random>.tmp`` must fit
#: the 255-byte file names of common file systems (80 CJK characters are 240 bytes).
MAX_NAME_BYTES = 200


class AutosaveConflict(ValueError):
    """The autosave changed since this session last read or wrote it (another tab wrote it)."""


def default_data_dir() -> Path:
    """Where designs live unless told otherwise (see the module docstring)."""
    if configured := os.environ.get(DATA_DIR_ENV):
        return Path(configured).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(xdg) / "blocksparse-designer"


def autosave_days() -> float:
    """Days to keep autosaves: ``$BSD_AUTOSAVE_DAYS`` when set (a positive, finite number), else
    30; ``ValueError`` for anything else."""
    text = os.environ.get(AUTOSAVE_DAYS_ENV)
    if text is None:
        return AUTOSAVE_DAYS
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    if not 0 < days < float("inf"):
        raise ValueError(f"{AUTOSAVE_DAYS_ENV} must be a number of days > 0, got {text!r:.40}")
    return days


def reason(error: OSError) -> str:
    """What went wrong in an ``OSError``, in words, without the path it names."""
    return error.strerror or type(error).__name__


def design_bytes(design: Design) -> bytes:
    """The design as the bytes of a ``.pt`` design file (``ValueError`` if a reader would refuse
    them: nothing is written then)."""
    return design_file_bytes(design)


def load_default_design() -> Design:
    """The embedded default design, stamped as created now."""
    loaded = design_from_json(DEFAULT_DESIGN_FILE.read_text(encoding="utf-8"))
    stamp = now_iso()
    return replace(loaded, created=stamp, modified=stamp)


def new_session_id() -> str:
    """A fresh, unguessable session id: 128 random bits, URL-safe (22 characters)."""
    return secrets.token_urlsafe(16)


def check_session_id(session_id: object, what: str = "session id") -> str:
    """Return ``session_id`` if it is a well-formed id (of a session or a snapshot: ``what``);
    it names a file, so nothing else passes."""
    if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
        raise ValueError(
            f"{what} must be 8 to 64 letters, digits, '-' or '_', got {shown(session_id)}"
        )
    return session_id


def check_library_name(name: object) -> str:
    """Return ``name`` stripped and NFKC-normalised if it can name a library file, or raise
    saying what is allowed.

    >>> check_library_name(" ﬁle Ａ ")
    'file A'
    """
    if isinstance(name, str):
        name = unicodedata.normalize("NFKC", name.strip())
        if _LIBRARY_NAME.fullmatch(name):
            size = len(name.encode("utf-8"))
            if size > MAX_NAME_BYTES:
                raise ValueError(
                    f"design name must be at most {MAX_NAME_BYTES} bytes in UTF-8 to name a "
                    f"file, got {size} ({len(name)} characters)"
                )
            return name
    raise ValueError(
        f"design name must be 1 to {MAX_NAME_CHARS} letters (any script), digits, spaces or "
        "'_ . + -', not "
        f"starting with a space, '.' or '-', got {shown(name)}"
    )


def name_key(name: str) -> str:
    """What two library names must share to name the same design (NFKC, case-folded)."""
    return unicodedata.normalize("NFKC", name).casefold()


@dataclass(frozen=True)
class Tidied:
    """What ``DesignStore.tidy`` removed, and what it could not do, in words."""

    removed: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


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
        self.snapshot_dir = self.root / "snapshots"

    # ----------------------------------------------------------------- library
    def names(self) -> list[str]:
        """Names of the saved designs (regular files only), sorted case-insensitively."""
        if not self.library_dir.is_dir():
            return []
        names = (p.name[: -len(SUFFIX)] for p in self.library_dir.glob(f"*{SUFFIX}") if _is_file(p))
        return sorted((n for n in names if _LIBRARY_NAME.fullmatch(n)), key=str.casefold)

    def existing(self, name: str) -> str | None:
        """The saved name that ``name`` would replace (the same, or a look-alike), if any."""
        key = name_key(check_library_name(name))
        return next((saved for saved in self.names() if name_key(saved) == key), None)

    def save(self, name: str, design: Design) -> Path:
        """Save ``design`` under ``name``, replacing the design of that name or of a look-alike
        (which then takes this spelling), and return its path."""
        path = self._library_path(name)
        before = self.existing(name)
        atomic_write(path, design_bytes(design))
        if before is not None and before != check_library_name(name):
            self._library_path(before).unlink(missing_ok=True)
        return path

    def load(self, name: str) -> Design:
        """The design saved under ``name``; ``ValueError`` if there is none or it is unreadable."""
        saved = self.existing(name)
        if saved is None:
            raise ValueError(f"no design named {name!r} in the library")
        return _read(self._library_path(saved), f"library design {name!r}")

    def rename(self, name: str, new_name: str) -> str:
        """Give the design saved under ``name`` the name ``new_name`` (the design's own name
        too); returns the name as stored. ``ValueError`` if there is no such design, the new
        name is not allowed, or another design has it (or a look-alike of it)."""
        saved = self.existing(name)
        if saved is None:
            raise ValueError(f"no design named {name!r} in the library")
        target = check_library_name(new_name)
        taken = self.existing(target)
        if taken is not None and name_key(taken) != name_key(saved):
            raise ValueError(
                f"the library has a design named {taken!r} already; delete it first or pick "
                "another name"
            )
        design = _read(self._library_path(saved), f"library design {name!r}")
        atomic_write(self._library_path(target), design_bytes(replace(design, name=target)))
        if target != saved:
            self._library_path(saved).unlink(missing_ok=True)
        return target

    def delete(self, name: str) -> None:
        """Remove the design saved under ``name`` or a look-alike (no error if it is already
        gone); ``OSError`` if the library cannot be changed."""
        self._library_path(self.existing(name) or name).unlink(missing_ok=True)

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

    def autosave_age(self, session_id: str, *, now: float | None = None) -> float:
        """Seconds since the session's autosave was written (``inf`` when there is none)."""
        try:
            written = self._autosave_path(session_id).stat().st_mtime
        except OSError:
            return float("inf")
        return (time.time() if now is None else now) - written

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
        if version == NO_AUTOSAVE or not _is_file(path):
            return None
        return _read(path, "the autosave"), version

    def autosave_model(self, session_id: str, model: ModelDesign | None) -> None:
        """Keep the model design a session is making (None: it dropped it)."""
        path = self.autosave_dir / f"{check_session_id(session_id)}{MODEL_SUFFIX}"
        if model is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write(path, model_file_bytes(model))

    def restore_model(self, session_id: str) -> ModelDesign | None:
        """The model design a session was making, or None; ``ValueError`` if unreadable."""
        path = self.autosave_dir / f"{check_session_id(session_id)}{MODEL_SUFFIX}"
        if not _is_file(path):
            return None
        try:
            return read_model_file(path, rebuild_recipe=False)
        except OSError as error:
            raise ValueError(f"cannot read the model design: {reason(error)}") from error
        except ValueError as error:
            raise ValueError(f"cannot read the model design: {error}") from error

    # ----------------------------------------------------------------- snapshots
    def snapshot(self, design: Design) -> str:
        """Freeze ``design`` under a new id (128 random bits, as session ids) and return it; the
        oldest snapshots go first when the folder passes ``MAX_SNAPSHOTS`` or
        ``MAX_SNAPSHOT_BYTES``."""
        data = design_bytes(design)
        snapshot_id = new_session_id()
        with _AUTOSAVING:
            self._make_room(len(data))
            atomic_write(self._snapshot_path(snapshot_id), data)
        return snapshot_id

    def load_snapshot(self, snapshot_id: object) -> Design:
        """The design frozen under ``snapshot_id``; ``ValueError`` for a malformed or unknown id
        (a link mistyped, or a snapshot that made room for newer ones) or an unreadable file."""
        path = self._snapshot_path(check_session_id(snapshot_id, "snapshot id"))
        if not _is_file(path):
            raise ValueError(
                "there is no snapshot of that name on this server (the link may be mistyped, "
                "or the snapshot made room for newer ones)"
            )
        return _read(path, "the snapshot")

    def _make_room(self, incoming: int) -> None:
        try:
            entries = [(p.stat().st_mtime, p.stat().st_size, p)
                       for p in self.snapshot_dir.glob(f"*{SUFFIX}") if _is_file(p)]  # fmt: skip
        except OSError:
            return
        entries.sort()
        total = sum(size for _, size, _ in entries) + incoming
        while entries and (len(entries) >= MAX_SNAPSHOTS or total > MAX_SNAPSHOT_BYTES):
            _, size, path = entries.pop(0)
            path.unlink(missing_ok=True)
            total -= size

    def _snapshot_path(self, snapshot_id: str) -> Path:
        return self.snapshot_dir / f"{check_session_id(snapshot_id, 'snapshot id')}{SUFFIX}"

    # ----------------------------------------------------------------- housekeeping
    def tidy(self, max_age_days: float | None = None, *, now: float | None = None) -> Tidied:
        """Remove crash leftovers and old autosaves; return what was removed and what not.

        Temporary files older than ``ORPHAN_SECONDS`` and autosaves not written for
        ``max_age_days`` (default ``autosave_days()``) go; the library is never pruned. Only
        regular files are touched; an entry that cannot be read or removed is left as it is.
        """
        problems = []
        max_age = max_age_days
        if max_age is None:
            try:
                max_age = autosave_days()
            except ValueError as error:
                problems.append(f"{error}: old autosaves are kept")
        now = time.time() if now is None else now
        removed = []
        for directory in (self.library_dir, self.autosave_dir):
            try:
                entries = list(directory.iterdir()) if directory.is_dir() else []
            except OSError as error:
                problems.append(f"the {directory.name} folder cannot be read ({reason(error)})")
                continue
            for path in entries:
                try:
                    info = path.lstat()
                except OSError:
                    continue
                age = now - info.st_mtime
                orphan = path.name.startswith(".") and path.name.endswith(".tmp")
                stale = directory == self.autosave_dir and path.suffix == SUFFIX
                if orphan:
                    old = age > ORPHAN_SECONDS
                else:
                    old = stale and max_age is not None and age > max_age * 86400
                if not old or not stat.S_ISREG(info.st_mode):
                    continue
                try:
                    path.unlink(missing_ok=True)
                except OSError as error:
                    problems.append(f"an old file could not be removed ({reason(error)})")
                    continue
                removed.append(path)
        return Tidied(removed, list(dict.fromkeys(problems)))

    def _library_path(self, name: str) -> Path:
        return self.library_dir / f"{check_library_name(name)}{SUFFIX}"

    def _autosave_path(self, session_id: str) -> Path:
        return self.autosave_dir / f"{check_session_id(session_id)}{SUFFIX}"


def _version(path: Path) -> str:
    """A file's version: its inode, modification time and size (an atomic write changes the
    inode), or ``NO_AUTOSAVE`` when there is none."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return NO_AUTOSAVE
    return f"{info.st_ino}-{info.st_mtime_ns}-{info.st_size}"


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a regular file (not a directory, device or broken entry)."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def _read(path: Path, what: str) -> Design:
    try:
        # Our own files: version 1 too (int64 layout, recipe as lists in the pickle), and
        # checked when written (the recipe rebuilds the layout), so not rebuilt on every read.
        return load_design(
            path,
            max_bytes=MAX_LEGACY_FILE_BYTES,
            max_pickle_bytes=MAX_LEGACY_FILE_BYTES,
            rebuild_recipe=False,
        )
    except OSError as error:
        raise ValueError(f"cannot read {what}: {reason(error)}") from error
    except ValueError as error:
        raise ValueError(f"cannot read {what}: {error}") from error
