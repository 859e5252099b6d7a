"""Hostile inputs and a damaged data folder, driven headless with ``AppTest``: each page renders,
says what happened in plain words and never shows a server path."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
import torch

from designer.storage import AUTOSAVE_DAYS_ENV, DATA_DIR_ENV, DesignStore, load_default_design
from tests.ui.test_app import assert_clean, current, open_app, pt_bytes, unescaped
from ui import keys
from ui.text import WORD_JOINER


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    return tmp_path


def messages(at) -> list[str]:
    """What the page says, as a viewer reads it."""
    kinds = ("error", "warning", "info", "toast")
    return [unescaped(m.value) for kind in kinds for m in getattr(at, kind)]


def read_only(path, *args, **kwargs):
    raise OSError(errno.EROFS, "Read-only file system", str(path))


def test_a_nul_in_an_uploaded_file_name_is_dropped_not_an_exception_page(data_dir):
    at = open_app(tab="Files")
    at.file_uploader(key=keys.UPLOAD).upload("a\x00b.pt", pt_bytes(torch.eye(4))).run()
    assert_clean(at)
    assert messages(at) == ["Could not load ab.pt: bare layout tensor: layout must hold "
                            "integers or bools, got dtype torch.float32"]  # fmt: skip
    bare = pt_bytes(torch.eye(4, dtype=torch.int64))
    at.file_uploader(key=keys.UPLOAD).upload("a\x00b.pt", bare).run()
    assert_clean(at)
    at.button(key="upload_bare").click().run()
    assert_clean(at)
    assert current(at).name == "ab"


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_a_0_1_layout_of_a_wide_unsigned_dtype_loads(data_dir, dtype):
    at = open_app(tab="Files")
    layout = torch.eye(8, dtype=torch.uint8).to(dtype)[None]
    at.file_uploader(key=keys.UPLOAD).upload("wide.pt", pt_bytes(layout)).run()
    at.button(key="upload_bare").click().run()
    assert_clean(at)
    assert not at.error and current(at).layout.nnz == 8


def test_a_step_message_quoting_what_was_typed_shows_it_as_text(data_dir):
    at = open_app()
    at.selectbox(key=keys.step_key(0, "pattern")).set_value("vertical_slash").run()
    image = "![p](http://127.0.0.1:9/p.png)"
    at.text_input(key=keys.step_key(0, "vertical_blocks")).set_value(image).run()
    assert_clean(at)
    (error,) = at.error
    assert "must be an integer" in error.value and "![" not in error.value


def test_shortcodes_in_a_design_name_show_as_typed(data_dir):
    at = open_app()
    at.text_input(key=keys.NAME).set_value(":material/home: :smile: :red[x]").run()
    assert_clean(at)
    title = at.title[0].value
    assert ":material/" not in title and not re.search(r"(?<!\\):\w", title)
    assert title.count(WORD_JOINER) == 3


def test_an_unreadable_autosave_is_reported_without_its_path(data_dir):
    store = DesignStore(data_dir)
    store.autosave_dir.mkdir(parents=True)
    (store.autosave_dir / "broken-session-1.pt").write_bytes(b"not a design")
    at = open_app({keys.SESSION_QUERY_PARAM: "broken-session-1"})
    said = " ".join(messages(at))
    assert "Could not restore the last design" in said and str(data_dir) not in said


def test_a_failed_autosave_is_reported_without_its_path(data_dir, monkeypatch):
    at = open_app()
    monkeypatch.setattr(os, "replace", read_only)
    at.number_input(key=keys.step_key(0, "num_global_blocks")).set_value(3).run()
    assert_clean(at)
    said = " ".join(messages(at))
    assert "Autosave failed (Read-only file system)" in said and str(data_dir) not in said


def test_deleting_from_a_read_only_library_says_so(data_dir, monkeypatch):
    DesignStore(data_dir).save("kept", load_default_design())
    at = open_app(tab="Files")
    at.selectbox(key=keys.LIBRARY_PICK).set_value("kept").run()
    monkeypatch.setattr(Path, "unlink", read_only)
    at.button(key="library_delete").click().run()
    at.button(key="library_confirm").click().run()
    assert_clean(at)
    assert any("Could not delete “kept”: Read-only file system" in m for m in messages(at))
    assert DesignStore(data_dir).names() == ["kept"]


def test_a_name_too_long_for_a_file_is_refused_in_words(data_dir):
    at = open_app(tab="Files")
    at.text_input(key=keys.LIBRARY_NAME).set_value("設計" * 40).run()
    at.button(key="library_save").click().run()
    assert_clean(at)
    (error,) = messages(at)
    assert "at most 200 bytes in UTF-8" in error and str(data_dir) not in error


def test_saving_a_look_alike_name_asks_to_replace_the_design_it_looks_like(data_dir):
    at = open_app(tab="Files")
    at.text_input(key=keys.LIBRARY_NAME).set_value("ﬁle").run()
    at.button(key="library_save").click().run()
    at.text_input(key=keys.LIBRARY_NAME).set_value("FILE").run()
    at.button(key="library_save").click().run()
    assert any("“file” already exists" in w.value for w in at.warning)
    assert DesignStore(data_dir).names() == ["file"]


@pytest.mark.parametrize(
    "damage", ["autosave directory", "unremovable stale file", "0", "30d", "nan"]
)
def test_one_bad_entry_in_the_data_folder_does_not_take_the_app_down(data_dir, monkeypatch, damage):
    store = DesignStore(data_dir)
    if damage == "autosave directory":
        (store.autosave_dir / "x.pt").mkdir(parents=True)
        os.utime(store.autosave_dir / "x.pt", (0, 0))
    elif damage == "unremovable stale file":
        store.library_dir.mkdir(parents=True)
        (store.library_dir / ".x.pt.abcdefgh.tmp").write_bytes(b"half")
        os.utime(store.library_dir / ".x.pt.abcdefgh.tmp", (0, 0))
        monkeypatch.setattr(Path, "unlink", read_only)
    else:
        monkeypatch.setenv(AUTOSAVE_DAYS_ENV, damage)
    for _ in range(2):  # every session, not just the first
        at = open_app()
        assert not at.error and at.title[0].value == "DeepSpeed BigBird 4k"
    said = " ".join(messages(at))
    assert str(data_dir) not in said
