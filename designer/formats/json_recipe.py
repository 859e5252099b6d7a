"""A design as a JSON recipe: its settings and how to regenerate its layout, no blocks stored.

Layout of the text (version 2)::

    {"format": "blocksparse-design-recipe", "version": 2, "name": str, "causal": bool,
     "start_width": int | null, "created": str, "modified": str,
     "model_shape": {"batch": int, "heads": int | null, "kv_heads": int | null, "head_dim": int},
     "recipe": Recipe.to_dict()}

Version 1 is the same without ``model_shape`` (it reads with the default shape).

Reading is strict: bounded size, standard JSON only (no ``NaN``/``Infinity``, no repeated keys),
every key and value checked, and the layout is rebuilt from the recipe (nothing is evaluated).
"""

from __future__ import annotations

import json
from typing import Any

from designer.design import Design
from designer.formats.settings import (
    SETTING_KEYS,
    SHAPE_KEY,
    check_rebuilds,
    check_version,
    design_from_settings,
    design_settings,
)
from designer.recipe import recipe_from_dict
from designer.recipe_cost import READ_NS_PER_VALUE
from designer.recipe_size import MAX_JSON_VALUES
from designer.validate import check_keys, error_context

FORMAT = "blocksparse-design-recipe"
VERSION = 2
READ_VERSIONS = (1, 2)
#: Longest JSON text accepted, in characters (a painted selection of a million cells fits).
MAX_JSON_CHARS = 16 << 20


def recipe_to_json(design: Design) -> str:
    """The design's settings and recipe as indented JSON (compact when indenting would pass
    ``MAX_JSON_CHARS``); the recipe must rebuild its layout, and a text a reader would refuse
    raises ``ValueError`` instead.

    >>> from designer.recipe import Recipe, RecipeStep
    >>> recipe = Recipe(1, 4, 4, 64, steps=(RecipeStep("causal"),))
    >>> text = recipe_to_json(Design(recipe.build(), name="tril", recipe=recipe))
    >>> design_from_json(text).layout == recipe.build()
    True
    """
    settings = design_settings(design)
    if design.recipe is None:
        raise ValueError(
            "design has no recipe, so JSON cannot regenerate it; save it as a .pt file instead"
        )
    check_rebuilds(design.recipe, design.layout)
    content = {"format": FORMAT, "version": VERSION, **settings, "recipe": design.recipe.to_dict()}
    text = json.dumps(content, indent=2)
    if len(text) > MAX_JSON_CHARS:
        text = json.dumps(content, separators=(",", ":"))
    if len(text) > MAX_JSON_CHARS:
        raise ValueError(
            f"JSON recipe would be {len(text):,} characters, more than the {MAX_JSON_CHARS:,} a "
            f"reader takes; save the design as a .pt file instead"
        )
    return text


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"JSON must hold finite numbers only, got {name}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        repeated = sorted({key for key in keys if keys.count(key) > 1})
        raise ValueError(f"JSON repeats the keys {repeated}")
    return dict(pairs)


def json_values(text: str | bytes) -> int:
    """How many values a JSON text holds at most (its commas + 1), counted at C speed."""
    return text.count("," if isinstance(text, str) else b",") + 1


def parse_json(text: str | bytes, what: str) -> Any:
    """Strict, bounded ``json.loads``: UTF-8, at most ``MAX_JSON_CHARS`` characters and
    ``MAX_JSON_VALUES`` values (refused before parsing), no ``NaN``, no repeated keys, not nested
    past the interpreter's limit; ``ValueError`` naming ``what`` otherwise."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{what} must be UTF-8 text: {error}") from error
    if not isinstance(text, str):
        raise TypeError(f"text must be a str or bytes, got {type(text).__name__}")
    if len(text) > MAX_JSON_CHARS:
        raise ValueError(
            f"{what} has {len(text):,} characters, more than the limit of {MAX_JSON_CHARS:,}"
        )
    if (values := json_values(text)) > MAX_JSON_VALUES:
        raise ValueError(
            f"{what} holds about {values:,} values, more than the limit of {MAX_JSON_VALUES:,} "
            f"(about {values * READ_NS_PER_VALUE / 1e9:.1f} s to read)"
        )
    try:
        return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as error:
        raise ValueError(f"{what} is not valid JSON: {error}") from error
    except RecursionError as error:
        raise ValueError(f"{what} nests too deeply") from error


def design_from_json(text: str | bytes) -> Design:
    """Read a design written by ``recipe_to_json``; raises ``ValueError`` saying what is wrong."""
    content = parse_json(text, "JSON recipe")
    read_ns = json_values(text) * READ_NS_PER_VALUE
    with error_context("JSON recipe", as_value_error=True):
        required = ("format", "version", *SETTING_KEYS, "recipe")
        check_keys("design", content, required, (SHAPE_KEY,))
        if check_version("design", content, FORMAT, READ_VERSIONS) >= 2:
            check_keys("design", content, (*required, SHAPE_KEY))
        recipe = recipe_from_dict(content["recipe"], read_ns=read_ns)
        return design_from_settings(content, recipe.build(), recipe)
