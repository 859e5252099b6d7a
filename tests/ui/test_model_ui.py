"""The Model tab, driven headless with ``AppTest``: a design per layer group, made, edited,
kept across a reload, downloaded and loaded back."""

from __future__ import annotations

from designer.formats.model_file import model_file_bytes, read_model_file
from designer.storage import DesignStore, load_default_design
from tests.ui.test_app import assert_clean, current, data_dir, open_app, unescaped  # noqa: F401
from ui import keys

GLOBALS = keys.step_key(0, "num_global_blocks")


def test_a_model_design_is_made_edited_kept_and_downloaded(data_dir):  # noqa: F811
    DesignStore(data_dir).save("wide", load_default_design())
    at = open_app(tab="Model")
    at.number_input(key=keys.LAYERS_COUNT).set_value(12).run()
    at.button(key="layers_start").click().run()
    assert_clean(at)
    model = at.session_state[keys.HISTORY].model
    assert model.n_layers == 12 and len(model.groups) == 1
    at.session_state["tab"] = "Patterns"  # change the design on screen, then assign it
    at.run()
    at.number_input(key=GLOBALS).set_value(4).run()
    at.session_state["tab"] = "Model"
    at.run()
    at.number_input(key=keys.LAYERS_FIRST).set_value(4)
    at.number_input(key=keys.LAYERS_LAST).set_value(7)
    at.button(key="layers_assign").click().run()
    assert_clean(at)
    model = at.session_state[keys.HISTORY].model
    assert [g.label for g in model.groups] == ["layers 0–3", "layers 4–7", "layers 8–11"]
    assert model.design_of(5).layout == current(at).layout
    at.selectbox(key=keys.LAYERS_SOURCE).set_value("wide")
    at.number_input(key=keys.LAYERS_FIRST).set_value(11)
    at.number_input(key=keys.LAYERS_LAST).set_value(11)
    at.button(key="layers_assign").click().run()
    model = at.session_state[keys.HISTORY].model
    assert model.design_of(11).name == "wide" and len(model.designs) == 3
    table = at.dataframe[0].value
    assert list(table["layers"]) == ["layers 0–3", "layers 4–7", "layers 8–10", "layer 11"]

    session = at.query_params[keys.SESSION_QUERY_PARAM]
    reloaded = open_app({keys.SESSION_QUERY_PARAM: session}, tab="Model")
    assert reloaded.session_state[keys.HISTORY].model == model  # autosaved with the session
    assert "register_model_attention" in reloaded.code[0].value
    data = reloaded.get("download_button")[0].proto
    assert data.label == "Download the model design"
    assert read_model_file(model_file_bytes(model)) == model

    reloaded.selectbox(key=keys.LAYERS_GROUP).set_value(1).run()
    reloaded.button(key="layers_open").click().run()
    assert current(reloaded).layout == model.design_of(4).layout


def test_a_model_file_loads_and_a_bad_one_says_why(data_dir):  # noqa: F811
    from designer.model_design import ModelDesign

    model = ModelDesign.uniform("uploaded", 6, load_default_design())
    at = open_app(tab="Model")
    at.file_uploader(key=keys.LAYERS_UPLOAD).upload("m.pt", model_file_bytes(model)).run()
    assert_clean(at)
    assert at.session_state[keys.HISTORY].model == model
    assert at.text_input(key=keys.LAYERS_NAME).value == "uploaded"
    at.file_uploader(key=keys.LAYERS_UPLOAD).upload("bad.pt", b"junk").run()
    assert "Could not load bad.pt: model design file is not a torch file" in unescaped(
        at.error[0].value
    )
    assert at.session_state[keys.HISTORY].model == model, "a bad file changes nothing"
    at.button(key="layers_drop").click().run()
    assert at.session_state[keys.HISTORY].model is None
