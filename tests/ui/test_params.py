import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.patterns.registry import PATTERNS
from designer.recipe import RecipeStep
from ui.keys import per_head_key, step_key, values_key
from ui.params import (
    JS_SAFE_INT,
    list_text,
    number_bounds,
    parse_items,
    step_from_widgets,
    step_widget_values,
)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_widgets_round_trip_every_pattern_at_its_defaults(name):
    step = RecipeStep(name, heads=(0, 2), combine="union")
    values = step_widget_values(3, step)
    back = step_from_widgets(3, values)
    defaults = {p.name: p.default for p in PATTERNS[name].params}
    assert back == RecipeStep(name, defaults, heads=(0, 2), combine="union")


def test_per_head_values_round_trip():
    step = RecipeStep("sliding_window", {"window_blocks": [2, 4, 8], "causal": False})
    values = step_widget_values(0, step)
    assert values[per_head_key(0, "window_blocks")] is True
    assert values[values_key(0, "window_blocks")] == "2, 4, 8"
    assert values[step_key(0, "window_blocks")] == 2
    assert values[step_key(0, "heads")] == []
    assert step_from_widgets(0, values) == step


def test_a_per_head_toggle_off_uses_the_single_value():
    values = step_widget_values(0, RecipeStep("sliding_window", {"window_blocks": [2, 4]}))
    values[per_head_key(0, "window_blocks")] = False
    assert step_from_widgets(0, values).params["window_blocks"] == 2


def test_int_list_parameters_are_text():
    step = RecipeStep("global_tokens", {"global_blocks": [0, 7, 9]})
    values = step_widget_values(1, step)
    assert values[step_key(1, "global_blocks")] == "0, 7, 9"
    values[step_key(1, "global_blocks")] = " 1,2  3 "
    assert step_from_widgets(1, values).params["global_blocks"] == (1, 2, 3)


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("1, 2,3 4", "int", [1, 2, 3, 4]),
        ("", "int", []),
        ("0.5 1e-2", "float", [0.5, 0.01]),
        ("true, False 1 no", "bool", [True, False, True, False]),
        ("unidirectional, bidirectional", "choice", ["unidirectional", "bidirectional"]),
    ],
)
def test_parse_items(text, kind, expected):
    assert parse_items("p", text, kind) == expected


@pytest.mark.parametrize(
    ("text", "kind", "match"),
    [
        ("1, x", "int", r"p\[1\] must be an integer, got 'x'"),
        ("1.5", "int", r"p\[0\] must be an integer, got '1.5'"),
        ("a", "float", r"p\[0\] must be a number, got 'a'"),
        ("maybe", "bool", r"p\[0\] must be true or false, got 'maybe'"),
    ],
)
def test_parse_items_names_the_bad_item(text, kind, match):
    with pytest.raises(ValueError, match=match):
        parse_items("p", text, kind)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-(10**12), 10**12), max_size=20))
def test_list_text_parses_back(values):
    assert parse_items("p", list_text(values), "int") == values


def test_number_bounds_are_only_what_the_browser_holds():
    seed = PATTERNS["random_per_row"].param("seed")
    assert number_bounds(seed) == (-JS_SAFE_INT, JS_SAFE_INT)  # the spec's 0 is checked later
    probability = PATTERNS["random_probability"].param("probability")
    assert number_bounds(probability) == (None, None)


def test_a_huge_list_text_is_refused_before_it_is_split():
    """20 MB of "1, " took 4 s to split before its 4,096-item check."""
    start = time.process_time()
    with pytest.raises(ValueError, match=r"at most 90,112 characters \(4,096 items\), got 20,1"):
        parse_items("vertical_blocks", "1, " * 6_700_000, "int")
    assert time.process_time() - start < 0.05
    with pytest.raises(ValueError, match="must have at most 4096 items, got 4,097"):
        parse_items("vertical_blocks", "1 " * 4097, "int")
    assert len(parse_items("vertical_blocks", "65535, " * 4096, "int")) == 4096
