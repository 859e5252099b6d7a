"""The kernels' parameter structs: the Python mirrors (``gpu.params``) and the C structs
(``gpu/include/params.cuh``) agree field for field, compiled by nvcc on the CPU and by NVRTC on
the GPU; and each launcher's values land in the fields of their names."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import pytest
import torch

from gpu.backward import fused as backward
from gpu.backward import sm90, sm90_dq
from gpu.backward.builds import BackwardConfig
from gpu.forward.launch import FusedPlan
from gpu.forward.sm80 import KernelConfig
from gpu.forward.sm90 import HopperConfig
from gpu.params import (
    STRUCTS,
    BackwardParams,
    BackwardPrepParams,
    DqConvertParams,
    ForwardParams,
    HopperBackwardParams,
    HopperDqParams,
    HopperForwardParams,
    KernelParams,
    packer,
)
from gpu.runtime import INCLUDE_DIR

LOG2_E = math.log2(math.e)


def layout_check_source() -> str:
    """C++ that compiles only if every C struct has exactly the mirror's fields (as many: a
    structured binding takes them all; each name at the mirror's offset, of its size) and the
    mirror's total size and alignment."""
    lines = ['#include "attention_common.cuh"', '#include "params.cuh"']
    for name, mirror in STRUCTS.items():
        fields = [field for field, _ in mirror._fields_]
        bindings = ", ".join(f"b_{field}" for field in fields)
        lines.append(f"inline void as_many_fields_as_the_mirror(const {name}& s) {{")
        lines.append(f"  [[maybe_unused]] const auto& [{bindings}] = s;")
        lines.append("}")
        for field in fields:
            offset, size = getattr(mirror, field).offset, getattr(mirror, field).size
            lines.append(
                f"static_assert(__builtin_offsetof({name}, {field}) == {offset}, "
                f'"{name}.{field}: the mirror puts it at byte {offset}");'
            )
            lines.append(
                f'static_assert(sizeof({name}::{field}) == {size}, "{name}.{field}: the mirror '
                f'gives it {size} bytes");'
            )
        lines.append(
            f'static_assert(sizeof({name}) == {mirror.size()}, "{name}: the mirror has '
            f'{mirror.size()} bytes");'
        )
        lines.append(
            f'static_assert(alignof({name}) == {mirror.alignment}, "{name}: the mirror is '
            f'aligned to {mirror.alignment}");'
        )
    return "\n".join(lines) + "\n"


def test_the_c_structs_have_the_mirrors_layout(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH: the layouts are checked by NVRTC on a GPU only")
    source = tmp_path / "params_check.cu"
    source.write_text(layout_check_source())
    command = [nvcc, "-std=c++17", "-DDTYPE_BF16=1", f"-I{INCLUDE_DIR}", "-c", str(source),
               "-o", str(tmp_path / "params_check.o")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_mirror_fails_the_check(tmp_path, monkeypatch):
    """The check can fail: a mirror with a field too many, one too few, two fields swapped."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    fields = BackwardPrepParams._fields_

    class Longer(KernelParams):
        _fields_ = (*fields, ("extra", ctypes.c_int32))

    class Shorter(KernelParams):  # n_rows lies in no padding: the size would not tell
        _fields_ = fields[:-1]

    class Swapped(KernelParams):  # o and d_o, both pointers, in each other's place
        _fields_ = (fields[1], fields[0], *fields[2:])

    wrong = ((Longer, "too many identifiers"),
             (Shorter, "there are more elements than there are binding names"),
             (Swapped, "BackwardPrepParams.o: the mirror puts it at byte 8"))  # fmt: skip
    for mirror, message in wrong:
        monkeypatch.setitem(STRUCTS, "BackwardPrepParams", mirror)
        source = tmp_path / "params_check.cu"
        source.write_text(layout_check_source())
        result = subprocess.run(
            [nvcc, "-std=c++17", "-DDTYPE_BF16=1", f"-I{INCLUDE_DIR}", "-c", str(source), "-o",
             str(tmp_path / "x.o")], capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode != 0 and message in result.stdout + result.stderr, mirror


def test_every_struct_packs_to_its_size_and_decodes_to_its_values():
    for mirror in STRUCTS.values():
        values = []
        for number, (_, kind) in enumerate(mirror._fields_, start=1):
            values.append(bytes([number]) * 128 if kind is ctypes.c_uint64 * 16 else number)
        packed = packer(mirror).pack(*values)
        assert len(packed) == mirror.size()
        decoded = mirror.from_buffer_copy(packed[: ctypes.sizeof(mirror)])
        for (name, kind), value in zip(mirror._fields_, values, strict=True):
            got = getattr(decoded, name)
            assert (bytes(got) if kind is ctypes.c_uint64 * 16 else got) == value, name


def decoded(mirror: type[KernelParams], values: tuple) -> KernelParams:
    """The struct a launcher hands the driver for these values."""
    return mirror.from_buffer_copy(packer(mirror).pack(*values)[: ctypes.sizeof(mirror)])


def forward_plan(config, maps=None) -> FusedPlan:
    items = torch.zeros(6, 4, dtype=torch.int32)
    return FusedPlan(
        config=config, block_size=64, causal=True, causal_offset=7, n_heads=1, seq_q=320,
        seq_k=448, device=torch.device("cpu"), items=items, entries=torch.zeros(9, 4,
        dtype=torch.int32), token_words=torch.zeros(2, 64, 2, dtype=torch.int32),
        token_map=None if maps is None else b"\x06" * 128, n_tiles=9,
        sub_rows_log2=6, sub_cols_log2=5, launcher=None,
        maps=maps, max_ctas=None if maps is None else 264, pairs_in_l2=5,
    )  # fmt: skip


def operands():
    """q as [B, S, H, D] memory, k and v [B, Hkv, S, D] with different strides: 6 query heads
    over 2 kv heads."""
    q = torch.zeros(2, 320, 6, 64, dtype=torch.bfloat16).transpose(1, 2)
    k = torch.zeros(2, 2, 448, 64, dtype=torch.bfloat16)
    v = torch.zeros(2, 2, 512, 64, dtype=torch.bfloat16)[:, :, :448]
    out = torch.zeros(2, 6, 320, 64, dtype=torch.bfloat16)
    lse = torch.zeros(2, 6, 320)
    return q, k, v, out, lse


def test_the_mma_sync_forward_fills_its_fields_by_name():
    plan = forward_plan(KernelConfig("bf16", 64))
    q, k, v, out, lse = operands()
    params = decoded(ForwardParams, plan.config.param_values(plan, q, k, v, out, lse, 0.125, 72,
                                                             6))  # fmt: skip
    pointers = {"q": q, "k": k, "v": v, "out": out, "lse": lse, "items": plan.items,
                "entries": plan.entries, "token_words": plan.token_words}  # fmt: skip
    for name, tensor in pointers.items():
        assert getattr(params, name) == tensor.data_ptr(), name
    for prefix, tensor in (("q", q), ("k", k), ("v", v), ("o", out)):
        for axis, letter in enumerate("bhs"):
            if hasattr(params, f"{prefix}_s{letter}"):
                assert getattr(params, f"{prefix}_s{letter}") == tensor.stride(axis), prefix
    assert (params.batch, params.q_heads, params.heads_per_item, params.kv_group) == (2, 6, 6, 3)
    assert (params.seq_q, params.seq_k, params.causal_offset) == (320, 448, 7)
    assert (params.sub_rows_log2, params.sub_cols_log2) == (6, 5)
    assert params.scale_log2 == pytest.approx(0.125 * LOG2_E)
    without_lse = plan.config.param_values(plan, q, k, v, out, None, 0.125, 72, 6)
    assert decoded(ForwardParams, without_lse).lse is None  # a null pointer


def test_the_hopper_forward_fills_its_fields_by_name():
    maps = (b"\x01" * 128, b"\x02" * 128, b"\x03" * 128, 0b100100)
    plan = forward_plan(HopperConfig("bf16", 64, block_n=64, pingpong=False, consumers=1,
                                     min_blocks=3), maps=lambda q, k, v: maps)  # fmt: skip
    q, k, v, out, lse = operands()
    params = decoded(HopperForwardParams, plan.config.param_values(plan, q, k, v, out, lse,
                                                                   0.125, 72, 6))  # fmt: skip
    assert (bytes(params.q_map), bytes(params.k_map), bytes(params.v_map)) == maps[:3]
    assert (params.out, params.lse) == (out.data_ptr(), lse.data_ptr())
    assert (params.items, params.entries) == (plan.items.data_ptr(), plan.entries.data_ptr())
    assert params.token_words == plan.token_words.data_ptr()
    assert bytes(params.token_map) == plan.token_map
    assert (params.o_sb, params.o_sh, params.o_ss) == out.stride()[:3]
    assert (params.n_work, params.batch, params.q_heads, params.heads_per_item) == (72, 2, 6, 6)
    assert (params.kv_group, params.head_group, params.broadcast) == (3, 5, 0b100100)
    assert (params.seq_q, params.seq_k, params.causal_offset) == (320, 448, 7)
    assert (params.sub_rows_log2, params.sub_cols_log2) == (6, 5)
    assert params.scale_log2 == pytest.approx(0.125 * LOG2_E)


class Recorder:
    """Stands in for a ``KernelLauncher``: keeps what each launch would pass."""

    def __init__(self) -> None:
        self.launches = []

    def __call__(self, grid, threads, shared_bytes, stream, *values) -> None:
        self.launches.append((grid, threads, values))


def test_the_backward_fills_its_fields_by_name(monkeypatch):
    monkeypatch.setattr(backward, "current_raw_stream", lambda device_index: 0)
    config = BackwardConfig("bf16", 64, 4, 3)
    prep, main = Recorder(), Recorder()
    lut = [torch.zeros(n, dtype=torch.int32) for n in (8, 36, 4, 8)]
    plan = backward.BackwardPlan(
        config=config, causal_offset=7, n_heads=1, seq_q=320, seq_k=448, lists=lut[0],
        entries=lut[1], order=lut[2], token_words=lut[3], n_k_tiles=7, n_tiles=9,
        sub_rows_log2=6, sub_cols_log2=5, prep=prep, main=main,
    )  # fmt: skip
    q, k, v, out, lse = operands()
    grad_out = torch.zeros_like(out)
    grad_lse = torch.zeros_like(lse)
    backward.launch_backward(plan, q, k, v, out, lse, grad_out, grad_lse, 0.125)
    ((_, _, prep_values),) = prep.launches
    first = decoded(BackwardPrepParams, prep_values)
    assert (first.o, first.d_o, first.lse, first.d_lse) == tuple(
        t.data_ptr() for t in (out, grad_out, lse, grad_lse))  # fmt: skip
    assert first.delta - first.lse2 == 2 * 6 * 320 * 4  # two rows of one buffer, fp32
    assert (first.o_sb, first.o_sh, first.o_ss) == out.stride()[:3]
    assert (first.do_sb, first.do_sh, first.do_ss) == grad_out.stride()[:3]
    assert (first.q_heads, first.seq_q, first.seq_q_pad, first.n_rows) == (6, 320, 320, 3840)
    ((grid, threads, main_values),) = main.launches
    assert (grid, threads) == (7 * 2 * 2, config.threads)
    second = decoded(BackwardParams, main_values)
    assert (second.q, second.k, second.v, second.d_o) == tuple(
        t.data_ptr() for t in (q, k, v, grad_out))  # fmt: skip
    assert (second.lse2, second.delta) == (first.lse2, first.delta)
    assert (second.lists, second.entries, second.order, second.token_words) == tuple(
        t.data_ptr() for t in lut)  # fmt: skip
    for prefix, tensor in (("q", q), ("k", k), ("v", v), ("do", grad_out)):
        strides = tuple(getattr(second, f"{prefix}_s{letter}") for letter in "bhs")
        assert strides == tensor.stride()[:3], prefix
    assert (second.batch, second.q_heads, second.kv_heads, second.kv_group) == (2, 6, 2, 3)
    assert (second.shared_layout, second.n_k_tiles) == (1, 7)
    assert (second.seq_q, second.seq_k, second.seq_q_pad, second.causal_offset) == (
        320, 448, 320, 7)  # fmt: skip
    assert (second.sub_rows_log2, second.sub_cols_log2) == (6, 5)
    assert second.scale == pytest.approx(0.125)
    assert second.scale_log2 == pytest.approx(0.125 * LOG2_E)


def hopper_backward_plan(dq: str, recorders: dict, monkeypatch) -> sm90.HopperBackwardPlan:
    """A plan of the ``dq`` build whose launches are recorded (CPU tensors, fake maps)."""
    monkeypatch.setattr(sm90, "current_raw_stream", lambda device_index: 0)
    maps = (b"\x01" * 128, b"\x02" * 128, b"\x03" * 128, b"\x04" * 128, 0b11000000)
    dq_plan = None
    if dq == "separate":
        dq_plan = sm90_dq.DqPlan(
            config=sm90_dq.HopperDqConfig("bf16", 64), items=torch.zeros(6, 4, dtype=torch.int32),
            entries=torch.zeros(9, 4, dtype=torch.int32),
            token_words=torch.zeros(1, 128, 2, dtype=torch.int32), token_map=b"\x08" * 128,
            n_tiles=9, sub_rows_log2=6, sub_cols_log2=5, launcher=recorders["dq"],
            maps=lambda *tensors: maps,
        )  # fmt: skip
    lut = [torch.zeros(n, dtype=torch.int32) for n in (8, 36, 4)]
    return sm90.HopperBackwardPlan(
        config=sm90.HopperBackwardConfig("bf16", 64, dq=dq), causal_offset=7, n_heads=1,
        lists=lut[0], entries=lut[1], order=lut[2],
        token_words=torch.zeros(1, 128, 2, dtype=torch.int32), token_map=b"\x07" * 128,
        n_k_tiles=4, n_tiles=9, sub_rows_log2=6, sub_cols_log2=5, n_sms=132,
        prep=recorders["prep"], main=recorders["main"],
        convert=recorders["convert"] if dq == "bulk" else None, dq=dq_plan,
        maps=lambda *tensors: maps,
    )  # fmt: skip


@pytest.mark.parametrize("dq", ["bulk", "atomic", "separate"])
def test_the_hopper_backward_fills_its_fields_by_name(dq, monkeypatch):
    recorders = {name: Recorder() for name in ("prep", "main", "convert", "dq")}
    plan = hopper_backward_plan(dq, recorders, monkeypatch)
    mapped = []  # the rows each launch's rows map was encoded for
    monkeypatch.setattr(sm90, "rows_map", lambda rows, block_m: mapped.append((rows, block_m))
                        or b"\x05" * 128)  # fmt: skip
    q, k, v, out, lse = operands()
    grad_out = torch.zeros_like(out)
    dq_grad, dk, dv = plan.launch(q, k, v, out, lse, grad_out, None, scale=0.125)
    assert dq_grad.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    ((grid, threads, values),) = recorders["main"].launches
    assert (grid, threads) == (4 * 2 * 2 * 3, 384)  # 16 CTAs < 264: the group of 3 is split
    main = decoded(HopperBackwardParams, values)
    assert [bytes(getattr(main, f"{x}_map")) for x in ("q", "k", "v", "do")] == [
        bytes([i]) * 128 for i in (1, 2, 3, 4)]  # fmt: skip
    ((_, _, prep_values),) = recorders["prep"].launches
    prep = decoded(BackwardPrepParams, prep_values)
    ((rows, block_m),) = mapped
    assert (rows[0].data_ptr(), rows[1].data_ptr(), block_m) == (prep.lse2, prep.delta, 64)
    assert (bytes(main.rows_map), bytes(main.token_map)) == (b"\x05" * 128, plan.token_map)
    assert (main.dq_acc is None) == (dq == "separate")  # a null pointer
    assert (main.dk, main.dv) == (None, None)  # fp32 partials of the three splits instead
    assert main.dv_part - main.dk_part == 2 * 2 * 3 * 448 * 64 * 4
    assert (main.lists, main.entries, main.order) == tuple(
        t.data_ptr() for t in (plan.lists, plan.entries, plan.order))  # fmt: skip
    assert (main.batch, main.q_heads, main.kv_heads, main.kv_group) == (2, 6, 2, 3)
    assert (main.n_splits, main.shared_layout, main.n_k_tiles) == (3, 1, 4)
    assert (main.seq_q, main.seq_k, main.seq_q_pad, main.broadcast) == (320, 448, 320, 0b11000000)
    assert main.key_tiles_inner == 0  # 12 pairs x 8 <= 132 SMs: a key tile's pairs together
    assert (main.causal_offset, main.sub_rows_log2, main.sub_cols_log2) == (7, 6, 5)
    assert (main.scale, main.scale_log2) == (pytest.approx(0.125), pytest.approx(0.125 * LOG2_E))
    if dq == "bulk":
        ((_, _, convert_values),) = recorders["convert"].launches
        convert = decoded(DqConvertParams, convert_values)
        assert (convert.dq_acc, convert.dq) == (main.dq_acc, dq_grad.data_ptr())
        assert (convert.n_vectors, convert.seq_q, convert.seq_q_pad) == (2 * 6 * 320 * 16, 320, 320)
    if dq == "separate":
        ((grid, _, dq_values),) = recorders["dq"].launches
        second = decoded(HopperDqParams, dq_values)
        assert grid == second.n_work == 6 * 2 * 6  # items x batch x heads per item
        assert (second.lse2, second.delta, second.dq) == (prep.lse2, prep.delta,
                                                          dq_grad.data_ptr())  # fmt: skip
        assert (second.items, second.entries) == tuple(
            t.data_ptr() for t in (plan.dq.items, plan.dq.entries))  # fmt: skip
        assert bytes(second.token_map) == plan.dq.token_map
        assert (second.batch, second.q_heads, second.heads_per_item, second.kv_group) == (
            2, 6, 6, 3)  # fmt: skip
        assert (second.seq_q, second.seq_k, second.seq_q_pad, second.broadcast) == (
            320, 448, 320, 0b11000000)  # fmt: skip
        assert (second.causal_offset, second.sub_rows_log2, second.sub_cols_log2) == (7, 6, 5)
        assert second.scale == pytest.approx(0.125)
