"""Stored runs, kept with their design, and the repository's committed results."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpu.bench import store as store_module
from gpu.bench.results import document_bytes
from gpu.bench.store import RunStore, committed_results
from tests.gpu.bench.test_results import make_doc


def test_nan_errors_survive_storage(monkeypatch, tmp_path):
    doc = make_doc(monkeypatch)
    doc["cases"][0]["results"][0]["rel_error"] = math.nan
    store = RunStore(tmp_path)
    store.save("0" * 32, doc)
    (stored,), problems_ = store.runs("0" * 32)
    assert problems_ == [] and math.isnan(stored.doc["cases"][0]["results"][0]["rel_error"])


def test_run_store_keys_by_digest_newest_first_and_skips_bad_files(monkeypatch, tmp_path):
    store = RunStore(tmp_path)
    first, second = make_doc(monkeypatch), make_doc(monkeypatch)
    first["date"], second["date"] = "2026-01-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00"
    store.save("a" * 32, first)
    path = store.save("a" * 32, second)
    assert path.parent == tmp_path / "runs" / ("a" * 32)
    (path.parent / "broken.json").write_text("{")
    runs, unreadable = store.runs("a" * 32)
    assert [r.doc["date"] for r in runs] == [second["date"], first["date"]]
    assert unreadable == ["broken.json is not JSON: Expecting property name enclosed in double "
                          "quotes: line 1 column 2 (char 1)"]  # fmt: skip
    assert "test GPU (" in runs[0].label and "run · B=1 H=2 S=64" in runs[0].label
    assert store.runs("b" * 32) == ([], [])
    with pytest.raises(ValueError, match=r"digest must be 32 lowercase hex digits, got '\.\./x'"):
        store.runs("../x")


def test_a_checkout_finds_its_committed_results_and_an_install_has_none(monkeypatch):
    checkout = Path(__file__).resolve().parents[3]
    assert checkout / "benchmarks" / "results" == store_module.RESULTS_DIR
    assert committed_results()[0]  # the repository's own
    monkeypatch.setattr(store_module, "RESULTS_DIR", None)  # what an installed package has
    assert committed_results() == ([], [])


def test_committed_results_are_read_from_a_folder(monkeypatch, tmp_path):
    (tmp_path / "2026-11-29-h200.json").write_bytes(document_bytes(make_doc(monkeypatch)))
    (tmp_path / "notes.json").write_text('{"format": "other"}')  # another script's results
    (tmp_path / "app-2026-11-29-h200.json").write_text('{"ok": true, "checks": []}')
    (tmp_path / "broken.json").write_text('{"format": "blocksparse-bench", "version": 1}')
    (tmp_path / "cut.json").write_text('{"format": "blocksp')
    docs, unreadable = committed_results(tmp_path)
    assert [d.path.name for d in docs] == ["2026-11-29-h200.json"]
    assert [line.split(" is ")[0] for line in unreadable] == ["broken.json", "cut.json"]


def test_the_repositorys_own_results_read_without_a_warning():
    docs, unreadable = committed_results()
    assert docs and unreadable == []
