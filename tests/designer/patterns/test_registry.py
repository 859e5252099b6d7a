import dataclasses
import hashlib
import json
import random
import re
from pathlib import Path

import pytest
import torch

from designer import patterns
from designer.layout import Layout
from designer.patterns import PATTERNS, make_pattern
from designer.patterns.registry import collect_specs

#: Every pattern's spec and a hash of its default layout at four shapes (block 32), as they were
#: when the specs lived in catalogue modules (commit 0d49d73): the move changed no pattern.
REGISTERED = json.loads((Path(__file__).parent / "registered_patterns.json").read_text())

GENERATOR_NAMES = [name for name, spec in PATTERNS.items() if spec.family == "generator"]
DEEPSPEED_NAMES = [name for name, spec in PATTERNS.items() if spec.family == "deepspeed"]
RANDOM_NAMES = [name for name, spec in PATTERNS.items() if spec.random]

#: The DeepSpeed class behind each DeepSpeed entry.
CONFIGS = {
    "deepspeed_dense": patterns.DenseSparsityConfig,
    "deepspeed_fixed": patterns.FixedSparsityConfig,
    "deepspeed_variable": patterns.VariableSparsityConfig,
    "deepspeed_bigbird": patterns.BigBirdSparsityConfig,
    "deepspeed_longformer": patterns.BSLongformerSparsityConfig,
    "deepspeed_local_sliding_window": patterns.LocalSlidingWindowSparsityConfig,
}


def defaults(name):
    return {param.name: param.default for param in PATTERNS[name].params}


def test_catalogue_covers_every_family():
    assert set(GENERATOR_NAMES) == {
        "causal",
        "sliding_window",
        "dilated_window",
        "global_tokens",
        "attention_sinks",
        "random_per_row",
        "random_probability",
        "block_diagonal",
        "prefix_lm",
        "packed_documents",
        "vertical_slash",
        "neighborhood_2d",
    }
    assert set(DEEPSPEED_NAMES) == set(CONFIGS)
    assert {name for name, spec in PATTERNS.items() if spec.family == "token"} == {
        "token_sliding_window",
        "token_dilated_window",
        "token_prefix_lm",
        "token_documents",
        "token_causal_documents",
        "token_global",
        "token_sinks",
        "token_natten",
        "token_tiled_natten",
        "token_sliding_tiles",
    }
    for name, spec in PATTERNS.items():
        assert spec.name == name and spec.label and spec.description
        assert spec.square_only == (spec.family == "deepspeed")
    assert set(RANDOM_NAMES) == {
        "random_per_row",
        "random_probability",
        "deepspeed_variable",
        "deepspeed_bigbird",
    }


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        (name, shape)
        for name, spec in PATTERNS.items()
        for shape in [(2, 8, 8), (1, 5, 5), (3, 6, 10)]
        if shape[1] == shape[2] or not spec.square_only
    ],
)
def test_every_entry_builds_with_its_defaults(name, shape):
    layout = make_pattern(name, *shape, 32, {})
    assert isinstance(layout, Layout)
    assert layout.shape == shape and layout.block_size == 32 and layout.nnz > 0


@pytest.mark.parametrize("name", GENERATOR_NAMES)
def test_generator_entries_call_their_generator(name):
    generator = {
        "random_per_row": patterns.random_blocks,
        "random_probability": patterns.random_blocks,
    }.get(name) or getattr(patterns, name)
    expected = generator(3, 7, 9, **defaults(name))
    assert torch.equal(make_pattern(name, 3, 7, 9, 16, {}).blocks, expected)


@pytest.mark.parametrize("name", DEEPSPEED_NAMES)
@pytest.mark.parametrize("seed", [0, 12345])
def test_deepspeed_entries_equal_deepspeed_after_random_seed(name, seed):
    kwargs = defaults(name)
    kwargs.pop("seed", None)
    if kwargs.get("global_block_end_indices") == ():
        kwargs["global_block_end_indices"] = None
    if name == "deepspeed_variable":
        kwargs["num_random_blocks"] = 2
    config = CONFIGS[name](num_heads=3, block=16, **kwargs)
    random.seed(seed)
    expected = config.make_layout(12 * 16)
    params = {"num_random_blocks": 2} if name == "deepspeed_variable" else {}
    if PATTERNS[name].random:
        params["seed"] = seed
    layout = make_pattern(name, 3, 12, 12, 16, params)
    assert torch.equal(layout.to_int64(), expected)


@pytest.mark.parametrize("name", PATTERNS)
def test_the_callers_random_state_is_untouched(name):
    random.seed(99)
    state = random.getstate()
    make_pattern(name, 2, 9, 9, 16, {})
    assert random.getstate() == state


@pytest.mark.parametrize("name", RANDOM_NAMES)
def test_random_entries_follow_their_seed(name):
    extra = {"num_random_blocks": 2} if name == "deepspeed_variable" else {}
    first, again, other = (
        make_pattern(name, 2, 16, 16, 16, {"seed": seed, **extra}) for seed in (1, 1, 2)
    )
    assert first == again and first != other


def test_one_generator_seed_draws_different_heads_and_a_list_seeds_each():
    heads = make_pattern("random_per_row", 3, 8, 8, 16, {"seed": 4}).blocks
    assert not torch.equal(heads[0], heads[1])
    listed = make_pattern("random_per_row", 2, 8, 8, 16, {"seed": [4, 4]}).blocks
    assert torch.equal(listed[0], listed[1]) and torch.equal(listed[0], heads[0])


def test_per_head_parameters_and_list_values_pass_through():
    layout = make_pattern("sliding_window", 2, 6, 6, 16, {"window_blocks": [1, 3]})
    assert layout.blocks.sum(dim=(1, 2)).tolist() == [6, 15]
    spans = make_pattern(
        "deepspeed_longformer",
        1,
        5,
        5,
        16,
        {"global_block_indices": (1,), "global_block_end_indices": (3,)},
    )
    assert spans.blocks[0, 1:3].all() and spans.blocks[0, :, 1:3].all()


@pytest.mark.parametrize("name", PATTERNS)
def test_int_bounds_of_each_spec_are_the_bounds_the_pattern_accepts(name):
    for param in PATTERNS[name].params:
        if param.kind != "int" or param.low is None or param.name == "seed":
            continue
        low = int(param.low)
        values = {**defaults(name), param.name: low}
        if name == "deepspeed_fixed" and param.name == "num_local_blocks":
            values["num_global_blocks"] = 1
        make_pattern(name, 2, 8, 8, 16, values)
        with pytest.raises(ValueError, match=re.escape(f"{param.name} must be in [{low}, ")):
            make_pattern(name, 2, 8, 8, 16, {**values, param.name: low - 1})


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (
            ("banded", 1, 4, 4, 16, {}),
            ValueError,
            r"pattern must be one of 'causal', 'sliding_window', .*, got 'banded'",
        ),
        (
            ("sliding_window", 1, 4, 4, 16, {"window": 2, "size": 1}),
            ValueError,
            r"pattern 'sliding_window' has no parameters \['size', 'window'\]; "
            r"allowed: window_blocks, causal",
        ),
        (("causal", 1, 4, 4, 16, {"causal": True}), ValueError, r"allowed: none"),
        (("causal", 1, 4, 4, 16, [("a", 1)]), TypeError, r"params must be a mapping"),
        ((["causal"], 1, 4, 4, 16, {}), ValueError, r"pattern must be one of .*, got \['causal'\]"),
        (("causal", 0, 4, 4, 16, {}), ValueError, r"n_heads must be in \[1, 1024\], got 0"),
        (("causal", 1, 4, 4, 0, {}), ValueError, r"block_size must be in \[1, 4096\], got 0"),
        (("causal", 1, 4, 4, 16.0, {}), TypeError, r"block_size must be an integer"),
        (
            ("deepspeed_fixed", 1, 4, 6, 16, {}),
            ValueError,
            r"DeepSpeed Fixed \('deepspeed_fixed'\) is self-attention: it needs as many query "
            r"blocks as key blocks .* got 4 and 6",
        ),
        (
            ("sliding_window", 2, 4, 4, 16, {"window_blocks": [1, 2, 3]}),
            ValueError,
            r"window_blocks must be one value or one per head \(2\), got 3 values",
        ),
        (
            ("deepspeed_bigbird", 1, 4, 4, 16, {"attention": "causal"}),
            ValueError,
            r"attention must be one of 'unidirectional', 'bidirectional', got 'causal'",
        ),
        (
            ("global_tokens", 1, 4, 4, 16, {"global_blocks": [7]}),
            ValueError,
            r"global_blocks\[0\] must be in \[0, 3\], got 7",
        ),
        (
            ("deepspeed_bigbird", 1, 2, 2, 16, {}),
            ValueError,
            r"Number of sliding window blocks, 3, must be smaller than",
        ),
        (
            ("random_probability", 1, 4, 4, 16, {"probability": "high"}),
            TypeError,
            r"probability must be a number, got str",
        ),
    ],
)
def test_errors(args, error, message):
    with pytest.raises(error, match=message):
        make_pattern(*args)


def _digest(layout):
    """A block pattern's blocks as they were hashed; a token pattern's partial blocks too."""
    blocks = layout.blocks
    header = f"{blocks.dtype} {list(blocks.shape)}".encode()
    data = header + blocks.contiguous().numpy().tobytes()
    if layout.partials is not None:
        data += layout.partials.index.numpy().tobytes() + layout.partials.bits.numpy().tobytes()
    return hashlib.sha256(data).hexdigest()


def test_the_registry_holds_the_patterns_it_held_in_their_order():
    assert list(PATTERNS) == list(REGISTERED)


@pytest.mark.parametrize("name", REGISTERED)
def test_every_spec_and_default_layout_is_what_it_was(name):
    spec = PATTERNS[name]
    described = {
        "label": spec.label,
        "family": spec.family,
        "description": spec.description,
        "random": spec.random,
        "square_only": spec.square_only,
        "params": [dataclasses.asdict(param) for param in spec.params],
    }
    expected = dict(REGISTERED[name])
    layouts = expected.pop("layouts")
    assert json.loads(json.dumps(described)) == expected
    for shape, digest in layouts.items():
        layout = make_pattern(name, *map(int, shape.split("x")), 32, {})
        assert _digest(layout) == digest, shape


def _package(tmp_path, monkeypatch, modules):
    """A package of ``modules`` (name -> source) on the import path: its name and folder.

    The name is the test's own, so no test finds another's modules already imported.
    """
    package = "patterns_" + re.sub(r"\W", "_", tmp_path.name)
    folder = tmp_path / package
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name, source in modules.items():
        (folder / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    return package, folder


SPEC_SOURCE = """
from designer.patterns import causal
from designer.patterns.specs import PatternSpec, calls
SPECS = (PatternSpec({name!r}, "P", "generator", "col <= row", (), False, False,
                     build=calls(causal), order={order}),)
"""


def test_collecting_finds_every_module_and_orders_by_order(tmp_path, monkeypatch):
    package, folder = _package(
        tmp_path,
        monkeypatch,
        {
            "first": SPEC_SOURCE.format(name="late", order=20),
            "second": SPEC_SOURCE.format(name="early", order=10),
            "_helpers": "VALUE = 1",
        },
    )
    assert list(collect_specs(package, folder)) == ["early", "late"]


@pytest.mark.parametrize(
    ("modules", "error", "message"),
    [
        (
            {"forgotten": "def pattern(): pass"},
            ImportError,
            r"\.forgotten must declare SPECS, a tuple of PatternSpec",
        ),
        ({"wrong": "SPECS = ('causal',)"}, ImportError, r"\.wrong must declare SPECS"),
        (
            {
                "one": SPEC_SOURCE.format(name="same", order=10),
                "two": SPEC_SOURCE.format(name="same", order=20),
            },
            ValueError,
            r"patterns must have distinct names, repeated: \['same'\]",
        ),
        (
            {
                "one": SPEC_SOURCE.format(name="a", order=10),
                "two": SPEC_SOURCE.format(name="b", order=10),
            },
            ValueError,
            r"patterns must have distinct orders, repeated: \['10'\]",
        ),
    ],
)
def test_collecting_refuses_a_module_without_specs_and_repeats(
    tmp_path, monkeypatch, modules, error, message
):
    package, folder = _package(tmp_path, monkeypatch, modules)
    with pytest.raises(error, match=message):
        collect_specs(package, folder)
