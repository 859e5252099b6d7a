"""What Streamlit parses for the canvas before our code sees it."""

import pytest
from streamlit.components.v2.bidi_component import serialization

import ui.canvas
from ui.canvas import MAX_COMPONENT_JSON_CHARS, guard_component_json


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000 + "]" * 5000,  # once a RecursionError that failed the rerun
        '[{"event": "edit", "value": {"seq": ' + "9" * 5000 + "}}]",  # once a ValueError
        "[" + " " * MAX_COMPONENT_JSON_CHARS + "]",
    ],
    ids=["5000 deep", "5000 digits", "too long"],
)
def test_a_value_streamlit_cannot_read_reads_as_nothing_sent(text):
    assert serialization.deserialize_trigger_list(text) is None


def test_readable_values_pass_and_the_guard_wraps_once():
    assert serialization.deserialize_trigger_list('[{"event": "edit", "value": 1}]') == [
        {"event": "edit", "value": 1}
    ]
    assert guard_component_json(serialization.handle_deserialize) is (
        serialization.handle_deserialize
    )
    assert ui.canvas.EDIT_TRIGGER == "edit"
