"""A design as a Hugging Face ``transformers`` attention implementation (transformers >= 5).

``register_attention(name, design)`` puts our kernel in transformers' attention-function
registry, so ``LlamaForCausalLM(config)`` with ``config._attn_implementation = name`` (or
``from_pretrained(..., attn_implementation=name)``) runs every attention layer through it;
``register_model_attention(name, model_design)`` does the same with a design per layer (a
``designer.model_design.ModelDesign`` or its file): each layer runs its own design's plan;
``register_flex_attention`` does the same with ``flex_attention`` and the design's exported
``BlockMask``, for comparison, on any Flex backend (``kernel_options={"BACKEND": "FLASH"}``
for FA4). Both take q ``[B, Hq, S, D]`` and k, v ``[B, Hkv, S, D]`` as the model gives them
(GQA read natively: k and v are never repeated) and return ``[B, S, Hq, D]``.

What a design cannot express is refused with a ``ValueError``, never approximated:

- a padding ``attention_mask`` with a masked token, a custom 4-D mask, packed sequences, or a
  model's own sliding window (the design's blocks are the whole mask);
- a causal model with a design that is not causal (queries would see later tokens inside their
  diagonal blocks);
- sequence lengths other than the design's (so generation with a KV cache, whose steps have one
  query, is refused too: a design is one fixed length);
- attention dropout while training.

Under autocast, q, k and v are cast to the autocast dtype first, as autocast does for
``scaled_dot_product_attention`` (the rotary embedding leaves q and k in fp32).

The first call on a device builds the module or ``BlockMask`` (host work): under
``torch.compile(fullgraph=True)`` run one eager step first. transformers is imported only when a
function here is called.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable
from typing import IO, Any

import torch

from designer.design import Design
from designer.formats import load_design, to_block_mask
from designer.formats.model_file import read_model_file
from designer.model_design import ModelDesign
from gpu.module import BlockSparseAttention

DesignSource = Design | str | os.PathLike | IO[bytes] | bytes
ModelSource = ModelDesign | str | os.PathLike | IO[bytes] | bytes
NAME_PATTERN = re.compile(r"[A-Za-z0-9_\-]{1,64}")
#: Keyword arguments some models pass that ask for masking a design does not do.
_REFUSED_KWARGS = ("sliding_window", "softcap", "s_aux", "cu_seq_lens_q", "cu_seq_lens_k")


def register_attention(name: str, design: DesignSource, *, impl: str = "fused") -> str:
    """Register ``design`` on our kernel as transformers attention implementation ``name``.

    ``design`` is a ``Design`` or a design file (``BlockSparseAttention.from_design`` reads
    it). One ``BlockSparseAttention`` per device is built on first use; its plan is made once.

    >>> name = register_attention("blocksparse", "my_design.pt")  # doctest: +SKIP
    >>> model = LlamaForCausalLM(LlamaConfig(..., attn_implementation=name))  # doctest: +SKIP
    """
    design = _as_design(design)
    BlockSparseAttention.from_design(design, impl=impl, device="meta")  # checks impl and design
    modules: dict[torch.device, BlockSparseAttention] = {}

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
        _check_call(design, module, query, key, attention_mask, dropout, kw)
        query, key, value = _autocast(query, key, value)
        attn = modules.get(query.device)
        if attn is None:
            attn = modules[query.device] = _once_per_device(
                BlockSparseAttention.from_design, design, impl=impl, device=query.device
            )
        return attn(query, key, value, scale=scaling).transpose(1, 2), None

    return _register(name, attention)


def register_model_attention(name: str, model: ModelSource, *, impl: str = "fused") -> str:
    """Register a model design (one design per layer or group of layers) on our kernel as
    attention implementation ``name``: layer ``i`` (transformers' ``module.layer_idx``) runs
    ``model.design_of(i)``, one ``BlockSparseAttention`` per distinct design and device, each
    with its own plan. The model must have as many layers as the model design.

    >>> model = LlamaForCausalLM(LlamaConfig(..., attn_implementation=register_model_attention(
    ...     "per-layer", "model_design.pt")))  # doctest: +SKIP
    """
    model = model if isinstance(model, ModelDesign) else read_model_file(model)
    designs = model.designs
    for design in designs:  # checks impl and every design before any call
        BlockSparseAttention.from_design(design, impl=impl, device="meta")
    index = [_index_of(designs, model.design_of(layer)) for layer in range(model.n_layers)]
    modules: dict[tuple[int, torch.device], BlockSparseAttention] = {}

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
        which = index[_layer_of(module, model)]
        design = designs[which]
        _check_call(design, module, query, key, attention_mask, dropout, kw)
        query, key, value = _autocast(query, key, value)
        attn = modules.get((which, query.device))
        if attn is None:
            attn = modules[(which, query.device)] = _once_per_device(
                BlockSparseAttention.from_design, design, impl=impl, device=query.device
            )
        return attn(query, key, value, scale=scaling).transpose(1, 2), None

    return _register(name, attention)


def _index_of(designs: tuple[Design, ...], design: Design) -> int:
    return next(i for i, d in enumerate(designs) if d is design or d == design)


def _layer_of(module, model: ModelDesign) -> int:
    """The layer ``module`` attends for, checked against the model design's layers."""
    config = getattr(module, "config", None)
    layers = getattr(config, "num_hidden_layers", None)
    if layers is not None and layers != model.n_layers:
        raise ValueError(
            f"model design {model.name!r} has {model.n_layers} layers, but the model has "
            f"{layers} (config.num_hidden_layers)"
        )
    layer = getattr(module, "layer_idx", None)
    if not isinstance(layer, int) or not 0 <= layer < model.n_layers:
        raise ValueError(
            f"the attention module must say its layer (layer_idx in [0, {model.n_layers - 1}]) "
            f"to pick its design from model design {model.name!r}, got {layer!r}"
        )
    return layer


def register_flex_attention(
    name: str,
    design: DesignSource,
    *,
    compiled: bool = True,
    dtype: torch.dtype | None = None,
    kernel_options: dict[str, Any] | None = None,
) -> str:
    """Register ``design`` on ``flex_attention`` with ``designer.formats.to_block_mask``'s
    ``BlockMask`` (one per device) as attention implementation ``name``.

    ``compiled`` runs ``torch.compile(flex_attention)`` (the fast GPU path); eager Flex applies
    only the mask's ``mask_mod`` and has no backward on the CPU. ``dtype`` computes attention
    in that dtype instead (float32 measures what bf16 rounding in attention costs a model).
    ``kernel_options`` go to every ``flex_attention`` call: ``{"BACKEND": "FLASH"}`` runs
    FlexAttention's FA4 backend (compiled, with ``flash-attn-4`` installed; bf16 or fp16).

    >>> register_flex_attention("flex-fa4", "my_design.pt",
    ...                         kernel_options={"BACKEND": "FLASH"})  # doctest: +SKIP
    """
    from torch.nn.attention.flex_attention import flex_attention

    design = _as_design(design)
    kernel_options = _check_kernel_options(kernel_options, compiled)
    flex = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention
    masks: dict[torch.device, Any] = {}

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kw):
        _check_call(design, module, query, key, attention_mask, dropout, kw)
        if dtype is None:
            query, key, value = _autocast(query, key, value)
        else:
            query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
        mask = masks.get(query.device)
        if mask is None:
            mask = masks[query.device] = _once_per_device(
                to_block_mask, design.layout, causal=design.causal, device=query.device
            )
        gqa = query.shape[1] != key.shape[1]
        with torch.autocast(query.device.type, enabled=False):  # inputs' dtype throughout
            out = flex(query, key, value, block_mask=mask, scale=scaling, enable_gqa=gqa,
                       kernel_options=kernel_options)  # fmt: skip
        return out.transpose(1, 2), None

    return _register(name, attention)


# --------------------------------------------------------------------------- checks
def _as_design(design: Any) -> Design:
    return design if isinstance(design, Design) else load_design(design)


def _check_kernel_options(options: Any, compiled: bool) -> dict[str, Any] | None:
    """``options`` (a copy) if they are a dict and ask for no backend eager Flex would ignore,
    nor FLASH where ``flash_attn.cute`` (flash-attn-4) cannot be found."""
    if options is None:
        return None
    if not isinstance(options, dict):
        raise TypeError(f"kernel_options must be a dict or None, got {type(options).__name__}")
    backend = options.get("BACKEND", "AUTO")
    if backend != "AUTO" and not compiled:
        raise ValueError(
            f"kernel_options BACKEND={backend!r} needs compiled=True: eager flex_attention "
            "runs its own math whatever the backend"
        )
    if backend == "FLASH" and not _flash_attention_installed():
        raise ValueError(
            "kernel_options BACKEND='FLASH' needs flash-attn-4 (pip install flash-attn-4): "
            "flash_attn.cute is not installed"
        )
    return dict(options)


def _flash_attention_installed() -> bool:
    """Whether FlexAttention's FLASH backend finds FA4, as torch looks for it."""
    try:
        return importlib.util.find_spec("flash_attn.cute") is not None
    except ImportError:  # no flash_attn package at all
        return False


def _check_call(design: Design, module, query, key, attention_mask, dropout, kwargs) -> None:
    """Refuse, naming it, whatever the call asks for that the design does not express."""
    if attention_mask is not None:
        raise ValueError(
            "attention_mask must be None: the design's blocks are the whole mask, got a "
            f"{type(attention_mask).__name__} of shape {list(attention_mask.shape)}"
        )
    if dropout:
        raise ValueError(
            f"attention dropout must be 0 (set config.attention_dropout = 0.0), got {dropout}"
        )
    for key_name in _REFUSED_KWARGS:
        if kwargs.get(key_name) is not None:
            raise ValueError(
                f"{key_name}={kwargs[key_name]!r} is not supported: the design's blocks are the "
                "whole mask; draw it into the design instead"
            )
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)  # as transformers' SDPA path
    if is_causal and not design.causal:
        raise ValueError(
            f"the model's attention is causal but design {design.name!r} is not: queries would "
            "see later tokens inside their blocks; save the design with causal on"
        )
    layout = design.layout
    heads, lengths = query.shape[1], (query.shape[2], key.shape[2])
    if lengths != (layout.seq_len_q, layout.seq_len_k):
        raise ValueError(
            f"design {design.name!r} covers Sq x Sk = {layout.seq_len_q} x {layout.seq_len_k} "
            f"tokens, got {lengths[0]} x {lengths[1]}; a design has one length (so no "
            "generation with a KV cache): give inputs of that length, or draw a design of this one"
        )
    if layout.n_heads not in (1, heads):
        raise ValueError(
            f"design {design.name!r} has {layout.n_heads} heads, but the model has {heads} "
            "query heads (a design needs 1 or as many)"
        )


@torch.compiler.disable
def _once_per_device(build: Callable, *args: Any, **kwargs: Any) -> Any:
    """Host work done on a device's first call: under ``torch.compile`` one graph break."""
    return build(*args, **kwargs)


def _autocast(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    device = tensors[0].device.type
    if not torch.is_autocast_enabled(device):
        return tensors
    dtype = torch.get_autocast_dtype(device)
    return tuple(x.to(dtype) for x in tensors)


def _refuse_other_masks(**arguments: Any) -> None:
    """The mask builder transformers calls for our name: there is no mask to build, so it checks
    that the model asks for nothing beyond plain causal or bidirectional attention.

    A model's mask function is plain causal or bidirectional in eager runs without packing; when
    it is another (under ``torch.compile`` transformers cannot rule packed sequences out, so it
    passes a packed-sequence mask), the function is evaluated on the token grid, once per model
    call, and accepted if it keeps exactly the causal or every pair.
    """
    from transformers.masking_utils import bidirectional_mask_function, causal_mask_function

    attention_mask = arguments.get("attention_mask")
    if attention_mask is not None and not bool(attention_mask.all()):
        raise ValueError(
            "attention_mask masks padding tokens, which a design cannot express: pass inputs "
            "without padding (an all-ones attention_mask or None)"
        )
    mask_function = arguments.get("mask_function")
    if mask_function in (causal_mask_function, bidirectional_mask_function, None):
        return None
    q_idx, kv_idx = _query_and_key_positions(arguments)
    batch = torch.arange(arguments["batch_size"], device=q_idx.device)[:, None, None]
    kept = mask_function(batch, 0, q_idx[None, :, None], kv_idx[None, None, :])  # [B, Sq, Sk]
    causal = kv_idx[None, None, :] <= q_idx[None, :, None]
    if not (bool(torch.as_tensor(kept).all()) or bool((kept == causal).all())):
        name = getattr(mask_function, "__name__", type(mask_function).__name__)
        raise ValueError(
            f"the model asks for its own mask ({name}: packed sequences, a sliding window or "
            "another pattern); the design's blocks are the whole mask, so draw it into the design"
        )
    return None


def _query_and_key_positions(arguments: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Token positions of the queries and keys (transformers 5.0 passes ``cache_position``,
    later 5.x releases ``q_length`` and ``q_offset``)."""
    cache_position = arguments.get("cache_position")
    if cache_position is not None:
        q_idx = cache_position
    else:
        device = arguments.get("device", "cpu")
        q_idx = torch.arange(arguments["q_length"], device=device) + arguments.get("q_offset", 0)
    kv_idx = torch.arange(arguments["kv_length"], device=q_idx.device)
    return q_idx, kv_idx + arguments.get("kv_offset", 0)


def _register(name: str, attention: Callable) -> str:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"name must be 1 to 64 letters, digits, '_' or '-', got {name!r}"[:200])
    existing = AttentionInterface._global_mapping.get(name)
    if name == "eager" or (existing is not None and not hasattr(existing, "blocksparse_design")):
        raise ValueError(f"name {name!r} is one of transformers' own attention implementations")
    if "flash" in name.lower():  # transformers then loads a FlashAttention kernel by that name
        raise ValueError(
            f"name must not contain 'flash' (transformers reads it as a FlashAttention kernel "
            f"to load), got {name!r}"[:200]
        )
    attention.blocksparse_design = True
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, _refuse_other_masks)
    return name
