"""Pattern parameters between a recipe step and the widgets that edit it, both ways. Pure.

Each ``ParamSpec`` kind gets a widget: ``int``/``float`` a number input, ``bool`` a toggle,
``choice`` a select box, ``int_list`` a text field of comma-separated integers. A ``per_head``
parameter also gets a "per head" toggle; when on, a text field takes one value per head.
Values read back are only converted (text to numbers); ``make_pattern`` checks them and its
message names the parameter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from designer.patterns.registry import PATTERNS, ParamSpec
from designer.recipe import MAX_PARAM_ITEMS, RecipeStep
from ui.keys import per_head_key, step_key, values_key

#: Number widgets in the browser hold JavaScript numbers: integers beyond 2**53 - 1 are refused.
JS_SAFE_INT = 2**53 - 1
#: Longest list text read: ``MAX_PARAM_ITEMS`` items of a 20-character number and a separator.
#: The text boxes take no more (``max_chars``), and a longer text is refused before it is split.
MAX_LIST_CHARS = MAX_PARAM_ITEMS * 22

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def number_bounds(spec: ParamSpec) -> tuple[float | None, float | None]:
    """The bounds of a number widget: only what the browser can hold (JavaScript numbers), not
    the spec's range, so that a value out of that range reaches ``make_pattern`` and its
    message instead of being refused by the browser without a word."""
    if spec.kind == "int":
        return -JS_SAFE_INT, JS_SAFE_INT
    return None, None


def list_text(values: Any) -> str:
    """A list as the text a user edits: ``[1, 2]`` → ``"1, 2"``."""
    return ", ".join(_item_text(value) for value in values)


def parse_items(name: str, text: str, kind: str) -> list[Any]:
    """Comma- or space-separated ``text`` as a list of ``kind`` items ("int", "float", "bool",
    "choice"); raises ``ValueError`` naming ``name`` and the item that is not one.

    >>> parse_items("window_blocks", "2, 4 8", "int")
    [2, 4, 8]
    """
    if len(text) > MAX_LIST_CHARS:
        raise ValueError(
            f"{name} must be at most {MAX_LIST_CHARS:,} characters ({MAX_PARAM_ITEMS:,} items), "
            f"got {len(text):,}"
        )
    items = [item for item in text.replace(",", " ").split() if item]
    if len(items) > MAX_PARAM_ITEMS:
        raise ValueError(f"{name} must have at most {MAX_PARAM_ITEMS} items, got {len(items):,}")
    return [_parse_item(f"{name}[{i}]", item, kind) for i, item in enumerate(items)]


def step_widget_values(index: int, step: RecipeStep) -> dict[str, Any]:
    """Every widget value of recipe step ``index``, for a step as it is in the recipe."""
    spec = PATTERNS[step.pattern]
    values: dict[str, Any] = {
        step_key(index, "pattern"): step.pattern,
        step_key(index, "combine"): step.combine,
        step_key(index, "heads"): list(step.heads or ()),
    }
    for param in spec.params:
        value = step.params.get(param.name, param.default)
        varies = param.per_head and isinstance(value, (list, tuple))
        if param.kind == "int_list":
            values[step_key(index, param.name)] = list_text(value)
            continue
        values[step_key(index, param.name)] = value[0] if varies else value
        if param.per_head:
            values[per_head_key(index, param.name)] = varies
            values[values_key(index, param.name)] = list_text(value) if varies else ""
    return values


def step_from_widgets(index: int, state: Mapping[str, Any]) -> RecipeStep:
    """The recipe step that the widgets of step ``index`` describe."""
    pattern = state[step_key(index, "pattern")]
    params: dict[str, Any] = {}
    for param in PATTERNS[pattern].params:
        value = state[step_key(index, param.name)]
        if param.kind == "int_list":
            value = parse_items(param.name, value, "int")
        elif param.per_head and state.get(per_head_key(index, param.name)):
            value = parse_items(param.name, state[values_key(index, param.name)], param.kind)
        params[param.name] = value
    heads = state[step_key(index, "heads")]
    return RecipeStep(
        pattern,
        params,
        heads=tuple(sorted(heads)) if heads else None,
        combine=state[step_key(index, "combine")],
    )


def _item_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _parse_item(name: str, item: str, kind: str) -> Any:
    try:
        if kind == "int":
            return int(item)
        if kind == "float":
            return float(item)
    except ValueError:
        what = "an integer" if kind == "int" else "a number"
        raise ValueError(f"{name} must be {what}, got {item!r}") from None
    if kind == "bool":
        if item.lower() in _TRUE + _FALSE:
            return item.lower() in _TRUE
        raise ValueError(f"{name} must be true or false, got {item!r}")
    return item
