"""The transformers adapter on the CPU: a tiny Llama runs through our attention (``impl=
"reference"``) and through eager Flex with the exported BlockMask, equal to each other and to the
reference, and every call a design cannot express is refused. Skipped without transformers."""

from __future__ import annotations

import warnings

import pytest
import torch

from designer.design import Design
from designer.layout import Layout
from designer.patterns import attention_sinks
from gpu.hf import register_attention, register_flex_attention, register_model_attention
from gpu.reference import dense_masked_attention

transformers = pytest.importorskip("transformers")

SEQ = 64
CONFIG = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 100,
          "max_position_embeddings": SEQ}  # fmt: skip


def _design(causal=True, heads=1) -> Design:
    blocks = attention_sinks(heads, SEQ // 16, SEQ // 16, sink_blocks=1, window_blocks=2)
    return Design(Layout(blocks, 16), name="sinks", causal=causal)


def _model(name: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**{**CONFIG, **overrides}, attn_implementation=name)
    return transformers.LlamaForCausalLM(config)


def _ids(seq=SEQ):
    return torch.randint(CONFIG["vocab_size"], (2, seq), generator=torch.Generator().manual_seed(1))


def test_ours_and_flex_give_the_same_loss_and_ours_trains():
    ours = _model(register_attention("test-ours", _design(), impl="reference"))
    flex = _model(register_flex_attention("test-flex", _design(), compiled=False))
    ids = _ids()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager Flex says it is unfused
        flex_loss = flex(input_ids=ids, labels=ids).loss
    loss = ours(input_ids=ids, labels=ids).loss
    torch.testing.assert_close(loss.detach(), flex_loss, rtol=1e-5, atol=1e-5)
    loss.backward()
    grads = [p.grad for p in ours.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert ours.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_the_function_reads_gqa_natively_and_returns_bshd():
    attention = transformers.AttentionInterface._global_mapping[
        register_attention("test-direct", _design(), impl="reference")
    ]
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 4, SEQ, 8, generator=gen)
    k, v = (torch.randn(1, 2, SEQ, 8, generator=gen) for _ in range(2))
    layer = torch.nn.Module()
    layer.is_causal = True
    out, weights = attention(layer, q, k, v, None, dropout=0.0, scaling=0.4)
    expected = dense_masked_attention(
        q, k, v, _design().layout.blocks, 16, causal=True, scale=0.4, compute_dtype=torch.float32
    )
    assert weights is None and out.shape == (1, SEQ, 4, 8)
    torch.testing.assert_close(out, expected.transpose(1, 2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attention(layer, q, k, v, None, scaling=0.4)[0].dtype == torch.bfloat16


def _padding(ids):
    return torch.ones_like(ids).index_fill(1, torch.tensor([0]), 0)


def _packed(ids):
    return torch.cat([torch.arange(32)] * 2)[None].expand(len(ids), -1)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m, ids: m(input_ids=ids[:, :32]), r"covers Sq x Sk = 64 x 64 tokens, got 32 x 32"),
        (lambda m, ids: m(input_ids=ids, attention_mask=_padding(ids)), "masks padding tokens"),
        (
            lambda m, ids: m(input_ids=ids, attention_mask=torch.ones(2, 1, SEQ, SEQ) > 0),
            "attention_mask must be None",
        ),
        (
            lambda m, ids: m(input_ids=ids, position_ids=_packed(ids), use_cache=False),
            "its own mask",
        ),
        (lambda m, ids: m.generate(ids[:, :SEQ], max_new_tokens=2), "no generation"),
    ],
)
def test_what_the_design_cannot_express_is_refused(call, match):
    model = _model(register_attention("test-refuse", _design(), impl="reference"))
    with pytest.raises(ValueError, match=match):
        call(model, _ids())


def test_a_causal_model_refuses_a_design_that_is_not_causal():
    name = register_attention("test-bidirectional", _design(causal=False), impl="reference")
    model = _model(name)
    with pytest.raises(ValueError, match="model's attention is causal but design 'sinks' is not"):
        model(input_ids=_ids())


def test_dropout_while_training_is_refused():
    model = _model(register_attention("test-dropout", _design(), impl="reference"),
                   attention_dropout=0.1)  # fmt: skip
    model.train()
    with pytest.raises(ValueError, match="attention dropout must be 0"):
        model(input_ids=_ids())
    model.eval()
    model(input_ids=_ids())  # no dropout in eval mode


def test_heads_the_design_does_not_have_are_refused():
    model = _model(register_attention("test-heads", _design(heads=3), impl="reference"))
    with pytest.raises(ValueError, match="design 'sinks' has 3 heads, but the model has 4"):
        model(input_ids=_ids())


def test_model_kwargs_asking_for_more_masking_are_refused():
    attention = transformers.AttentionInterface._global_mapping[
        register_attention("test-kwargs", _design(), impl="reference")
    ]
    q = torch.randn(1, 4, SEQ, 8)
    with pytest.raises(ValueError, match="sliding_window=32 is not supported"):
        attention(torch.nn.Module(), q, q, q, None, sliding_window=32)


@pytest.mark.parametrize(
    ("name", "match"),
    [("sdpa", "transformers' own"), ("eager", "transformers' own"), ("org/kernel", "letters")],
)
def test_names_that_are_not_ours_to_take_are_refused(name, match):
    with pytest.raises(ValueError, match=match):
        register_attention(name, _design(), impl="reference")


def test_a_bad_design_file_is_refused_at_registration():
    with pytest.raises(ValueError, match="design file"):
        register_flex_attention("test-bad", b"not a design")


def test_flex_kernel_options_that_cannot_run_are_refused_at_registration(monkeypatch):
    flash = {"BACKEND": "FLASH"}
    with pytest.raises(TypeError, match="kernel_options must be a dict or None, got str"):
        register_flex_attention("test-options", _design(), kernel_options="FLASH")
    with pytest.raises(ValueError, match="BACKEND='FLASH' needs compiled=True: eager flex_at"):
        register_flex_attention("test-options", _design(), compiled=False, kernel_options=flash)
    monkeypatch.setattr("gpu.hf._flash_attention_installed", lambda: False)
    with pytest.raises(ValueError, match=r"needs flash-attn-4 \(pip install flash-attn-4\)"):
        register_flex_attention("test-options", _design(), kernel_options=flash)


def test_a_name_transformers_reads_as_flash_attention_is_refused():
    with pytest.raises(ValueError, match="must not contain 'flash'"):
        register_attention("my-flash-design", _design(), impl="reference")


def test_flex_kernel_options_reach_flex_attention(monkeypatch):
    seen = []

    def flex_attention(*args, kernel_options=None, **kwargs):
        seen.append(kernel_options)
        return torch.zeros(1, 4, SEQ, 8)

    monkeypatch.setattr("torch.nn.attention.flex_attention.flex_attention", flex_attention)
    options = {"BACKEND": "AUTO", "BLOCK_M": 64}
    name = register_flex_attention(
        "test-options", _design(), compiled=False, kernel_options=options
    )
    options["BLOCK_M"] = 32  # registered options are the caller's at registration
    attention = transformers.AttentionInterface._global_mapping[name]
    q = torch.randn(1, 4, SEQ, 8)
    attention(torch.nn.Module(), q, q[:, :2], q[:, :2], None)
    assert seen == [{"BACKEND": "AUTO", "BLOCK_M": 64}]


def test_a_compiled_model_runs_through_our_attention():
    model = _model(register_attention("test-compiled", _design(), impl="reference"))
    ids = _ids()
    eager = model(input_ids=ids, labels=ids, use_cache=False).loss
    compiled = torch.compile(model, backend="eager")  # transformers passes a packed-sequence mask
    loss = compiled(input_ids=ids, labels=ids, use_cache=False).loss
    torch.testing.assert_close(loss, eager)
    loss.backward()
    assert model.model.layers[0].self_attn.k_proj.weight.grad.abs().sum() > 0


def test_a_model_with_its_own_sliding_window_is_refused():
    name = register_attention("test-mistral", _design(), impl="reference")
    config = transformers.MistralConfig(**CONFIG, sliding_window=32, attn_implementation=name)
    model = transformers.MistralForCausalLM(config)
    with pytest.raises(ValueError, match=r"its own mask|sliding_window=32"):
        model(input_ids=_ids())


def _model_design():
    """Layer 0: attention sinks with a window; layer 1: causal dense (every block)."""
    from designer.model_design import ModelDesign
    from designer.patterns import causal

    dense = Design(Layout(causal(1, SEQ // 16, SEQ // 16), 16), name="causal", causal=True)
    return ModelDesign.uniform("per layer", 2, _design()).assign(1, 1, dense)


def test_a_model_design_gives_each_layer_its_own_design_in_one_line(tmp_path):
    from designer.formats.model_file import save_model_design

    save_model_design(_model_design(), tmp_path / "model.pt")
    name = register_model_attention("test-per-layer", tmp_path / "model.pt", impl="reference")
    attention = transformers.AttentionInterface._global_mapping[name]
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, SEQ, 8, generator=gen)
    k, v = (torch.randn(1, 2, SEQ, 8, generator=gen) for _ in range(2))
    for layer, design in enumerate(_model_design().designs):
        module = torch.nn.Module()
        module.is_causal, module.layer_idx = True, layer
        module.config = transformers.LlamaConfig(**CONFIG)
        out, _ = attention(module, q, k, v, None, scaling=0.4)
        expected = dense_masked_attention(q, k, v, design.layout.blocks, 16, causal=True,
                                          scale=0.4, compute_dtype=torch.float32)  # fmt: skip
        torch.testing.assert_close(out, expected.transpose(1, 2))
    ids = _ids()
    per_layer = _model(name)(input_ids=ids, labels=ids).loss
    same = _model(register_attention("test-one-for-all", _design(), impl="reference"))
    assert not torch.allclose(per_layer, same(input_ids=ids, labels=ids).loss)
    per_layer.backward()


def test_a_model_design_refuses_a_model_of_another_depth():
    name = register_model_attention("test-depth", _model_design(), impl="reference")
    with pytest.raises(ValueError, match="has 2 layers, but the model has 3"):
        _model(name, num_hidden_layers=3)(input_ids=_ids())
