"""What FlexAttention's FLASH backend (FA4) can compile in a ``mask_mod``, checked on the CPU.

Flex traces a ``mask_mod`` into an aten graph over 0-d int32 ``b, h, q_idx, kv_idx``
(``make_fx`` under ``TransformGetItemToIndex``, which turns ``tensor[...]`` into ``aten.index``
and an int index into a constant tensor). Compiled with ``kernel_options={"BACKEND": "FLASH"}``,
torch 2.11's Inductor writes that graph as CuTe-DSL, op by op (``torch/_inductor/codegen/cutedsl``):

- arithmetic, comparisons, bitwise and logical ops, ``where``, ``abs``, ``neg`` and casts become
  ``TensorSSA`` operations (a Python int beside a tensor is broadcast by ``cute.full_like``);
  ``maximum`` and ``minimum`` raise ``NotImplementedError``, and other ops have no lowering: a
  bit shift of int32 failed on the H200 with "Unsupported DSL type: vector<1xi32>"
  (``tools/probes/flash_token_mask.py``);
- a read of a captured tensor becomes, per dimension, ``ssa_to_indexable(index)``, which stores
  the index into a register fragment: a ``TensorSSA`` computed from the arguments works; a
  constant (``blocks[0, ...]``, or a 0-d captured tensor, read at index 0) fails with
  ``ValueError: Expected TensorSSA, but got <class 'int'>``;
- the value is read into a fragment of the captured tensor's CuTe type: bool, the signed ints and
  the float types have one; any other (uint8) falls back to Float32 (on the H200: "Type
  mismatch, store Uint8 (-> Uint8) to Tensor with element type Float32").

``flash_problems`` lists what breaks these rules, each in a sentence; none is what FLASH compiles
(the GPU tests run it there).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
from torch.fx.experimental.proxy_tensor import make_fx

#: aten ops (by packet name) that torch 2.11's CuTe-DSL op overrides lower.
LOWERED_OPS = frozenset({
    "floor_divide", "add", "sub", "mul", "remainder", "ge", "gt", "le", "lt", "eq", "ne",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "logical_and", "logical_or",
    "logical_not", "where", "abs", "neg", "index", "_to_copy",
})  # fmt: skip
#: dtypes a captured tensor may have: those torch 2.11 maps to a CuTe type.
CAPTURED_DTYPES = frozenset(
    {torch.bool, torch.int8, torch.int16, torch.int32, torch.int64}
    | {torch.float16, torch.bfloat16, torch.float32, torch.float64}
)


def flash_problems(mask_mod: Callable) -> list[str]:
    """What in ``mask_mod`` torch 2.11's FLASH backend cannot compile (empty: nothing)."""
    arguments = [torch.zeros((), dtype=torch.int32) for _ in range(4)]
    with TransformGetItemToIndex():
        traced = make_fx(mask_mod)(*arguments)
    problems = []
    for node in traced.graph.nodes:
        if node.op == "get_attr":
            problems += _captured_problems(node, getattr(traced, node.target))
        elif node.op == "call_function":
            name = node.target.overloadpacket.__name__
            if name == "index":
                problems += _index_problems(node)
            elif name not in LOWERED_OPS and name != "lift_fresh_copy":
                problems.append(f"aten.{name} has no CuTe-DSL lowering")
    return problems


def _captured_problems(node: torch.fx.Node, value: torch.Tensor) -> list[str]:
    """A captured tensor may only be read, through ``aten.index``, with one index a dimension."""
    what = f"captured {value.dtype} tensor of shape {list(value.shape)}"
    problems = [] if value.dtype in CAPTURED_DTYPES else [f"{what}: no CuTe type in torch 2.11"]
    for user in _uses(node):
        reads = _is_index(user) and _through_copies(user.args[0]) is node
        indexes = _is_index(user) and not reads  # a constant index: reported by the read
        if not ((reads and len(user.args[1]) == value.dim()) or indexes):
            problems.append(f"{what} is used by {user.target} without an index per dimension")
    return problems


def _index_problems(node: torch.fx.Node) -> list[str]:
    problems = []
    for dimension, index in enumerate(node.args[1]):
        if index is None or not _from_arguments(index):
            problems.append(
                f"dimension {dimension} of a captured tensor is read at a constant index "
                "(FLASH takes only indices computed from b, h, q_idx, kv_idx)"
            )
    return problems


def _uses(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes using ``node``, looking through ``lift_fresh_copy``."""
    found = []
    for user in node.users:
        is_copy = user.op == "call_function" and user.target.__name__.startswith("lift_fresh")
        found += _uses(user) if is_copy else [user]
    return found


def _through_copies(node: torch.fx.Node) -> torch.fx.Node:
    while node.op == "call_function" and node.target.__name__.startswith("lift_fresh"):
        node = node.args[0]
    return node


def _is_index(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target.overloadpacket.__name__ == "index"


def _from_arguments(node: torch.fx.Node) -> bool:
    """Whether ``node`` is computed from the placeholders (``b, h, q_idx, kv_idx``)."""
    if node.op == "placeholder":
        return True
    return any(_from_arguments(n) for n in node.all_input_nodes)
