import errno
import os
from pathlib import Path

import pytest

from designer.design import Design
from designer.storage import (
    DATA_DIR_ENV,
    DesignStore,
    atomic_write,
    check_library_name,
    check_session_id,
    default_data_dir,
    load_default_design,
    new_session_id,
)
from tests.factories import random_layout


def design(rng, name="d"):
    return Design(random_layout(rng), name=name)


def test_data_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "x"))
    assert default_data_dir() == tmp_path / "x"
    monkeypatch.delenv(DATA_DIR_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / "blocksparse-designer"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert str(default_data_dir()).endswith(".local/share/blocksparse-designer")


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "f.bin"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["f.bin"]


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    atomic_write(path, b"old")

    def broken_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_library_round_trip_sorted_names_and_delete(tmp_path, rng):
    store = DesignStore(tmp_path)
    assert store.names() == []
    first, second = design(rng, "b design"), design(rng, "A design")
    store.save("b design", first)
    store.save("A design", second)
    assert store.names() == ["A design", "b design"]
    loaded = store.load("b design")
    assert loaded.layout == first.layout and loaded.name == "b design"
    store.delete("b design")
    store.delete("b design")  # already gone: fine
    assert store.names() == ["A design"]


def test_library_load_of_a_missing_or_broken_design(tmp_path, rng):
    store = DesignStore(tmp_path)
    with pytest.raises(ValueError, match="no design named 'nope'"):
        store.load("nope")
    store.library_dir.mkdir(parents=True)
    (store.library_dir / "broken.pt").write_bytes(b"not a zip")
    with pytest.raises(
        ValueError, match=r"^cannot read library design 'broken': design file"
    ) as error:
        store.load("broken")
    assert str(tmp_path) not in str(error.value)  # no server paths in messages


def test_an_unreadable_autosave_says_so_without_its_path(tmp_path):
    store = DesignStore(tmp_path)
    store.autosave_dir.mkdir(parents=True)
    (store.autosave_dir / "session-one.pt").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match=r"^cannot read the autosave: design file") as error:
        store.restore("session-one")
    assert str(tmp_path) not in str(error.value)


def test_a_directory_where_a_design_was_expected_is_no_design_and_tidy_passes_it(tmp_path):
    store = DesignStore(tmp_path)
    for folder in (store.autosave_dir / "session-dir.pt", store.library_dir / "folder.pt"):
        folder.mkdir(parents=True)
        os.utime(folder, (0, 0))  # as old as can be: tidy would prune an autosave this old
    tidied = store.tidy()
    assert tidied.removed == [] and tidied.problems == []
    assert store.restore("session-dir") is None and store.names() == []
    assert (store.autosave_dir / "session-dir.pt").is_dir()


def test_tidy_goes_on_past_files_it_cannot_remove(tmp_path, rng, monkeypatch):
    store = DesignStore(tmp_path)
    store.save("kept", design(rng))
    stale = store.library_dir / ".kept.pt.abcdefgh.tmp"
    stale.write_bytes(b"half a file")
    os.utime(stale, (0, 0))

    def read_only(path, missing_ok=False):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(Path, "unlink", read_only)
    tidied = store.tidy()
    assert tidied.removed == [] and stale.exists()
    assert tidied.problems == ["an old file could not be removed (Read-only file system)"]


@pytest.mark.parametrize("days", ["0", "30d", "nan", "inf", "-1", ""])
def test_a_bad_autosave_days_setting_keeps_every_autosave_and_says_why(
    tmp_path, rng, monkeypatch, days
):
    from designer.storage import AUTOSAVE_DAYS_ENV

    store = DesignStore(tmp_path)
    store.autosave("ancient-session", design(rng))
    os.utime(store.autosave_dir / "ancient-session.pt", (0, 0))
    monkeypatch.setenv(AUTOSAVE_DAYS_ENV, days)
    tidied = store.tidy()
    assert tidied.removed == [] and store.restore("ancient-session") is not None
    (problem,) = tidied.problems
    assert problem.startswith("BSD_AUTOSAVE_DAYS must be a number of days > 0, got ")
    assert problem.endswith(": old autosaves are kept")


def test_names_longer_than_a_file_name_allows_are_refused(tmp_path, rng):
    store = DesignStore(tmp_path)
    with pytest.raises(ValueError, match=r"at most 200 bytes in UTF-8 to name a file, got 240"):
        store.save("設計" * 40, design(rng))
    store.save("設計" * 33, design(rng))  # 198 bytes
    assert store.names() == ["設計" * 33]


def test_look_alike_names_are_one_design(tmp_path, rng):
    store = DesignStore(tmp_path)
    first, second = design(rng), design(rng)
    store.save("ﬁle", first)
    assert store.names() == ["file"] and store.existing("FILE") == "file"
    store.save("File", second)  # replaces "file", under the spelling saved last
    assert store.names() == ["File"] and store.load("file") == second
    store.save("Ａ", first)
    assert store.existing("A") == "A" and store.load("A") == first


@pytest.mark.parametrize(
    "name", ["", "   ", "../escape", ".hidden", "-dash", "a/b", "x" * 81, 3, "a\x00b", "a:b"]
)
def test_library_names_are_checked(name):
    with pytest.raises(ValueError, match="design name must be 1 to 80 letters"):
        check_library_name(name)


def test_library_name_is_stripped():
    assert check_library_name("  BigBird 8k v2.1  ") == "BigBird 8k v2.1"


def test_library_names_keep_letters_of_any_script(tmp_path, rng):
    assert check_library_name("ünïcode") == "ünïcode"
    assert check_library_name("u\u0308nicode") == "ünicode"  # one spelling of each letter (NFC)
    store = DesignStore(tmp_path)
    store.save("日本語 design", design(rng))
    assert store.names() == ["日本語 design"]


def test_autosave_is_per_session(tmp_path, rng):
    store = DesignStore(tmp_path)
    mine, theirs = new_session_id(), new_session_id()
    assert mine != theirs
    store.autosave(mine, design(rng, "mine"))
    store.autosave(theirs, design(rng, "theirs"))
    assert store.restore(mine).name == "mine"
    assert store.restore(theirs).name == "theirs"
    assert store.restore(new_session_id()) is None


@pytest.mark.parametrize(
    "session_id", [None, "", "short", "../../etc/passwd", "a" * 65, "x y z 123"]
)
def test_session_ids_are_checked(session_id):
    with pytest.raises(ValueError, match="session id must be 8 to 64"):
        check_session_id(session_id)


def test_default_design_is_bigbird_8_heads_4096_tokens():
    default = load_default_design()
    layout = default.layout
    assert (layout.n_heads, layout.seq_len_q, layout.block_size) == (8, 4096, 64)
    assert default.recipe.steps[0].pattern == "deepspeed_bigbird"
    assert default.recipe.build() == layout
    assert 0.05 < layout.density < 0.3


def test_tidy_removes_orphaned_temporaries_and_old_autosaves_only(tmp_path, rng):
    store = DesignStore(tmp_path)
    store.autosave("fresh-session-1", design(rng))
    store.autosave("stale-session-1", design(rng))
    store.save("kept forever", design(rng))
    orphan = store.autosave_dir / ".x.pt.abc.tmp"
    orphan.write_bytes(b"half a file")
    writing = store.library_dir / ".y.pt.def.tmp"
    writing.write_bytes(b"being written now")
    now = os.path.getmtime(orphan) + 100
    old = now - 31 * 86400
    os.utime(store.autosave_dir / "stale-session-1.pt", (old, old))
    os.utime(store.library_dir / "kept forever.pt", (old, old))
    os.utime(orphan, (now - 3600, now - 3600))
    removed = store.tidy(now=now).removed
    assert sorted(p.name for p in removed) == [".x.pt.abc.tmp", "stale-session-1.pt"]
    assert store.restore("fresh-session-1") is not None and writing.exists()
    assert store.names() == ["kept forever"]


def test_autosave_days_come_from_the_environment(tmp_path, rng, monkeypatch):
    from designer.storage import AUTOSAVE_DAYS_ENV, autosave_days

    assert autosave_days() == 30
    monkeypatch.setenv(AUTOSAVE_DAYS_ENV, "2")
    store = DesignStore(tmp_path)
    store.autosave("three-days-old", design(rng))
    path = store.autosave_dir / "three-days-old.pt"
    now = os.path.getmtime(path) + 3 * 86400
    assert store.tidy(now=now).removed == [path]
    monkeypatch.setenv(AUTOSAVE_DAYS_ENV, "soon")
    with pytest.raises(ValueError, match="BSD_AUTOSAVE_DAYS must be a number of days > 0"):
        autosave_days()


def test_atomic_write_syncs_the_file_and_its_directory(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(handle):
        synced.append(os.path.isdir(f"/proc/self/fd/{handle}"))
        real_fsync(handle)

    monkeypatch.setattr(os, "fsync", fsync)
    atomic_write(tmp_path / "f.bin", b"data")
    assert synced == [False, True]


def test_large_designs_are_small_files(tmp_path):
    from designer.layout import Layout

    store = DesignStore(tmp_path)
    largest = Design(Layout.zeros(4, 4096, 4096, 16), name="largest")
    store.autosave("big-session-1", largest)
    assert (store.autosave_dir / "big-session-1.pt").stat().st_size <= 8 * 2**20 + 4096
    assert store.restore("big-session-1") == largest


def test_version_1_autosaves_still_restore(tmp_path, rng):
    """Autosaves written before the compact format: int64 layout, recipe dict, any size."""
    import io

    import torch

    from designer.formats.settings import design_settings

    store = DesignStore(tmp_path)
    old = design(rng)
    store.autosave_dir.mkdir(parents=True)
    buffer = io.BytesIO()
    layout = old.layout
    torch.save(
        {
            "format": "blocksparse-design", "version": 1, "layout": layout.to_int64(),
            "block_size": layout.block_size, "seq_len_q": layout.seq_len_q,
            "seq_len_k": layout.seq_len_k, **design_settings(old), "recipe": None,
        },
        buffer,
    )  # fmt: skip
    (store.autosave_dir / "old-session-1.pt").write_bytes(buffer.getvalue())
    assert store.restore("old-session-1") == old


def test_own_files_are_read_without_building_their_recipe_again(tmp_path, monkeypatch):
    """The writer checked that the recipe rebuilds the layout; a restore only reads it."""
    from designer.recipe import Recipe, RecipeStep

    recipe = Recipe(2, 64, 64, 16, steps=(RecipeStep("random_per_row", {"seed": 1}),))
    saved = Design(recipe.build(), name="r", recipe=recipe)
    store = DesignStore(tmp_path)
    store.autosave("session-one", saved)
    monkeypatch.setattr(Recipe, "_built", lambda self: pytest.fail("rebuilt on restore"))
    restored = store.restore("session-one")
    assert restored == saved and restored.recipe.build() == saved.layout


def test_a_library_design_is_renamed_with_its_own_name(tmp_path, rng):
    store = DesignStore(tmp_path)
    store.save("first", design(rng))
    store.save("second", design(rng))
    assert store.rename("first", "File one") == "File one"
    assert store.names() == ["File one", "second"] and store.load("file one").name == "File one"
    assert store.rename("file one", "FILE ONE") == "FILE ONE"  # its own look-alike
    assert store.names() == ["FILE ONE", "second"]
    with pytest.raises(ValueError, match="has a design named 'second' already"):
        store.rename("FILE ONE", "Second")
    with pytest.raises(ValueError, match="no design named 'gone'"):
        store.rename("gone", "x")
    with pytest.raises(ValueError, match="design name must be 1 to 80 letters"):
        store.rename("second", "../x")


def test_snapshots_are_frozen_bounded_and_read_by_checked_ids(tmp_path, rng, monkeypatch):
    import designer.storage as storage

    store = DesignStore(tmp_path)
    monkeypatch.setattr(storage, "MAX_SNAPSHOTS", 3)
    first = design(rng)
    ids = [store.snapshot(first)]
    for i in range(3):
        os.utime(store.snapshot_dir / f"{ids[-1]}.pt", (1000 + i, 1000 + i))  # oldest first
        ids.append(store.snapshot(design(rng)))
    assert len(list(store.snapshot_dir.iterdir())) == 3
    with pytest.raises(ValueError, match="no snapshot of that name on this server"):
        store.load_snapshot(ids[0])  # it made room for newer ones
    assert store.load_snapshot(ids[-1]).layout.shape == first.layout.shape
    for bad in ("../x", "a" * 65, 5):
        with pytest.raises(ValueError, match="snapshot id must be 8 to 64 letters"):
            store.load_snapshot(bad)
    monkeypatch.setattr(storage, "MAX_SNAPSHOT_BYTES", 1)
    store.snapshot(first)  # past the bytes: every older one goes
    assert len(list(store.snapshot_dir.iterdir())) == 1
