"""The inputs ``bounded_cost.py`` sends down the app's whole path, as plain values.

Each ``Case`` is one input and how it arrives: an upload, a library read (``read_design_file``
with torch's default threads, as a user's script calls it), a widget change, lasso strokes, a
start on a damaged data folder, the downloads of a large design, or a library action. Three
groups:

- **allowed**: the costliest inputs the loaders accept (the largest design file, recipes just
  under the build budget);
- **refused**: payloads that once stalled the server, which must fail fast;
- **probe**: the hostile and heavy inputs of issue 26, each named after its item there; a probe
  may be accepted or refused, but either within its target.

Inputs are made from public APIs only, so the same cases run on an older checkout for a
before/after comparison.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass, field
from typing import Any

LARGEST = (4, 4096, 4096)


@dataclass
class Case:
    """One input: ``kind`` says how it arrives, ``expect`` what must happen to it (``None``:
    accepted or refused, each within its target), ``options`` the kind's settings."""

    name: str
    group: str
    kind: str
    expect: str | None = None
    data: bytes = b""
    file_name: str = "case.pt"
    options: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- files
def recipe_text(n_heads, n_q, n_k, steps, edits=(), *, block_size=16, name="limit") -> bytes:
    """A JSON recipe file of ``(pattern, params)`` steps (union) and edit dicts."""
    recipe = {
        "n_heads": n_heads, "n_q_blocks": n_q, "n_k_blocks": n_k, "block_size": block_size,
        "steps": [{"pattern": p, "params": params, "heads": None, "combine": "union"}
                  for p, params in steps],
        "edits": list(edits),
    }  # fmt: skip
    content = {
        "format": "blocksparse-design-recipe", "version": 1, "name": name, "causal": False,
        "start_width": None, "created": "2026-11-30T00:00:00+00:00",
        "modified": "2026-11-30T00:00:00+00:00", "recipe": recipe,
    }  # fmt: skip
    return json.dumps(content).encode()


def torch_bytes(content: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()


def random_design_file(shape, density: float, seed: int = 0, name: str = "largest") -> bytes:
    """A ``.pt`` design file of ``shape`` with blocks drawn at ``density``."""
    import torch

    from designer.design import Design
    from designer.formats import save_design
    from designer.layout import Layout

    generator = torch.Generator().manual_seed(seed)
    design = Design(Layout(torch.rand(shape, generator=generator) < density, 16), name=name)
    buffer = io.BytesIO()
    save_design(design, buffer)
    return buffer.getvalue()


def _fits(text: bytes) -> bool:
    """Whether the recipe in ``text`` passes the build estimate (nothing is built)."""
    from designer.edit import edit_from_dict
    from designer.recipe import Recipe, RecipeStep

    recipe = json.loads(text)["recipe"]
    try:
        Recipe(
            recipe["n_heads"], recipe["n_q_blocks"], recipe["n_k_blocks"], recipe["block_size"],
            tuple(RecipeStep(**step) for step in recipe["steps"]),
            tuple(edit_from_dict(edit) for edit in recipe["edits"]),
        )  # fmt: skip
    except ValueError:
        return False
    return True


def _most(make, high: int) -> bytes:
    """``make(n)`` for the largest ``n <= high`` that the estimate allows (a binary search)."""
    low = 0
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if _fits(make(middle)) else (low, middle - 1)
    return make(low)


# --------------------------------------------------------------------------- groups
def allowed_cases() -> list[Case]:
    """The costliest files the loaders accept, uploaded."""
    from designer.recipe_cost import NS_PER_CELL

    cases = [
        Case(
            "largest design file (4 x 4096^2, 5 %, 8 MiB)", "allowed", "upload", "accepted",
            random_design_file(LARGEST, 0.05), "largest.pt", {"analyse": True},
        )
    ]  # fmt: skip
    costliest = sorted(NS_PER_CELL, key=NS_PER_CELL.get)[-4:]
    per_head = {"different_layout_per_head": True}
    for name, params in [*((name, {}) for name in costliest), ("deepspeed_fixed", per_head)]:
        text = _most(
            lambda h, name=name, params=params: recipe_text(h, 2048, 2048, [(name, params)]), 16
        )
        cases.append(Case(f"{name}, most heads allowed at 2048^2", "allowed", "upload",
                          "accepted", text, "limit.json"))  # fmt: skip
    bigbird = _most(
        lambda r: recipe_text(16, 2048, 2048, [("deepspeed_bigbird", {"num_random_blocks": r})]),
        2047,
    )
    cases.append(Case("BigBird, most random blocks allowed, 16 x 2048^2", "allowed", "upload",
                      "accepted", bigbird, "bigbird.json"))  # fmt: skip
    band = {"op": "edit", "action": "toggle", "region": {"kind": "band", "low": -4, "high": 4},
            "heads": None}  # fmt: skip
    bands = _most(lambda n: recipe_text(16, 2048, 2048, [("causal", {})], [band] * n), 200)
    cases.append(Case("most full-grid band edits allowed, 16 x 2048^2", "allowed", "upload",
                      "accepted", bands, "bands.json"))  # fmt: skip
    transpose = recipe_text(*LARGEST, [("causal", {})], [{"op": "transpose"}])
    cases.append(Case("one transpose, then a copy of the largest grid", "allowed", "upload",
                      "accepted", transpose, "transpose.json"))  # fmt: skip
    window = recipe_text(16, 1024, 1024, [("token_sliding_window", {"window_tokens": 1000})],
                         block_size=64)  # fmt: skip
    cases.append(Case("token window of 1000 over 16 x 65,536 tokens (48,656 partial blocks)",
                      "allowed", "upload", "accepted", window, "tokens.json"))  # fmt: skip
    return cases


def refused_cases() -> list[Case]:
    """Payloads that once stalled the server or escaped as tracebacks, uploaded."""
    import torch

    bigbird = {"num_random_blocks": 2047, "different_layout_per_head": True}
    step = ("sliding_window", {"window_blocks": 3})
    band = {"op": "edit", "action": "set", "heads": None,
            "region": {"kind": "band", "low": 0, "high": 0}}  # fmt: skip
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data/0", bytes(512 << 20))
    files = {
        "506-byte BigBird recipe": recipe_text(16, 2048, 2048, [("deepspeed_bigbird", bigbird)]),
        "256 steps at 16 x 2048^2": recipe_text(16, 2048, 2048, [step] * 256),
        "200 band edits at 16 x 2048^2": recipe_text(16, 2048, 2048, [], [band] * 200),
        "stride-0 tensor, 2 KB": torch_bytes(
            torch.ones(1, dtype=torch.int64).expand(16, 2048, 2048)
        ),
        "5M-item block_size list": torch_bytes(
            {"format": "blocksparse-design", "block_size": list(range(5_000_000))}
        ),
        "512 MiB deflated zip of zeros": bomb.getvalue(),
        "token NATTEN past the partial-mask cap, 16 x 65,536 tokens": recipe_text(
            16, 1024, 1024, [("token_natten", {"width": 256})], block_size=64
        ),
    }
    return [Case(name, "refused", "upload", "refused", data) for name, data in files.items()]


def _disc_strokes(n: int, size: int, radius: int) -> list[dict[str, Any]]:
    """``n`` lasso strokes, each a disc of about ``pi * radius**2`` cells on head 0."""
    return [
        {"row": size // 2 + (2 * i - n + 1) * radius // 4, "col": size // 2, "radius": radius,
         "action": "toggle" if i else "set"}
        for i in range(n)
    ]  # fmt: skip


def _cell_edit(cells: int, size: int, seed: int) -> dict[str, Any]:
    import random

    rng = random.Random(seed)
    cell_list = [[rng.randrange(size), rng.randrange(size)] for _ in range(cells)]
    return {"op": "edit", "action": "set", "heads": [0],
            "region": {"kind": "cells", "cells": cell_list}}  # fmt: skip


def probe_cases() -> list[Case]:
    """Issue 26's inputs: each must be handled within its target, with a clear message."""
    import torch

    cases = [
        Case("26.1 two 0.9M-cell lasso strokes on 1 x 2048^2", "probe", "lasso", "accepted",
             options={"start": recipe_text(1, 2048, 2048, [("causal", {})], name="lasso").decode(),
                      "strokes": _disc_strokes(2, 2048, 535)}),
        Case("26.2 downloads of the largest design (4 x 4096^2, 5 %)", "probe", "export",
             "accepted", random_design_file(LARGEST, 0.05), "largest.pt"),
        Case("26.2 394-byte dilated-window recipe, 1 x 1024 x 65536", "probe", "upload", None,
             recipe_text(1, 1024, 65536, [("dilated_window", {})], name="wide"), "wide.json"),
        Case("26.2 8 MiB .pt of the largest design at 50 %", "probe", "upload", "accepted",
             random_design_file(LARGEST, 0.5), "half.pt", {"analyse": True}),
        Case("26.3 16 MB recipe of cell lists (past the cell limit)", "probe", "upload",
             "refused",
             recipe_text(1, 2048, 2048, [("causal", {})], [_cell_edit(1_280_000, 2048, 1)]),
             "cells.json"),
        Case("26.3 15 MB recipe of cell lists (within the limits)", "probe", "upload", None,
             recipe_text(1, 2048, 2048, [("causal", {})],
                         [_cell_edit(560_000, 2048, 2), _cell_edit(560_000, 2048, 3)]),
             "cells.json"),
    ]  # fmt: skip
    many_heads = recipe_text(
        1024, 16, 16, [("causal", {})],
        [{"op": "edit", "action": "toggle", "region": {"kind": "row", "row": i % 16},
          "heads": list(range(1024))} for i in range(3000)],
        name="many",
    )  # fmt: skip
    cases += [
        Case("26.3 3,000 edits x 1,024 heads, uploaded", "probe", "upload", None, many_heads,
             "many.json"),
        Case("26.3 3,000 edits x 1,024 heads, read by a script (default threads)", "probe",
             "library", None, many_heads, "many.json"),
        Case("26.2 8 MiB .pt at 50 %, read by a script (default threads)", "probe", "library",
             "accepted", random_design_file(LARGEST, 0.5), "half.pt"),
        Case("26.3 20 MB in a list-parameter text box", "probe", "widget", "refused",
             options={"start": recipe_text(1, 64, 64, [("vertical_slash", {})],
                                           name="slash").decode(),
                      "widget": "text_input", "key": "step0_vertical_blocks",
                      "value": "1, " * 6_700_000}),
        Case("26.6 step message quoting an image (Markdown)", "probe", "widget", "refused",
             options={"start": recipe_text(1, 64, 64, [("vertical_slash", {})],
                                           name="slash").decode(),
                      "widget": "text_input", "key": "step0_vertical_blocks",
                      "value": "![p](http://127.0.0.1:9/p.png)"}),
        Case("26.6 design named :material/home:", "probe", "widget", "accepted",
             options={"widget": "text_input", "key": "design_name",
                      "value": ":material/home: :red[x] :smile:"}),
        Case("26.2 the parameter change that makes 1 x 1024 x 65536 (dilated window)", "probe",
             "widget", None,
             options={"start": recipe_text(1, 1024, 1024, [("dilated_window", {})],
                                           name="widen").decode(),
                      "widget": "number_input", "key": "seq_len_k", "value": 65536 * 16}),
    ]  # fmt: skip
    for name, setup, env in (
        ("26.5 a directory named x.pt in autosave/", "autosave_directory", {}),
        ("26.5 a read-only data folder holding a stale .tmp", "read_only_stale_tmp", {}),
        ("26.5 BSD_AUTOSAVE_DAYS=0", None, {"BSD_AUTOSAVE_DAYS": "0"}),
        ("26.5 BSD_AUTOSAVE_DAYS=30d", None, {"BSD_AUTOSAVE_DAYS": "30d"}),
        ("26.5 BSD_AUTOSAVE_DAYS=nan", None, {"BSD_AUTOSAVE_DAYS": "nan"}),
    ):
        cases.append(Case(name, "probe", "startup", "accepted",
                          options={"setup": setup, "env": env}))  # fmt: skip
    cases += [
        Case(
            "26.6 delete from a read-only library",
            "probe",
            "library_ui",
            "refused",
            options={"action": "delete", "read_only": True, "names": ["kept"]},
        ),
        Case(
            "26.6 80-character CJK name",
            "probe",
            "library_ui",
            None,
            options={"action": "save", "name": "設計" * 40},
        ),
        Case(
            "26.6 look-alike names (ﬁle / file, Ａ / A)",
            "probe",
            "library_ui",
            None,
            options={"action": "save_twice", "names": ["ﬁle", "file", "Ａ", "A"]},
        ),
        Case(
            "26.6 restore of an unreadable autosave (no server paths)",
            "probe",
            "startup",
            "accepted",
            options={"setup": "broken_autosave", "env": {}},
        ),
        Case(
            "26.6 NUL in an uploaded file name",
            "probe",
            "upload",
            None,
            torch_bytes(torch.eye(4, dtype=torch.int64)),
            "a\x00b.pt",
        ),
    ]
    for dtype in (torch.uint16, torch.uint32, torch.uint64):
        cases.append(
            Case(f"26.6 0/1 layout stored as {str(dtype).removeprefix('torch.')}", "probe",
                 "upload", "accepted", torch_bytes(torch.eye(8, dtype=torch.uint8).to(dtype)[None]),
                 "wide_dtype.pt")
        )  # fmt: skip
    return cases


def model_file(designs, n_layers: int = 32, name: str = "model") -> bytes:
    """A model design file giving ``designs`` to consecutive runs of layers."""
    from designer.formats.model_file import model_file_bytes
    from designer.model_design import ModelDesign

    model = ModelDesign.uniform(name, n_layers, designs[0])
    for i, design in enumerate(designs[1:], 1):
        model = model.assign(i, i, design)
    return model_file_bytes(model)


def model_cases() -> list[Case]:
    """Model design files: the largest the reader accepts, and recipes that are each within
    the build budget but together pass it, which must be refused before any is built."""
    import json

    import torch

    from designer.design import Design
    from designer.formats import read_design_file
    from designer.recipe import Recipe, RecipeStep

    def largest(seed: int) -> Design:
        return read_design_file(random_design_file(LARGEST, 0.05, seed, f"largest {seed}")).design

    small = [Design(read_design_file(recipe_text(2, 64, 64, [("causal", {})])).design.layout,
                    name=f"d{i}", start_width=i) for i in range(3)]  # fmt: skip
    costly = Recipe(4, 2048, 2048, 16, steps=(RecipeStep("random_per_row", {"seed": 1}),))
    text = bytearray(json.dumps(costly.to_dict()).encode())
    content = torch.load(io.BytesIO(model_file(small)), weights_only=True)
    for stored in content["designs"]:
        stored["recipe"] = torch.frombuffer(text, dtype=torch.uint8)
    return [
        Case("largest model design file (two 4 x 4096^2 designs at 5 %, the cell limit)",
             "allowed",
             "model_upload", "accepted", model_file([largest(0), largest(1)]), "largest.model.pt"),
        Case("three recipes of 1.3 s each in one model file", "refused", "model_upload",
             "refused", torch_bytes(content), "costly.model.pt"),
    ]  # fmt: skip


def snapshot_cases() -> list[Case]:
    """Snapshot links: one of the largest design, and ids a link could be made to carry."""
    cases = [
        Case("snapshot link of the largest design (4 x 4096^2, 5 %)", "allowed", "snapshot",
             "accepted", random_design_file(LARGEST, 0.05), "largest.pt"),
    ]  # fmt: skip
    for name, snapshot_id in (
        ("a path as a snapshot id", "../../autosave/x"),
        ("a 100 KB snapshot id", "A" * 100_000),
        ("an unknown snapshot id", "A" * 22),
    ):
        cases.append(Case(f"snapshot link: {name}", "refused", "snapshot", "refused",
                          options={"id": snapshot_id}))  # fmt: skip
    return cases


def all_cases() -> list[Case]:
    return [*allowed_cases(), *refused_cases(), *probe_cases(), *model_cases(), *snapshot_cases()]
