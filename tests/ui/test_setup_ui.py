"""The sidebar's setup widgets, driven headless with ``AppTest``."""

from __future__ import annotations

import pytest
from streamlit.runtime.media_file_manager import MediaFileManager

from tests.ui.test_app import assert_clean, current, data_dir, open_app, unescaped  # noqa: F401
from ui import keys


@pytest.mark.parametrize(("block", "width"), [(16, 8), (128, 1), (64, 2)])
def test_auto_start_width_box_follows_the_block_size(data_dir, block, width):  # noqa: F811
    at = open_app()
    at.selectbox(key=keys.BLOCK_SIZE).set_value(block).run()
    assert_clean(at)
    assert current(at).effective_start_width == width
    assert at.number_input(key=keys.START_WIDTH).value == width


def test_a_negative_start_width_is_refused_with_a_message(data_dir):  # noqa: F811
    at = open_app()
    at.toggle(key=keys.AUTO_START_WIDTH).set_value(False).run()
    before = current(at)
    at.number_input(key=keys.START_WIDTH).set_value(-1).run()
    assert_clean(at)
    assert [unescaped(e.value) for e in at.error] == [
        "segmentation start width must be in [0, 65536], got -1"
    ]
    assert current(at).start_width == before.start_width


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (keys.N_HEADS, 0, "heads must be in [1, "),
        (keys.SEQ_LEN_Q, 0, "query tokens must be in [1, "),
        (keys.SEQ_LEN_K, -64, "key tokens must be in [1, "),
    ],
)
def test_out_of_range_numbers_say_what_is_allowed(data_dir, key, value, message):  # noqa: F811
    at = open_app()
    before = current(at).layout
    at.number_input(key=key).set_value(value).run()
    assert_clean(at)
    assert len(at.error) == 1 and unescaped(at.error[0].value).startswith(message), at.error
    assert f"got {value}" in unescaped(at.error[0].value)
    assert current(at).layout.shape == before.shape


def test_start_width_zero_still_draws_the_active_blocks(data_dir):  # noqa: F811
    at = open_app()
    at.toggle(key=keys.AUTO_START_WIDTH).set_value(False).run()
    at.number_input(key=keys.START_WIDTH).set_value(0).run()
    assert_clean(at)
    assert current(at).start_width == 0
    legend = " ".join(html.proto.body for html in at.get("html"))
    assert f"active, in no tile: {current(at).layout.nnz:,} blocks" in legend
    tiles = next(m for m in at.metric if m.label == "Tiles")
    assert tiles.value == "none" and "start width 0" in tiles.help
    flops = next(m for m in at.metric if m.label == "FLOPs vs dense")
    assert flops.value == f"{current(at).layout.density:.2%}"  # the attention's, not the tiles'


def test_vary_per_head_starts_from_the_current_value(data_dir):  # noqa: F811
    at = open_app()
    at.selectbox(key=keys.step_key(0, "pattern")).set_value("sliding_window").run()
    before = current(at).layout
    at.toggle(key=keys.per_head_key(0, "window_blocks")).set_value(True).run()
    assert_clean(at)
    assert not at.error
    n_heads = before.n_heads
    assert at.text_input(key=keys.values_key(0, "window_blocks")).value == ", ".join(
        ["4"] * n_heads
    )
    assert current(at).layout == before
    assert current(at).recipe.steps[0].params["window_blocks"] == (4,) * n_heads


def test_recipe_messages_name_steps_as_the_app_does(data_dir):  # noqa: F811
    at = open_app()
    at.button(key="add_step").click().run()
    at.selectbox(key=keys.step_key(1, "pattern")).set_value("sliding_window").run()
    at.multiselect(key=keys.step_key(1, "heads")).select(1).select(2).run()
    at.toggle(key=keys.per_head_key(1, "window_blocks")).set_value(True).run()
    at.text_input(key=keys.values_key(1, "window_blocks")).input("3").run()
    assert_clean(at)
    (error,) = (unescaped(e.value) for e in at.error)
    assert error.startswith("Step 2 (Sliding window): window_blocks must be one value or")
    assert "steps[" not in error


@pytest.mark.parametrize("pattern", ["packed_documents", "neighborhood_2d"])
def test_picked_patterns_cover_every_query_row(data_dir, pattern):  # noqa: F811
    at = open_app()
    at.selectbox(key=keys.step_key(0, "pattern")).set_value(pattern).run()
    assert_clean(at)
    assert current(at).recipe.steps[0].pattern == pattern
    assert current(at).layout.blocks.any(dim=2).all()  # no query row attends to nothing
    assert "no active key block" not in " ".join(m.value for m in at.markdown)


def test_head_pictures_are_served_as_the_pngs_drawn(data_dir, monkeypatch):  # noqa: F811
    served = []
    original = MediaFileManager.add

    def record(self, data, mimetype, *args, **kwargs):
        served.append((mimetype, data))
        return original(self, data, mimetype, *args, **kwargs)

    monkeypatch.setattr(MediaFileManager, "add", record)
    at = open_app()
    n_heads = current(at).layout.n_heads
    pictures = [data for mimetype, data in served if mimetype.startswith("image/")]
    assert len(pictures) == n_heads
    assert all(data.startswith(b"\x89PNG") for data in pictures)  # not re-encoded as JPEG


def test_out_of_range_pattern_parameters_say_what_is_allowed(data_dir):  # noqa: F811
    at = open_app()
    at.selectbox(key=keys.step_key(0, "pattern")).set_value("sliding_window").run()
    before = current(at).layout
    at.number_input(key=keys.step_key(0, "window_blocks")).set_value(0).run()
    assert_clean(at)
    (error,) = (unescaped(e.value) for e in at.error)
    assert "window_blocks must be in [1, " in error and error.endswith("got 0")
    assert current(at).layout == before


def test_costs_follow_the_model_shape_entered_once_and_kept_with_the_design(data_dir):  # noqa: F811
    from designer.costs import attention_costs
    from designer.model_shape import ModelShape
    from designer.storage import DesignStore
    from designer.units import bytes_text, flops_text

    at = open_app()
    at.number_input(key=keys.MODEL_BATCH).set_value(2).run()
    at.number_input(key=keys.MODEL_KV_HEADS).set_value(2).run()
    at.number_input(key=keys.MODEL_HEAD_DIM).set_value(64).run()
    assert_clean(at)
    design = current(at)
    assert design.model_shape == ModelShape(batch=2, kv_heads=2, head_dim=64)
    costs = attention_costs(design)
    metrics = {m.label: m for m in at.metric}
    assert metrics["Attention FLOPs"].value == flops_text(costs.flops)
    assert "batch 2, 8 heads (2 kv), head dim 64" in metrics["Attention FLOPs"].help
    assert metrics["Memory"].value == bytes_text(costs.input_bytes)
    session = at.session_state[keys.HISTORY].session_id
    assert DesignStore(data_dir).restore(session).model_shape == design.model_shape
    at.number_input(key=keys.MODEL_HEADS).set_value(32).run()
    assert any("heads must be 8 for this 8-head design" in unescaped(e.value) for e in at.error)
    assert current(at).model_shape == design.model_shape
    at.number_input(key=keys.N_HEADS).set_value(4).run()  # kv heads still divide 4
    assert at.number_input(key=keys.MODEL_HEADS).value == 4
