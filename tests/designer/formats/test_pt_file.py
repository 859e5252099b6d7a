import io
import json
import os
import pickle
import time
import zipfile

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from designer.design import Design
from designer.edit import EditOp, Row
from designer.formats import LoadedDesign, load_design, read_design_file, save_design
from designer.formats.packing import pack_blocks
from designer.formats.torch_file import MAX_UNPACKED_BYTES
from designer.layout import Layout
from designer.recipe import Recipe, RecipeStep
from tests.designer.formats.strategies import designs
from tests.factories import random_layout


def saved(content) -> bytes:
    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()


def design_bytes(design) -> bytes:
    buffer = io.BytesIO()
    save_design(design, buffer)
    return buffer.getvalue()


@pytest.fixture
def recipe_design():
    recipe = Recipe(2, 4, 4, 16, steps=(RecipeStep("causal"),), edits=(EditOp("set", Row(0)),))
    return Design(recipe.build(), name="causal", recipe=recipe, start_width=2, causal=True)


@pytest.fixture
def content(recipe_design):
    """What a good file holds, read back with plain torch."""
    return torch.load(io.BytesIO(design_bytes(recipe_design)), weights_only=True)


# --------------------------------------------------------------------------- round trips
@settings(max_examples=100, deadline=None)
@given(designs())
def test_round_trip_is_exact(design):
    assert load_design(design_bytes(design)) == design


def test_paths_and_file_objects(tmp_path, recipe_design):
    path = tmp_path / "design.pt"
    save_design(recipe_design, path)
    assert load_design(path) == recipe_design
    assert load_design(str(path)) == recipe_design
    with open(path, "rb") as file:
        assert load_design(file) == recipe_design
    with open(tmp_path / "other.pt", "wb") as file:
        save_design(recipe_design, file)
    assert load_design(bytearray((tmp_path / "other.pt").read_bytes())) == recipe_design


def test_file_holds_the_documented_plain_dict(content, recipe_design):
    assert set(content) == {
        "format", "version", "layout", "block_size", "seq_len_q", "seq_len_k", "causal",
        "start_width", "name", "created", "modified", "model_shape", "recipe",
    }  # fmt: skip
    assert (content["format"], content["version"]) == ("blocksparse-design", 3)
    assert content["model_shape"] == {"batch": 1, "heads": None, "kv_heads": None,
                                      "head_dim": 128}  # fmt: skip
    bits, shape = content["layout"]["bits"], content["layout"]["shape"]
    assert bits.dtype == torch.uint8 and shape == [2, 4, 4]
    unpacked = np.unpackbits(bits.numpy(), count=2 * 4 * 4).reshape(shape)
    assert np.array_equal(unpacked, recipe_design.layout.to_numpy())
    assert (content["block_size"], content["seq_len_q"], content["seq_len_k"]) == (16, 64, 64)
    recipe_text = content["recipe"].numpy().tobytes().decode("utf-8")
    assert json.loads(recipe_text) == recipe_design.recipe.to_dict()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_bare_tensors_load_deepspeed_style(rng, dtype):
    layout = random_layout(rng, n_heads=3, n_q_blocks=5, n_k_blocks=7)
    three = load_design(saved(layout.blocks.to(dtype)))
    assert three.layout == Layout(layout.blocks, 16) and three.recipe is None
    two = load_design(saved(layout.blocks[1].to(dtype)), block_size=64)
    assert two.layout == Layout(layout.blocks[1:2], 64)


def test_read_design_file_says_whether_the_file_was_bare(rng, recipe_design):
    layout = random_layout(rng, n_heads=2, n_q_blocks=3, n_k_blocks=5)
    bare = read_design_file(saved(layout.to_int64()), bare_block_size=128)
    assert bare == LoadedDesign(bare.design, "bare") and bare.bare
    assert bare.design.layout == Layout(layout.blocks, 128) and bare.design.recipe is None
    assert read_design_file(saved(layout.to_int64())).design.layout.block_size == 16
    for block in (16, 64):  # a design file keeps its own block size, whatever the bare one
        loaded = read_design_file(design_bytes(recipe_design), bare_block_size=block)
        assert loaded == LoadedDesign(recipe_design, "design") and not loaded.bare


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"bare_block_size": 0}, ValueError, r"bare_block_size must be in \[1, 4096\], got 0"),
        ({"bare_block_size": 8192}, ValueError, r"bare_block_size must be .*, got 8192"),
        ({"bare_block_size": 16.0}, TypeError, r"bare_block_size must be an integer, got float"),
        ({"max_bytes": 0}, ValueError, r"max_bytes must be >= 1, got 0"),
    ],
)
def test_read_design_file_checks_its_arguments(recipe_design, kwargs, error, message):
    with pytest.raises(error, match=message):
        read_design_file(design_bytes(recipe_design), **kwargs)


def test_read_design_file_refuses_as_load_design_does(content):
    del content["seq_len_k"]
    data = saved(content)
    with pytest.raises(ValueError, match=r"^design file: design file is missing 'seq_len_k'$"):
        read_design_file(data)
    with pytest.raises(ValueError, match=r"^design file: design file is missing 'seq_len_k'$"):
        load_design(data, block_size=64)


# --------------------------------------------------------------------------- hostile files
class CreatesFile:
    """A pickle whose loading would create ``path``: what a malicious checkpoint does."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_payload_is_live_when_loaded_unsafely(tmp_path):
    marker = tmp_path / "ran"
    torch.load(io.BytesIO(saved(CreatesFile(marker))), weights_only=False).close()
    assert marker.exists(), "the payload must really run code, or the tests below prove nothing"


@pytest.mark.parametrize("wrap", ["zip", "inside_design", "raw_pickle"])
def test_code_payload_never_runs(tmp_path, content, wrap):
    marker = tmp_path / "ran"
    if wrap == "zip":
        data = saved(CreatesFile(marker))
    elif wrap == "inside_design":
        data = saved({**content, "name": CreatesFile(marker)})
    else:
        data = pickle.dumps(CreatesFile(marker))
    message = r"refused: it asks for _?io\.open;" if wrap != "raw_pickle" else "not a torch file"
    with pytest.raises(ValueError, match=message):
        load_design(data)
    assert not marker.exists()
    assert os.listdir(tmp_path) == []


def test_not_torch_files_are_refused():
    for data in (b"", b"hello", b"PK", pickle.dumps({"a": 1})):
        with pytest.raises(
            ValueError, match=r"design file is not a torch file: torch\.save writes"
        ):
            load_design(data)


def test_truncated_files_are_refused(recipe_design):
    data = design_bytes(recipe_design)
    for cut in (1, 30, len(data) // 3, len(data) // 2, len(data) - 22, len(data) - 1):
        with pytest.raises(ValueError, match=r"design file is not a (torch file|complete zip)"):
            load_design(data[:cut])


def test_damaged_archives_are_refused(recipe_design):
    """A sound zip directory over a damaged pickle, or without the tensor data it names."""
    data = design_bytes(recipe_design)
    start = data.find(b"blocksparse-design")
    garbage = data[: start - 40] + b"\xff" * 72 + data[start + 32 :]
    with pytest.raises(ValueError, match=r"refused: its pickle is not plain data \(Unsupported op"):
        load_design(garbage)
    renamed = data.replace(b"archive/data/0", b"archive/data/9")
    with pytest.raises(
        ValueError, match=r"could not be read by torch\.load: RuntimeError: .*data/0"
    ):
        load_design(renamed)


def test_a_billion_element_tensor_is_refused_by_its_bytes(content):
    huge = torch.zeros(1, dtype=torch.int64).expand(1000, 1000, 1000)  # 8 GB if materialised
    for data in (saved(huge), saved({**content, "version": 1, "layout": huge})):
        assert len(data) < 4096, "the file must be small: the size is declared, not stored"
        start = time.perf_counter()
        with pytest.raises(ValueError, match=r"8,000,000,000 bytes \[1000, 1000, 1000\] over a"):
            load_design(data)
        assert time.perf_counter() - start < 2


def test_size_limits_come_before_loading(tmp_path, recipe_design):
    data = design_bytes(recipe_design)
    with pytest.raises(
        ValueError, match=f"design file is more than the limit of {len(data) - 1:,}"
    ):
        load_design(data, max_bytes=len(data) - 1)
    with pytest.raises(ValueError, match="design file is more than the limit"):
        load_design(io.BytesIO(data), max_bytes=100)
    path = tmp_path / "big.pt"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=f"design file is {len(data):,} bytes, more than the lim"):
        load_design(path, max_bytes=100)


def test_zip_bombs_are_refused_by_unpacked_size():
    """A deflated archive may unpack to a bool layout of the largest size, and no more."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data/0", bytes(MAX_UNPACKED_BYTES + 1))
    assert len(buffer.getvalue()) < 200_000
    with pytest.raises(ValueError, match=f"unpacks to {MAX_UNPACKED_BYTES + 1:,} bytes, more than"):
        load_design(buffer.getvalue(), max_bytes=1 << 20)
    pickle = io.BytesIO()
    with zipfile.ZipFile(pickle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", bytes(8 << 20))
    with pytest.raises(ValueError, match="8,388,608-byte pickle, more than the limit"):
        load_design(pickle.getvalue(), max_bytes=1 << 20)


# --------------------------------------------------------------------------- invalid contents
def test_bad_bare_tensors_are_refused():
    cases = [
        (torch.ones(2, 2), "bare layout tensor: layout must hold integers or bools, got dtype"),
        (torch.ones(1, 1, 2, 2, dtype=torch.int64), r"rank 2 \(\[M, N\]\) or 3 .*\[1, 1, 2, 2\]"),
        (torch.tensor([[0, -1], [1, 1]]), r"only 0 and 1, got values in \[-1, 1\]"),
        (torch.tensor([[0, 2]]), r"only 0 and 1, got values in \[0, 2\]"),
        (torch.zeros(0, 3, dtype=torch.int64), r"at least one head and block, got \[1, 0, 3\]"),
        ([1, 2], "design file must hold a dict or a layout tensor, got list"),
    ]
    for value, message in cases:
        with pytest.raises(ValueError, match=message):
            load_design(saved(value))


V1 = {"version": 1}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "other"}, "design file: design file format must be 'blocksparse-design'"),
        (
            {"version": 5},
            "design file version 5 is not supported; this designer reads version 1, 2, 3 and 4",
        ),
        ({"version": "1"}, "design file version must be an integer, got str"),
        ({"extra": 1}, r"design file has unknown keys \['extra'\]"),
        ({**V1, "layout": [[1]]}, "layout must be a tensor, got list"),
        (
            {**V1, "layout": torch.ones(2, 4, 4)},
            "layout must hold integers or bools, got dtype torch.fl",
        ),
        (
            {**V1, "layout": torch.ones(4, 4, dtype=torch.int64)},
            r"rank 3 \(\[H, M, N\]\), got shape",
        ),
        ({**V1, "layout": torch.full((2, 4, 4), -1)}, r"only 0 and 1, got values in \[-1, -1\]"),
        ({"block_size": 0}, r"block_size must be in \[1, 4096\], got 0"),
        ({"seq_len_q": 100}, "seq_len_q = 100 does not match the layout: 4 q_blocks x block_size"),
        ({"seq_len_k": 32}, r"seq_len_k = 32 does not match .* 4 k_blocks x block_size 16 = 64"),
        ({"seq_len_k": 64.0}, "seq_len_k must be an integer, got float"),
        ({"name": ""}, "name must be 1 to 80 characters, not only spaces"),
        ({"causal": 1}, "causal must be True or False, got int 1"),
        ({"start_width": -1}, r"start_width must be in \[0, 65536\], got -1"),
        ({"created": "x" * 65}, "created must be a timestamp string of at most 64 characters"),
        ({"modified": None}, "modified must be a timestamp string"),
        ({"recipe": "causal"}, "recipe must be a tensor, got str"),
        ({"recipe": torch.tensor([1.0])}, r"recipe must be a uint8 \[n\] tensor of JSON"),
        ({"recipe": torch.tensor(list(b"[1, 2"), dtype=torch.uint8)}, "recipe is not valid JSON"),
        (
            {"layout": pack_blocks(Layout(torch.ones(2, 4, 4, dtype=torch.bool), 16))},
            "recipe does not rebuild the layout",
        ),
        (
            {"layout": pack_blocks(Layout(torch.ones(3, 4, 4, dtype=torch.bool), 16))},
            r"builds a \[2, 4, 4\] layout with",
        ),
        ({"block_size": 32, "seq_len_q": 128, "seq_len_k": 128}, "with block_size 16, but the"),
    ],
)
def test_bad_design_files_are_refused(content, change, message):
    with pytest.raises(ValueError, match=message):
        load_design(saved({**content, **change}))


def test_missing_key_is_named(content):
    del content["seq_len_k"]
    with pytest.raises(ValueError, match="design file: design file is missing 'seq_len_k'"):
        load_design(saved(content))


def test_version_1_files_still_load(recipe_design, content):
    """Version 1: an int64 layout and the recipe as a dict in the pickle."""
    old = {
        **content,
        "version": 1,
        "layout": recipe_design.layout.to_int64(),
        "recipe": recipe_design.recipe.to_dict(),
    }
    assert load_design(saved(old)) == recipe_design
    with pytest.raises(ValueError, match="recipe must be a dict, got str"):
        load_design(saved({**old, "recipe": "causal"}))


def test_recipe_mismatch_counts_the_blocks(recipe_design, content):
    flipped = recipe_design.layout.blocks.clone()
    flipped[1, 3, 0] = ~flipped[1, 3, 0]
    packed = pack_blocks(Layout(flipped, 16))
    with pytest.raises(ValueError, match="recipe does not rebuild the layout: 1 of 32 blocks diff"):
        load_design(saved({**content, "layout": packed}))


def test_block_size_argument_must_agree_with_the_file(recipe_design):
    data = design_bytes(recipe_design)
    assert load_design(data, block_size=16) == recipe_design
    with pytest.raises(
        ValueError, match="block_size=64 was given, but the design file says block_size=16"
    ):
        load_design(data, block_size=64)


def test_bad_arguments_are_refused(recipe_design, tmp_path):
    with pytest.raises(TypeError, match="path_or_file must be bytes, a path or a binary file"):
        load_design(123)
    (tmp_path / "a.pt").write_bytes(design_bytes(recipe_design))
    with open(tmp_path / "a.pt") as text_file, pytest.raises(TypeError, match="binary mode"):
        load_design(text_file)
    with pytest.raises(TypeError, match="design must be a Design, got Layout"):
        save_design(recipe_design.layout, tmp_path / "b.pt")
    with pytest.raises(TypeError, match="path_or_file must be a path or a binary file object"):
        save_design(recipe_design, 5)
    with pytest.raises(ValueError, match=r"max_bytes must be >= 1, got 0"):
        load_design(b"", max_bytes=0)
    assert sorted(os.listdir(tmp_path)) == ["a.pt"]


def test_the_model_shape_round_trips_and_version_2_files_read_with_the_default(
    content, recipe_design
):
    from dataclasses import replace

    from designer.model_shape import ModelShape

    shaped = replace(recipe_design, model_shape=ModelShape(batch=8, kv_heads=1, head_dim=64))
    buffer = io.BytesIO()
    save_design(shaped, buffer)
    assert load_design(buffer.getvalue()) == shaped
    version_2 = {key: value for key, value in content.items() if key != "model_shape"}
    assert load_design(saved({**version_2, "version": 2})).model_shape == ModelShape()
    with pytest.raises(ValueError, match="design file is missing 'model_shape'"):
        load_design(saved({**version_2, "version": 3}))
