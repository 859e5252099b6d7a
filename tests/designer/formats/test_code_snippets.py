"""The FlexAttention and DeepSpeed snippets, run as a user would run them."""

from __future__ import annotations

import warnings

import pytest
import torch

from designer.design import Design
from designer.formats import block_mask_tensors
from designer.formats.deepspeed_snippet import deepspeed_snippet
from designer.formats.flex_snippet import closed_form, flex_snippet
from designer.formats.flex_tiles import listed_tiles
from designer.layout import Layout
from designer.patterns import SparsityConfig
from designer.recipe import Recipe, RecipeStep
from gpu.reference import dense_masked_attention, dense_masked_attention_backward
from tests.designer.formats.flash_rules import flash_problems
from tests.designer.formats.flex_reference import token_tiles
from tests.gpu.flex_backends import needs_flash
from tests.gpu.oracle import relative_error


def recipe_design(steps, *, heads=2, causal=False, shape=(6, 6), block=16):
    recipe = Recipe(heads, *shape, block, steps=steps)
    return Design(recipe.build(), name="snippet", recipe=recipe, causal=causal)


DESIGNS = {
    "causal closed form": recipe_design((RecipeStep("causal"),)),
    "window closed form, causal tokens": recipe_design(
        (RecipeStep("sliding_window", {"window_blocks": 2}),), causal=True
    ),
    "bidirectional window closed form": recipe_design(
        (RecipeStep("sliding_window", {"window_blocks": 2, "causal": False}),), shape=(5, 7)
    ),
    "chunks closed form": recipe_design(
        (RecipeStep("block_diagonal", {"chunk_blocks": 2, "causal": True}),)
    ),
    "prefix closed form": recipe_design((RecipeStep("prefix_lm", {"prefix_blocks": 2}),)),
    "sinks closed form": recipe_design(
        (RecipeStep("attention_sinks", {"sink_blocks": 1, "window_blocks": 2}),), causal=True
    ),
    "per-head windows, from the file": recipe_design(
        (RecipeStep("sliding_window", {"window_blocks": [1, 3]}),)
    ),
    "random, from the file": recipe_design((RecipeStep("random_per_row", {"seed": 2}),)),
    "random causal, from the file": recipe_design(
        (RecipeStep("random_per_row", {"seed": 3}),), causal=True
    ),
    "random causal, 3 tiles, from the file": recipe_design(
        (RecipeStep("random_per_row", {"seed": 5}),), causal=True, shape=(20, 18)
    ),
    "48-token blocks, closed form": recipe_design(
        (RecipeStep("sliding_window", {"window_blocks": 2}),), shape=(7, 7), block=48
    ),
    "one head, no recipe": Design(Layout(torch.eye(4, dtype=torch.bool)[None], 16), name="eye"),
}


@pytest.mark.parametrize("case", list(DESIGNS))
def test_flex_snippet_gives_the_layouts_attention_in_eager_flex(case, tmp_path, monkeypatch):
    design = DESIGNS[case]
    layout = design.layout
    assert (closed_form(design) is not None) == case.endswith(
        "closed form"
    ) or "closed form," in case
    torch.save(block_mask_tensors(layout, causal=design.causal), tmp_path / "snippet_blockmask.pt")
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    scope: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # eager flex_attention warns it is unfused
        exec(compile(flex_snippet(design, "snippet_blockmask.pt"), "flex.py", "exec"), scope)
    q, k, v, out = scope["q"], scope["k"], scope["v"], scope["out"]
    expected = dense_masked_attention(
        q, k, v, layout.blocks, layout.block_size, causal=design.causal,
        scale=q.shape[-1] ** -0.5, compute_dtype=torch.float64,
    )  # fmt: skip
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)
    block_mask = scope["block_mask"]
    assert block_mask.BLOCK_SIZE == (128, 128), "Flex's own tiles: its compiled backward takes them"
    n = block_mask.kv_indices.shape[-1]
    full = listed_tiles(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, n)[0]
    partial = listed_tiles(block_mask.kv_num_blocks, block_mask.kv_indices, n)[0]
    expected_full, expected_partial = token_tiles(layout, design.causal, 128)
    assert torch.equal(full.expand_as(expected_full), expected_full)
    assert torch.equal(partial.expand_as(expected_partial), expected_partial)
    assert flash_problems(scope["mask_mod"]) == [], "FLASH (FA4) compiles the same mask_mod"


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["AUTO", pytest.param("FLASH", marks=needs_flash)])
@pytest.mark.parametrize(
    "case", ["random causal, 3 tiles, from the file", "causal closed form", "one head, no recipe"]
)
def test_flex_snippet_trains_compiled_on_a_gpu(case, backend, tmp_path, monkeypatch):
    """On CUDA the snippet compiles flex_attention and runs its backward, on Triton and on FA4
    (its ``BACKEND`` line set to "FLASH"): both match fp64."""
    design = DESIGNS[case]
    layout = design.layout
    torch.save(block_mask_tensors(layout, causal=design.causal), tmp_path / "snippet_blockmask.pt")
    monkeypatch.chdir(tmp_path)
    torch._dynamo.reset()  # past the recompile limit, torch.compile would quietly run eager
    scope: dict = {}
    code = flex_snippet(design, "snippet_blockmask.pt")
    assert code.count('BACKEND = "AUTO"') == 1
    code = code.replace('BACKEND = "AUTO"', f"BACKEND = {backend!r}")
    exec(compile(code, "flex.py", "exec"), scope)
    leaves, out = [scope[name] for name in ("q", "k", "v")], scope["out"]
    assert out.is_cuda and out.dtype == torch.bfloat16
    q, k, v = (leaf.detach() for leaf in leaves)
    args = (layout.blocks, layout.block_size)
    expected = dense_masked_attention(q, k, v, *args, causal=design.causal)
    assert relative_error(out, expected) <= 2e-2
    ones = torch.ones_like(q)  # the snippet's loss is out.sum()
    gradients = dense_masked_attention_backward(q, k, v, ones, *args, causal=design.causal)
    for leaf, want in zip(leaves, gradients, strict=True):
        assert relative_error(leaf.grad, want) <= 2e-2


def test_without_mask_mod_eager_flex_attends_densely():
    """Why the snippet attaches a mask_mod: the bare block lists do nothing in eager flex."""
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    layout = Layout(torch.eye(4, dtype=torch.bool)[None], 16)
    q = k = v = torch.randn(1, 1, 64, 8)
    arguments = block_mask_tensors(layout)
    del arguments["layout"]
    bare = BlockMask.from_kv_blocks(**arguments)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = flex_attention(q, k, v, block_mask=bare)
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, dense)


@pytest.mark.parametrize("heads", [1, 3])
def test_deepspeed_snippet_returns_the_design(heads, tmp_path, monkeypatch):
    design = recipe_design((RecipeStep("random_per_row", {"seed": 4}),), heads=heads)
    torch.save(design.layout.to_int64(), tmp_path / "snippet_deepspeed.pt")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(deepspeed_snippet(design, "snippet_deepspeed.pt"), "ds.py", "exec"), scope)
    assert isinstance(scope["config"], SparsityConfig)
    assert scope["layout"].dtype == torch.int64
    assert torch.equal(scope["layout"], design.layout.to_int64())
    config = scope["config"]
    with pytest.raises(ValueError, match="the design is for seq_len 96, got 192"):
        config.make_layout(192)
    with pytest.raises(ValueError, match="needs to be dividable by Block size 16"):
        config.make_layout(100)


def test_deepspeed_snippet_needs_a_square_layout():
    design = recipe_design((RecipeStep("causal"),), shape=(4, 6))
    with pytest.raises(ValueError, match="DeepSpeed layouts are square"):
        deepspeed_snippet(design, "x.pt")


def test_on_the_cpu_a_long_design_runs_on_its_first_tokens_within_the_memory_bound(
    tmp_path, monkeypatch
):
    """Eager Flex holds every score: 16 heads x 16k tokens would ask for 17 GB."""
    import torch.nn.attention.flex_attention as flex_module

    from designer.formats.flex_snippet import CPU_SCORE_BYTES

    seen = []
    eager = flex_module.flex_attention

    def recording(q, k, v, **kwargs):
        seen.append((q.shape, k.shape))
        return eager(q, k, v, **kwargs)

    monkeypatch.setattr(flex_module, "flex_attention", recording)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for steps in ((RecipeStep("causal"),), (RecipeStep("random_per_row", {"seed": 1}),)):
        design = recipe_design(steps, heads=16, shape=(256, 256), block=64, causal=True)
        torch.save(block_mask_tensors(design.layout, causal=True), tmp_path / "long_blockmask.pt")
        monkeypatch.chdir(tmp_path)
        scope: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            exec(compile(flex_snippet(design, "long_blockmask.pt"), "flex.py", "exec"), scope)
        (q_shape, k_shape) = seen.pop()
        assert q_shape[1] * q_shape[2] * k_shape[2] * 4 <= CPU_SCORE_BYTES
        assert q_shape[2] == scope["Q_LEN"] == 1024 and scope["out"].shape == q_shape
        q, k, v, out = scope["q"], scope["k"], scope["v"], scope["out"]
        n = q.shape[2] // 64
        expected = dense_masked_attention(
            q[:, :, :128],
            k,
            v,
            design.layout.blocks[:, :2, :n],
            64,
            causal=True,
            scale=q.shape[-1] ** -0.5,
            compute_dtype=torch.float64,
        )  # fmt: skip  (the first 128 queries: rows are independent)
        torch.testing.assert_close(out[:, :, :128].double(), expected, atol=1e-5, rtol=1e-5)
