"""Every payload that once escaped or stalled the loaders: each is a short ``ValueError``, fast.

Plus a fuzz test: mutated design files and JSON recipes load or fail the same way.
"""

from __future__ import annotations

import io
import json
import os
import resource
import time
import zipfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from designer.design import Design
from designer.formats import read_design_file, recipe_to_json, save_design
from designer.formats.reader import MAX_FILE_BYTES
from designer.formats.torch_file import MAX_PICKLE_BYTES, MAX_UNPACKED_BYTES
from designer.recipe import Recipe, RecipeStep
from designer.validate import MAX_MESSAGE_CHARS

#: What one bad file may cost: seconds, and growth of the process's peak memory.
SECONDS = 2.0
PEAK_BYTES = 512 << 20


def saved(content) -> bytes:
    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()


def with_pickle(pickled: bytes, template: bytes | None = None) -> bytes:
    """``template`` (a torch file) with ``data.pkl`` replaced: payloads torch.save cannot write."""
    source = zipfile.ZipFile(io.BytesIO(template or saved({})))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for entry in source.infolist():
            data = pickled if entry.filename.endswith("data.pkl") else source.read(entry)
            archive.writestr(entry.filename, data)
    return out.getvalue()


def nested(depth: int) -> bytes:
    """A pickle of a list ``depth`` levels deep, built by opcodes (no recursion needed)."""
    return b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."


def refused(data, match: str | None = None, **kwargs) -> str:
    """Load ``data``; it must fail with a short ValueError within the time and memory budget."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    with pytest.raises(ValueError, match=match) as caught:
        read_design_file(data, **kwargs)
    assert time.perf_counter() - start < SECONDS
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before < PEAK_BYTES
    message = str(caught.value)
    assert len(message) <= MAX_MESSAGE_CHARS, message[:200]
    return message


@pytest.fixture(scope="module")
def design_content():
    recipe = Recipe(2, 4, 4, 16, steps=(RecipeStep("causal"),))
    buffer = io.BytesIO()
    save_design(Design(recipe.build(), name="ok", recipe=recipe), buffer)
    return torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)


def test_a_sparse_layout_is_refused():
    refused(saved(torch.eye(3, dtype=torch.int64)[None].to_sparse()), "dense \\(strided\\)")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_quantized_layout_is_refused():
    tensor = torch.quantize_per_tensor(torch.ones(1, 2, 2), 1.0, 0, torch.quint8)
    refused(saved(tensor), "must not be quantized")


def test_a_meta_tensor_is_refused():
    refused(saved(torch.zeros(1, 2, 2, dtype=torch.int64, device="meta")), "CPU tensor")


@pytest.mark.parametrize("key", ["format", "block_size", "name"])
def test_values_nested_100000_deep_are_refused(design_content, key):
    marker = b"X\x04\x00\x00\x00MARK"  # the string's opcode, to find and replace
    content = {**design_content, key: "MARK"}
    data = saved(content)
    pickled = zipfile.ZipFile(io.BytesIO(data)).read("archive/data.pkl")
    deep = nested(100_000)[2:-1]
    assert marker in pickled
    message = refused(with_pickle(pickled.replace(marker, deep), data))
    assert f"{key} must be" in message or "format must be" in message, message


def test_a_bare_nested_pickle_is_refused():
    refused(with_pickle(nested(100_000)), "design file must hold a dict or a layout tensor")


def test_a_5m_item_list_is_refused_by_the_pickle_size(design_content):
    message = refused(saved({**design_content, "block_size": list(range(5_000_000))}))
    assert f"limit of {MAX_PICKLE_BYTES:,}" in message


def test_a_long_value_gives_a_short_message(design_content):
    refused(saved({**design_content, "format": "x" * 1_000_000}), "format must be")
    refused(saved({**design_content, "name": ["y" * 100] * 1000}), "name must be")


def test_a_json_recipe_with_a_huge_list_gives_a_short_message():
    content = json.loads(JSON)
    content["recipe"]["block_size"] = list(range(1_900_000))
    data = json.dumps(content).encode()
    assert len(data) < 16 << 20
    refused(data, r"block_size must be an integer, got list \[0, 1, 2, 3, \.\.\.\]")


def test_an_expanded_tensor_is_refused_by_its_bytes(design_content):
    huge = torch.ones(1, dtype=torch.int64).expand(4, 4096, 4096)
    for data in (saved(huge), saved({**design_content, "version": 1, "layout": huge})):
        assert len(data) < 4096
        refused(data, r"over a storage of 8 bytes \(an expanded view\)")


def test_packed_bits_must_match_the_shape(design_content):
    layout = dict(design_content["layout"])
    short = {**layout, "bits": layout["bits"][:1]}
    refused(saved({**design_content, "layout": short}), r"layout bits must be uint8 \[4\]")
    big = {**layout, "shape": [1024, 65536, 65536]}
    refused(saved({**design_content, "layout": big}), "must be <= 67,108,864")
    spread = {**layout, "bits": torch.zeros(1, dtype=torch.uint8).expand(4)}
    refused(saved({**design_content, "layout": spread}), "expanded view")


def test_legacy_streams_never_reach_torch():
    legacy = io.BytesIO()
    torch.save(torch.ones(2, 2, dtype=torch.int64), legacy, _use_new_zipfile_serialization=False)
    empty_zip = io.BytesIO()
    zipfile.ZipFile(empty_zip, "w").close()
    for data in (legacy.getvalue(), legacy.getvalue() + empty_zip.getvalue()):
        refused(data, "legacy torch streams are not read")
    refused(b"junk" + saved(torch.ones(1, 1, 1)), "not a torch file")


def test_a_deflated_zip_of_zeros_is_refused():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data/0", bytes(MAX_UNPACKED_BYTES + 1))
    assert len(buffer.getvalue()) < 200_000
    refused(buffer.getvalue(), "unpacks to")


def test_a_zip_of_an_unknown_version_is_refused():
    """Found by the fuzz test below: zipfile raised NotImplementedError for it."""
    data = bytearray(PT)
    directory = data.find(b"PK\x01\x02")
    data[directory + 6 : directory + 8] = (64).to_bytes(2, "little")  # version needed: 6.4
    refused(bytes(data), "not a complete zip archive")


def test_only_regular_files_are_opened(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/zero", tmp_path):
        refused(path, "must be a regular file")


def test_files_over_the_limit_are_refused_before_reading(tmp_path):
    path = tmp_path / "big.pt"
    with open(path, "wb") as file:
        file.truncate(MAX_FILE_BYTES + 1)  # sparse: costs no disk
    refused(path, "more than the limit")


# --------------------------------------------------------------------------- fuzzing
def good_files():
    recipe = Recipe(
        2, 6, 5, 32,
        steps=(RecipeStep("sliding_window", {"window_blocks": 2}),
               RecipeStep("random_per_row", {"seed": 4}, combine="union")),
    )  # fmt: skip
    design = Design(recipe.build(), name="fuzz", recipe=recipe, causal=True)
    buffer = io.BytesIO()
    save_design(design, buffer)
    return buffer.getvalue(), recipe_to_json(design).encode()


PT, JSON = good_files()


def outcome(data: bytes) -> None:
    start = time.perf_counter()
    try:
        loaded = read_design_file(data)
    except ValueError as error:
        assert len(str(error)) <= MAX_MESSAGE_CHARS
    else:
        assert isinstance(loaded.design, Design)
    assert time.perf_counter() - start < SECONDS


def mutations(original: bytes):
    positions = st.integers(0, len(original) - 1)
    flips = st.lists(st.tuples(positions, st.integers(0, 255)), min_size=1, max_size=8)
    cuts = st.tuples(positions, positions)

    @st.composite
    def mutated(draw):
        data = bytearray(original)
        if draw(st.booleans()):
            for at, value in draw(flips):
                data[at] = value
        else:
            start, stop = sorted(draw(cuts))
            data[start:stop] = draw(st.binary(max_size=64))
        return bytes(data)

    return mutated()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations(PT))
def test_mutated_design_files_load_or_fail_shortly(data):
    outcome(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations(JSON))
def test_mutated_json_recipes_load_or_fail_shortly(data):
    outcome(data)


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=20,
    ),
    st.sampled_from(["format", "version", "name", "recipe", "block_size", "causal"]),
)
def test_json_recipes_with_any_value_load_or_fail_shortly(value, key):
    content = json.loads(JSON)
    content[key] = value
    outcome(json.dumps(content).encode())
