"""The app's flows, driven headless with ``AppTest`` (everything but pointer events)."""

from __future__ import annotations

import io
import json
import pickle
import re
import zipfile
from pathlib import Path

import pytest
import torch
from streamlit.runtime.media_file_manager import MediaFileManager
from streamlit.testing.v1 import AppTest

from designer.design import Design
from designer.formats import (
    design_from_json,
    from_csr,
    load_design,
    read_design_file,
    save_design,
)
from designer.formats.pt_file import design_file_bytes
from designer.layout import Layout
from designer.storage import (
    DATA_DIR_ENV,
    DEFAULT_DESIGN_FILE,
    DesignStore,
    load_default_design,
)
from ui import keys

APP = str(Path(__file__).resolve().parents[2] / "app.py")
WINDOW = keys.step_key(0, "num_sliding_window_blocks")
GLOBALS = keys.step_key(0, "num_global_blocks")


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    return tmp_path


def open_app(query_params=None, tab=None):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params.update(query_params or {})
    if tab:
        at.session_state["tab"] = tab
    at.run()
    assert_clean(at)
    return at


def assert_clean(at):
    assert not at.exception, [e.value for e in at.exception]


def unescaped(text: str) -> str:
    """Text as a viewer reads it: the Markdown escapes of ``ui.text.plain`` undone."""
    return re.sub(r"\\(.)", r"\1", text)


def metric(at, label):
    return next(m.value for m in at.metric if m.label == label)


def current(at) -> Design:
    return at.session_state[keys.HISTORY].present


def pt_bytes(content) -> bytes:
    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()


def test_default_page_renders(data_dir):
    at = open_app()
    assert not at.error
    assert at.title[0].value == "DeepSpeed BigBird 4k"
    assert metric(at, "Density") == "16.24%"
    assert metric(at, "Active blocks") == "5,322"
    assert at.query_params[keys.SESSION_QUERY_PARAM] == at.session_state[keys.HISTORY].session_id
    assert at.button(key="undo").disabled


def test_changing_a_parameter_updates_statistics_and_undo_redo(data_dir):
    at = open_app()
    before = metric(at, "Active blocks")
    at.number_input(key=WINDOW).set_value(9).run()
    assert_clean(at)
    after = metric(at, "Active blocks")
    assert int(after.replace(",", "")) > int(before.replace(",", ""))
    at.button(key="undo").click().run()
    assert metric(at, "Active blocks") == before
    assert at.number_input(key=WINDOW).value == 5  # the widget follows the design back
    at.button(key="redo").click().run()
    assert metric(at, "Active blocks") == after
    assert at.number_input(key=WINDOW).value == 9


def test_impossible_parameter_shows_a_message_and_keeps_the_design(data_dir):
    at = open_app()
    at.number_input(key=GLOBALS).set_value(65).run()
    assert_clean(at)
    assert any("Number of global blocks" in unescaped(e.value) for e in at.error)
    assert metric(at, "Density") == "16.24%"
    at.number_input(key=GLOBALS).set_value(3).run()
    assert not at.error and metric(at, "Density") != "16.24%"


def test_sequence_lengths_need_not_be_whole_blocks(data_dir):
    at = open_app()
    at.number_input(key=keys.SEQ_LEN_K).set_value(4000).run()  # DeepSpeed's layouts are square
    layout = current(at).layout
    assert not at.error and (layout.seq_len_q, layout.seq_len_k, layout.n_q_blocks) == (
        4000,
        4000,
        63,
    )


def test_block_size_change_rebuilds_the_layout(data_dir):
    at = open_app()
    at.selectbox(key=keys.BLOCK_SIZE).set_value(128).run()
    assert_clean(at)
    layout = current(at).layout
    assert (layout.n_q_blocks, layout.block_size, layout.seq_len_q) == (32, 128, 4096)


def test_per_head_pattern_step(data_dir):
    at = open_app()
    at.button(key="add_step").click().run()
    assert_clean(at)
    at.selectbox(key=keys.step_key(1, "pattern")).set_value("causal").run()
    at.selectbox(key=keys.step_key(1, "combine")).set_value("replace").run()
    at.multiselect(key=keys.step_key(1, "heads")).select(2).run()
    assert_clean(at)
    assert not at.error
    blocks = current(at).layout.blocks
    assert torch.equal(blocks[2], torch.ones(64, 64, dtype=torch.bool).tril())
    assert not torch.equal(blocks[1], blocks[2])
    assert current(at).recipe.steps[1].heads == (2,)


def test_reroll_changes_the_random_blocks(data_dir):
    at = open_app()
    before = current(at).layout
    at.button(key=keys.step_key(0, "reroll")).click().run()
    assert_clean(at)
    assert current(at).recipe.steps[0].params["seed"] != 0
    assert current(at).layout != before


def test_per_head_values(data_dir):
    at = open_app()
    at.selectbox(key=keys.step_key(0, "pattern")).set_value("sliding_window").run()
    at.toggle(key=keys.per_head_key(0, "window_blocks")).set_value(True).run()
    at.text_input(key=keys.values_key(0, "window_blocks")).input("1 2 3 4 5 6 7 8").run()
    assert_clean(at)
    assert not at.error
    counts = current(at).layout.blocks.sum(dim=(1, 2)).tolist()
    assert counts[0] == 64 and counts[1] == 64 + 63  # causal windows of 1 and 2 blocks
    at.text_input(key=keys.values_key(0, "window_blocks")).input("1 2 x").run()
    assert any(
        "window_blocks[2] must be an integer, got 'x'" in unescaped(e.value) for e in at.error
    )


def test_square_only_pattern_on_cross_attention_is_refused(data_dir):
    at = open_app()
    at.selectbox(key=keys.step_key(0, "pattern")).set_value("sliding_window").run()
    at.number_input(key=keys.SEQ_LEN_K).set_value(8192).run()
    assert current(at).layout.shape == (8, 64, 128)
    at.selectbox(key=keys.step_key(0, "pattern")).set_value("deepspeed_fixed").run()
    assert_clean(at)
    said = [unescaped(e.value) for e in at.error]
    assert said == ["Step 1 (DeepSpeed Fixed): DeepSpeed Fixed ('deepspeed_fixed') is "
                    "self-attention: it needs as many query blocks as key blocks (DeepSpeed "
                    "layouts are square), got 64 and 128"]  # fmt: skip
    assert at.selectbox(key=keys.step_key(0, "pattern")).value == "sliding_window"


def test_query_tokens_of_a_deepspeed_design_change_in_one_edit(data_dir):
    at = open_app()  # the default: DeepSpeed BigBird, 4096 x 4096 tokens
    at.number_input(key=keys.SEQ_LEN_Q).set_value(8192).run()
    assert_clean(at)
    assert not at.error
    assert current(at).layout.shape == (8, 128, 128)
    assert at.number_input(key=keys.SEQ_LEN_K).value == 8192
    assert any("Key tokens follow to 8,192" in unescaped(t.value) for t in at.toast)
    at.number_input(key=keys.SEQ_LEN_K).set_value(2048).run()
    assert current(at).layout.shape == (8, 32, 32)


def upload(at, name, data, block_size=None):
    """Upload a file; a bare tensor then asks for its block size, and only a bare tensor."""
    at.file_uploader(key=keys.UPLOAD).upload(name, data).run()
    assert_clean(at)
    if block_size is not None:
        at.number_input(key=keys.UPLOAD_BLOCK_SIZE).set_value(block_size)
        at.button(key="upload_bare").click().run()
        assert_clean(at)
    else:
        assert not [n for n in at.number_input if n.key == keys.UPLOAD_BLOCK_SIZE]
    return at


def test_upload_a_design_file(data_dir, rng):
    from tests.factories import random_layout

    design = Design(random_layout(rng, 3, 10, 12, block_size=32), name="uploaded")
    buffer = io.BytesIO()
    save_design(design, buffer)
    at = upload(open_app(tab="Files"), "uploaded.pt", buffer.getvalue())
    assert not at.error
    assert any("3 heads × 10 × 12 blocks of 32 tokens" in c.value for c in at.caption)
    assert current(at).layout == design.layout and current(at).name == "uploaded"
    assert at.title[0].value == "uploaded"
    assert at.number_input(key=keys.SEQ_LEN_K).disabled  # no recipe: the shape is the file's


def test_upload_a_bare_deepspeed_tensor_with_its_block_size(data_dir):
    bare = torch.ones(2, 8, 8, dtype=torch.int64).tril()
    at = upload(open_app(tab="Files"), "layout.pt", pt_bytes(bare), block_size=128)
    assert not at.error
    assert current(at).layout == Layout(bare, 128) and current(at).name == "layout"


def test_upload_a_json_recipe(data_dir):
    text = DEFAULT_DESIGN_FILE.read_text()
    recipe = json.loads(text)
    recipe["name"] = "from json"
    at = upload(open_app(tab="Files"), "r.json", json.dumps(recipe).encode())
    assert not at.error and current(at).name == "from json"


class Boom:
    def __reduce__(self):
        return (print, ("this must never run",))


def bad_files():
    good = pt_bytes(torch.zeros(1, 4, 4))
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps(Boom()))
    return {
        "not a zip": (b"hello, I am text", "pt"),
        "truncated": (good[: len(good) // 2], "pt"),
        "pickled code": (pt_bytes({"layout": Boom()}), "pt"),
        "pickle in a zip": (zipped.getvalue(), "pt"),
        "values 0..2": (pt_bytes(torch.full((1, 4, 4), 2)), "pt"),
        "rank 4": (pt_bytes(torch.zeros(1, 1, 4, 4, dtype=torch.int64)), "pt"),
        "huge": (pt_bytes(torch.zeros(1, 1, 1, dtype=torch.int64).expand(4096, 4096, 4096)), "pt"),
        "floats": (pt_bytes(torch.zeros(2, 4, 4)), "pt"),
        "json garbage": (b"{not json", "json"),
        "json wrong": (b'{"format": "something else"}', "json"),
    }


def test_bad_uploads_say_why_and_keep_the_design(data_dir, capsys):
    at = open_app(tab="Files")
    before = current(at)
    for case, (data, suffix) in bad_files().items():
        at.file_uploader(key=keys.UPLOAD).clear()
        upload(at, f"{case}.{suffix}", data)
        errors = [unescaped(e.value) for e in at.error]
        assert len(errors) == 1 and errors[0].startswith(f"Could not load {case}.{suffix}: "), case
        assert current(at) is before, case
    assert "this must never run" not in capsys.readouterr().out


@pytest.fixture
def built(monkeypatch):
    """``{file name: make bytes}`` of every download the app offers, as Streamlit gets them."""
    made = {}
    original = MediaFileManager.add_deferred

    def record(self, data_callable, *args, **kwargs):
        made[kwargs["file_name"]] = data_callable
        return original(self, data_callable, *args, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add_deferred", record)
    return made


def test_downloads_hold_the_design(data_dir, built):
    at = open_app(tab="Files")
    design = current(at)
    assert load_design(built["DeepSpeed_BigBird_4k.pt"]()).layout == design.layout
    assert design_from_json(built["DeepSpeed_BigBird_4k.json"]()).layout == design.layout
    csr = torch.load(io.BytesIO(built["DeepSpeed_BigBird_4k_csr.pt"]()), weights_only=True)
    assert from_csr(csr["row_ptr"], csr["col_idx"], 64, 64) == design.layout
    mask = read_design_file(built["DeepSpeed_BigBird_4k_blockmask.pt"]())
    assert mask.kind == "blockmask" and mask.design.layout == design.layout
    snippet = built["load_DeepSpeed_BigBird_4k.py"]()
    assert b"load_design('DeepSpeed_BigBird_4k.pt')" in snippet
    module_use = "gpu.BlockSparseAttention.from_design('DeepSpeed_BigBird_4k.pt', device=\"cuda\")"
    assert module_use.encode() in snippet
    assert module_use in at.code[0].value, "the Files tab shows the one-line module use"
    assert "DeepSpeed_BigBird_4k_base_blockmask.pt" not in built  # block 64: not MIT's 128
    assert at.download_button(key="download_pt_MIT base_blockmask").disabled


def test_library_save_and_open(data_dir):
    at = open_app(tab="Files")
    at.text_input(key=keys.LIBRARY_NAME).input("my bigbird")
    at.button(key="library_save").click().run()
    assert_clean(at)
    assert DesignStore(data_dir).names() == ["my bigbird"]
    assert DesignStore(data_dir).load("my bigbird").name == "my bigbird"
    assert current(at).name == "DeepSpeed BigBird 4k", "Save as copies: the design keeps its name"
    saved = current(at).layout
    at.session_state["tab"] = "Patterns"  # an edit elsewhere, the Files tab closed meanwhile
    at.run()
    at.number_input(key=WINDOW).set_value(9).run()
    at.number_input(key=keys.N_HEADS).set_value(4).run()
    at.session_state["tab"] = "Files"
    at.run()
    assert current(at).layout.n_heads == 4
    assert at.selectbox(key=keys.LIBRARY_PICK).value == "my bigbird", "the pick survives edits"
    at.button(key="library_load").click().run()
    assert_clean(at)
    assert current(at).layout == saved and current(at).name == "my bigbird"
    at.button(key="library_delete").click().run()
    assert DesignStore(data_dir).names() == ["my bigbird"], "delete asks first"
    assert "will be deleted" in at.warning[0].value
    at.button(key="library_cancel").click().run()
    assert DesignStore(data_dir).names() == ["my bigbird"] and not at.warning
    at.button(key="library_delete").click().run()
    at.button(key="library_confirm").click().run()
    assert_clean(at)
    assert DesignStore(data_dir).names() == []


def test_library_opening_shows_the_library_name(data_dir):
    DesignStore(data_dir).save(
        "ds fixed import", load_default_design()
    )  # saved as "DeepSpeed BigBird 4k"
    at = open_app(tab="Files")
    at.selectbox(key=keys.LIBRARY_PICK).set_value("ds fixed import").run()
    at.button(key="library_load").click().run()
    assert_clean(at)
    assert current(at).name == "ds fixed import" and at.title[0].value == "ds fixed import"


def test_library_save_as_follows_a_rename(data_dir):
    at = open_app(tab="Files")
    at.text_input(key=keys.NAME).input("renamed design").run()
    assert at.text_input(key=keys.LIBRARY_NAME).value == "renamed design"
    at.button(key="library_save").click().run()
    assert DesignStore(data_dir).names() == ["renamed design"]
    assert DesignStore(data_dir).load("renamed design").name == "renamed design"


def test_library_rename(data_dir):
    store = DesignStore(data_dir)
    store.save("old name", load_default_design())
    store.save("other", load_default_design())
    at = open_app(tab="Files")
    at.selectbox(key=keys.LIBRARY_PICK).set_value("old name").run()
    at.text_input(key=keys.LIBRARY_RENAME).input("Other").run()
    at.button(key="library_rename").click().run()
    assert "the library has a design named 'other' already" in unescaped(at.error[0].value)
    at.text_input(key=keys.LIBRARY_RENAME).input("new name").run()
    at.button(key="library_rename").click().run()
    assert_clean(at)
    assert store.names() == ["new name", "other"] and store.load("new name").name == "new name"
    assert at.selectbox(key=keys.LIBRARY_PICK).value == "new name"


def test_a_name_follows_the_design_until_the_user_names_it(data_dir):
    at = open_app()  # "DeepSpeed BigBird 4k": its name is the automatic one
    at.selectbox(key=keys.step_key(0, "pattern")).set_value("sliding_window").run()
    at.number_input(key=keys.SEQ_LEN_Q).set_value(65536).run()
    at.number_input(key=keys.SEQ_LEN_K).set_value(65536).run()
    assert current(at).name == "Sliding window 64k" == at.title[0].value
    at.text_input(key=keys.NAME).input("my window").run()
    at.number_input(key=keys.SEQ_LEN_Q).set_value(32768).run()
    assert current(at).name == "my window", "a name the user gave stays"


def test_one_name_limit_everywhere(data_dir):
    at = open_app(tab="Files")
    assert at.text_input(key=keys.NAME).max_chars == 80
    assert at.text_input(key=keys.LIBRARY_NAME).max_chars == 80
    content = torch.load(io.BytesIO(design_file_bytes(load_default_design())), weights_only=True)
    content["name"] = "n" * 150  # as older versions let a name be
    assert load_design(pt_bytes(content)).name == "n" * 79 + "…"


def test_library_asks_before_replacing(data_dir):
    store = DesignStore(data_dir)
    at = open_app(tab="Files")
    at.text_input(key=keys.LIBRARY_NAME).input("mine")
    at.button(key="library_save").click().run()
    first = store.load("mine").layout
    at.number_input(key=keys.N_HEADS).set_value(2).run()
    at.button(key="library_save").click().run()
    assert "already exists. Replace it?" in at.warning[0].value
    assert store.load("mine").layout == first, "nothing replaced before the answer"
    at.button(key="library_confirm").click().run()
    assert_clean(at)
    assert store.load("mine").layout.n_heads == 2


def test_a_rejected_upload_says_so_once(data_dir):
    at = upload(open_app(tab="Files"), "bad.pt", b"not a torch file")
    assert len(at.error) == 1
    at.number_input(key=keys.N_HEADS).set_value(2).run()
    assert not at.error, "the error answered the upload; a later change does not repeat it"


def test_every_tensor_download_uploads_back(data_dir, built):
    at = open_app(tab="Files")
    design = current(at)
    help_text = at.download_button(key="download_pt_FlexAttention BlockMask").help
    assert "pop it and build mask_mod from it, since without one eager flex_attention attends" in (
        help_text
    )
    for name in (
        "DeepSpeed_BigBird_4k_blockmask.pt",
        "DeepSpeed_BigBird_4k_csr.pt",
        "DeepSpeed_BigBird_4k.json",
    ):
        upload(at, name, built[name]())
        assert not at.error, name
        assert current(at).layout == design.layout, name
    upload(
        at,
        "DeepSpeed_BigBird_4k_deepspeed.pt",
        built["DeepSpeed_BigBird_4k_deepspeed.pt"](),
        block_size=64,
    )
    assert current(at).layout == design.layout


def test_library_refuses_a_bad_name(data_dir):
    at = open_app(tab="Files")
    at.text_input(key=keys.LIBRARY_NAME).input("../../escape")
    at.button(key="library_save").click().run()
    assert any("design name must be 1 to 80 letters" in unescaped(e.value) for e in at.error)
    assert DesignStore(data_dir).names() == []


def test_autosave_restores_the_session_and_only_that_session(data_dir):
    first = open_app()
    first.number_input(key=WINDOW).set_value(9).run()
    changed = current(first).layout
    session = first.query_params[keys.SESSION_QUERY_PARAM]
    reloaded = open_app({keys.SESSION_QUERY_PARAM: session})
    assert current(reloaded).layout == changed
    assert reloaded.number_input(key=WINDOW).value == 9
    other = open_app()
    assert other.query_params[keys.SESSION_QUERY_PARAM] != session
    assert current(other).layout == load_default_design().layout


def test_a_malformed_session_id_starts_fresh(data_dir):
    at = open_app({keys.SESSION_QUERY_PARAM: "../../../etc"})
    assert at.query_params[keys.SESSION_QUERY_PARAM] != "../../../etc"
    assert current(at).layout == load_default_design().layout


def test_paint_band_and_copy_head(data_dir):
    at = open_app(tab="Paint")
    assert not at.error
    at.selectbox(key=keys.EDIT_HEAD).set_value(3).run()
    at.segmented_control(key=keys.EDIT_ACTION).set_value("clear").run()
    at.number_input(key=keys.BAND_LOW).set_value(-64).run()
    at.number_input(key=keys.BAND_HIGH).set_value(64).run()
    at.button(key="apply_band").click().run()
    assert_clean(at)
    blocks = current(at).layout.blocks
    assert blocks[3].sum() == 0 and blocks[2].sum() > 0
    at.multiselect(key=keys.COPY_TARGETS).select(0).select(1).run()
    at.button(key="copy_head").click().run()
    blocks = current(at).layout.blocks
    assert blocks[0].sum() == blocks[1].sum() == 0
    assert current(at).recipe.build() == current(at).layout
    at.button(key="undo").click().run()
    assert current(at).layout.blocks[0].sum() > 0


def test_causal_lint_and_clip(data_dir):
    at = open_app()
    assert not any(e.label.startswith("Lints") for e in at.expander)
    at.toggle(key=keys.CAUSAL).set_value(True).run()
    assert_clean(at)
    assert any(e.label == "Lints: 1 error" for e in at.expander)
    at.button(key="clip_causal").click().run()
    assert_clean(at)
    layout = current(at).layout
    assert torch.equal(layout.blocks, load_default_design().layout.blocks.tril())
    assert not any(e.label.startswith("Lints") for e in at.expander)


def test_drop_manual_edits(data_dir):
    at = open_app(tab="Paint")
    at.segmented_control(key=keys.EDIT_ACTION).set_value("toggle").run()
    at.button(key="apply_band").click().run()
    at.session_state["tab"] = "Patterns"
    at.run()
    assert len(current(at).recipe.edits) == 1
    at.button(key="drop_edits").click().run()
    assert_clean(at)
    assert current(at).recipe.edits == () and current(at).layout == load_default_design().layout


def test_a_reload_keeps_undo_and_says_nothing_was_restored(data_dir):
    at = open_app()
    at.number_input(key=GLOBALS).set_value(3).run()
    session = at.query_params[keys.SESSION_QUERY_PARAM]
    reloaded = open_app({keys.SESSION_QUERY_PARAM: session})
    assert not reloaded.toast  # the page was just open: nothing to announce
    undo = reloaded.button(key=keys.UNDO)
    assert not undo.disabled
    assert "1 step to undo; up to 50 are kept" in undo.help and "survive a reload" in undo.help
    undo.click().run()
    assert reloaded.number_input(key=GLOBALS).value == 2


def test_a_snapshot_link_opens_a_frozen_copy_and_a_change_forks_it(data_dir):
    at = open_app(tab="Files")
    at.button(key="share_snapshot").click().run()
    assert_clean(at)
    link = next(c.value for c in at.code if "?snapshot=" in c.value)
    snapshot = link.split("?snapshot=")[1]
    shared = current(at)
    viewer = open_app({"snapshot": snapshot})
    assert current(viewer).layout == shared.layout and current(viewer).name == shared.name
    assert "A shared snapshot, frozen" in viewer.info[0].value
    assert keys.SESSION_QUERY_PARAM not in viewer.query_params  # the link stays the link
    assert not (data_dir / "autosave").exists() or not list((data_dir / "autosave").iterdir())
    viewer.number_input(key=GLOBALS).set_value(5).run()
    viewer.run()  # the next run follows the fork in the address
    own = viewer.query_params[keys.SESSION_QUERY_PARAM]
    assert "snapshot" not in viewer.query_params
    assert DesignStore(data_dir).restore(own).layout == current(viewer).layout
    assert DesignStore(data_dir).load_snapshot(snapshot).layout == shared.layout  # unchanged
    again = open_app({"snapshot": snapshot})
    assert current(again).layout == shared.layout, "the link still shows the original"


def test_a_bad_snapshot_link_says_so_and_starts_a_fresh_session(data_dir):
    for bad in ("../../etc", "x" * 10_000, "A" * 22):
        at = open_app({"snapshot": bad})
        assert any("Could not open the shared snapshot" in unescaped(t.value) for t in at.toast)
        assert keys.SESSION_QUERY_PARAM in at.query_params and "snapshot" not in at.query_params


def test_a_design_held_as_runs_is_shown_analysed_edited_and_kept(data_dir):
    """32 heads x 128K tokens (2,048^2 blocks, held as runs): every tab draws it, its tiles
    and lints arrive from the background, a band edit and an undo work on its runs, and a
    reload finds the edit."""
    import time

    from designer.analysis import analysed
    from designer.patterns.attention_sinks import attention_sinks_runs

    runs = attention_sinks_runs(32, 2048, 2048, sink_blocks=1, window_blocks=64)
    design = Design(Layout(runs, 64), name="long context", causal=True)
    session = "longcontext-0001"
    DesignStore(data_dir).autosave(session, design)
    at = open_app({keys.SESSION_QUERY_PARAM: session}, tab="Paint")
    assert current(at).layout.runs is not None and not at.error
    deadline = time.monotonic() + 60
    while analysed(current(at)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    for tab in ("Analysis", "Patterns", "Model", "Files", "Paint"):
        at.session_state["tab"] = tab
        at.run()
        assert_clean(at)
        assert not at.error, [e.value for e in at.error]
    assert metric(at, "Tiles") != "—"
    at.selectbox(key=keys.EDIT_HEAD).set_value(3).run()
    at.segmented_control(key=keys.EDIT_ACTION).set_value("clear").run()
    at.number_input(key=keys.BAND_LOW).set_value(0).run()
    at.number_input(key=keys.BAND_HIGH).set_value(10).run()
    at.button(key="apply_band").click().run()
    assert_clean(at)
    counts = current(at).layout.runs.head_counts()
    assert counts[3] < counts[2] == runs.head_counts()[2]
    edited = current(at).layout
    at.button(key="undo").click().run()
    assert current(at).layout == design.layout
    at.button(key="redo").click().run()
    reloaded = open_app({keys.SESSION_QUERY_PARAM: session})
    assert current(reloaded).layout == edited
