import pytest

from designer.patterns import ParamSpec, PatternSpec, causal
from designer.patterns.specs import calls

#: What a spec needs beyond its description: a builder and a place in the registry.
ENTRY = {"build": calls(causal), "order": 10}


def test_param_check_per_kind():
    assert ParamSpec("n", "int", 1, low=0, high=4).check(3, 2) == 3
    assert ParamSpec("p", "float", 0.5, low=0.0, high=1.0).check(1, 2) == 1.0
    assert ParamSpec("b", "bool", True).check(False, 2) is False
    assert ParamSpec("c", "choice", "a", choices=("a", "b")).check("b", 2) == "b"
    assert ParamSpec("l", "int_list", (1,), low=0, high=9).check((3, 4), 2) == [3, 4]


def test_per_head_values_keep_their_form():
    spec = ParamSpec("w", "int", 1, low=1, high=9, per_head=True)
    assert spec.check(3, 2) == 3
    assert spec.check([3, 4], 2) == [3, 4]
    with pytest.raises(ValueError, match=r"w must be one value or one per head \(2\), got 3"):
        spec.check([1, 2, 3], 2)
    with pytest.raises(ValueError, match=r"w\[1\] must be in \[1, 9\], got 0"):
        spec.check([1, 0], 2)


@pytest.mark.parametrize(
    ("spec", "value", "error", "message"),
    [
        (ParamSpec("n", "int", 1, low=0, high=4), 5, ValueError, r"n must be in \[0, 4\], got 5"),
        (ParamSpec("n", "int", 1), "1", TypeError, r"n must be an integer, got str"),
        (ParamSpec("p", "float", 0.5, high=1.0), 2.0, ValueError, r"p must be <= 1.0, got 2.0"),
        (ParamSpec("b", "bool", True), 1, TypeError, r"b must be True or False, got int"),
        (ParamSpec("c", "choice", "a", choices=("a",)), "z", ValueError, r"c must be one of 'a'"),
        (ParamSpec("l", "int_list", (), low=0), [-1], ValueError, r"l\[0\] must be >= 0"),
    ],
)
def test_param_check_errors(spec, value, error, message):
    with pytest.raises(error, match=message):
        spec.check(value, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "str", "default": ""}, r"kind of parameter 'x' must be one of 'int'"),
        ({"kind": "int", "default": 1, "choices": (1,)}, r"choices go with kind 'choice' only"),
        ({"kind": "choice", "default": 1}, r"choices go with kind 'choice' only"),
        ({"kind": "int_list", "default": (), "per_head": True}, r"only single values may be per"),
        ({"kind": "int", "default": 0, "low": 1}, r"x must be >= 1, got 0"),
    ],
)
def test_param_spec_checks_itself(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ParamSpec("x", **kwargs)


def test_pattern_spec_finds_its_parameters():
    window = ParamSpec("window", "int", 1)
    spec = PatternSpec("p", "P", "generator", "rule", (window,), False, False, **ENTRY)
    assert spec.param("window") is window
    with pytest.raises(ValueError, match=r"pattern 'p' has no parameter 'size'; allowed: window"):
        spec.param("size")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("other", (), False), r"family of pattern 'p' must be one of 'generator', 'deepspeed'"),
        (("generator", (ParamSpec("a", "int", 1),) * 2, False), r"repeated parameter names"),
        (("generator", (), True), r"random patterns, and only they, take a seed"),
        (("generator", (ParamSpec("seed", "int", 1),), False), r"and only they, take a seed"),
    ],
)
def test_pattern_spec_checks_itself(args, message):
    family, params, is_random = args
    with pytest.raises(ValueError, match=message):
        PatternSpec("p", "P", family, "rule", params, is_random, False, **ENTRY)


def test_pattern_spec_checks_its_order_and_builds():
    with pytest.raises(ValueError, match=r"order of pattern 'p' must be >= 0, got -1"):
        PatternSpec("p", "P", "generator", "rule", (), False, False, **{**ENTRY, "order": -1})
    spec = PatternSpec("p", "P", "generator", "rule", (), False, False, **ENTRY)
    assert spec.build(2, 3, 4, 16, {}).tolist() == causal(2, 3, 4).tolist()
