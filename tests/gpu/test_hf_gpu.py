"""``gpu.hf.register_flex_attention`` in a small Hugging Face Qwen2 on CUDA, on Flex's Triton
backend and on FA4 (``kernel_options={"BACKEND": "FLASH"}``), as a user trains with it.

The model is built from a config (nothing downloaded): 2 layers, hidden 256, 4 query heads and 2
kv heads (GQA, head dim 64), 1024 tokens, one causal layout head of sinks plus a window at
64-token blocks serving every head: the kind of design FA4 failed on before (a one-head
``mask_mod`` read its head at a constant index). One training step's loss and every parameter's
gradient, under bf16 autocast, are compared with the same model and step through our reference
attention (fp32 arithmetic on the same bf16 q, k, v), so only attention's rounding differs.
"""

from __future__ import annotations

import pytest
import torch

from designer.design import Design
from designer.layout import Layout
from designer.patterns import attention_sinks
from gpu.hf import register_attention, register_flex_attention
from tests.gpu.flex_backends import BACKENDS, KERNEL_OPTIONS
from tests.gpu.oracle import relative_error

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.gpu

SEQ, BLOCK = 1024, 64
CONFIG = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
          "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512,
          "max_position_embeddings": SEQ, "attention_dropout": 0.0}  # fmt: skip
#: bf16 attention against fp32 attention on the same inputs: loss (absolute) and gradients
#: (relative, all parameters together). The gradients are what tell a wrong mask: plain causal
#: attention instead of the design's moves them by 0.43 (and the loss by only 5e-4; CPU, fp32).
LOSS_TOLERANCE, GRADIENT_TOLERANCE = 2e-3, 5e-2


def _design() -> Design:
    n_blocks = SEQ // BLOCK
    blocks = attention_sinks(1, n_blocks, n_blocks, sink_blocks=1, window_blocks=4)
    return Design(Layout(blocks, BLOCK), name="sinks + window", causal=True)


def _step(name: str) -> tuple[float, torch.Tensor]:
    """One training step of the model on ``name``'s attention: its loss and flat gradient."""
    torch.manual_seed(0)
    config = transformers.Qwen2Config(**CONFIG, attn_implementation=name)
    model = transformers.Qwen2ForCausalLM(config).cuda().train()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(CONFIG["vocab_size"], (1, SEQ), generator=generator).cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    gradient = torch.cat([p.grad.flatten() for p in model.parameters()])
    return float(loss), gradient


@pytest.fixture(scope="module")
def reference_step():
    return _step(register_attention("test-gpu-reference", _design(), impl="reference"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_qwen2_trains_through_flex_on_each_backend(reference_step, backend):
    torch._dynamo.reset()  # a fresh compile cache: past the recompile limit Flex would run eager
    name = register_flex_attention(
        f"test-gpu-flex-{dict(TRITON='triton', FLASH='fa4')[backend]}",
        _design(),
        kernel_options=KERNEL_OPTIONS[backend],
    )
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        loss, gradient = _step(name)
    reference_loss, reference_gradient = reference_step
    assert torch.isfinite(gradient).all()
    assert abs(loss - reference_loss) <= LOSS_TOLERANCE, (loss, reference_loss)
    assert relative_error(gradient, reference_gradient) <= GRADIENT_TOLERANCE
