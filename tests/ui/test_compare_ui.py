"""The Compare tab, driven headless with ``AppTest``: a library design or a file beside the
design on screen, and the diff of a head."""

from __future__ import annotations

import io

import torch

from designer.storage import DesignStore, load_default_design
from tests.ui.test_app import assert_clean, current, data_dir, open_app, unescaped  # noqa: F401
from ui import keys


def test_a_library_design_beside_the_current_one_with_a_diff(data_dir):  # noqa: F811
    at = open_app()
    at.number_input(key=keys.step_key(0, "num_global_blocks")).set_value(4).run()
    DesignStore(data_dir).save("the default", load_default_design())
    at.session_state["tab"] = "Compare"
    at.run()
    assert "Pick a library design" in at.info[0].value
    at.selectbox(key=keys.COMPARE_PICK).set_value("the default").run()
    assert_clean(at)
    figures = at.dataframe[0].value
    rows = dict(zip(figures[""], zip(figures["this design"], figures["the other"], strict=True),
                    strict=True))  # fmt: skip
    mine, theirs = current(at).layout, load_default_design().layout
    assert rows["Density"] == (f"{mine.density:.2%}", f"{theirs.density:.2%}")
    assert list(at.dataframe[2].value["run"]) == ["not measured"] * 2
    a, b = mine.blocks[0], theirs.blocks[0]
    legend = " ".join(h.proto.body for h in at.get("html"))
    assert f"{int((a ^ b).sum()):,} blocks differ" in legend
    assert f"only in this design: {int((a & ~b).sum()):,}" in legend
    at.selectbox(key=keys.COMPARE_HEAD).set_value(3).run()
    a, b = mine.blocks[3], theirs.blocks[3]
    assert f"only in this design: {int((a & ~b).sum()):,}" in " ".join(
        h.proto.body for h in at.get("html"))  # fmt: skip
    assert current(at).layout == mine, "comparing never changes the working design"


def test_a_file_of_another_grid_is_compared_without_a_diff(data_dir):  # noqa: F811
    at = open_app(tab="Compare")
    buffer = io.BytesIO()
    torch.save(torch.ones(2, 8, 8, dtype=torch.int64), buffer)  # bare: at this block size
    at.file_uploader(key=keys.COMPARE_UPLOAD).upload("eight.pt", buffer.getvalue()).run()
    assert_clean(at)
    assert "“eight.pt”" in unescaped(at.subheader[0].value)
    assert "No block-by-block diff: the grids differ (64 × 64 blocks of 64 against 8 × 8" in (
        at.info[0].value
    )
    at.file_uploader(key=keys.COMPARE_UPLOAD).upload("bad.pt", b"not a torch file").run()
    assert "Could not load bad.pt" in unescaped(at.error[0].value)


def test_measured_speed_is_shown_beside_the_other_design(data_dir, monkeypatch):  # noqa: F811
    from designer.analysis import design_digest
    from gpu.bench.store import RunStore
    from tests.gpu.bench.test_results import make_doc

    DesignStore(data_dir).save("same", load_default_design())
    RunStore(data_dir).save(design_digest(load_default_design()), make_doc(monkeypatch))
    at = open_app(tab="Compare")
    at.selectbox(key=keys.COMPARE_PICK).set_value("same").run()
    speed = at.dataframe[2].value
    assert list(speed["fused"]) == ["1.000 ms", "1.000 ms"]  # the same blocks: the same runs
    assert "0 blocks differ" in " ".join(h.proto.body for h in at.get("html"))
