"""The runtime: reasons without a GPU, option building, source lookup and (on a GPU) compiling."""

from __future__ import annotations

import sys

import pytest

import gpu
from gpu import runtime


@pytest.fixture
def fresh_reason():
    runtime.unavailable_reason.cache_clear()
    yield
    runtime.unavailable_reason.cache_clear()


def test_import_works_and_reason_is_a_sentence_or_none():
    reason = gpu.unavailable_reason()
    assert reason is None or (isinstance(reason, str) and len(reason) > 20)


def test_no_gpu_is_said_before_a_missing_cupy(monkeypatch, fresh_reason):
    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    reason = runtime.unavailable_reason()
    assert reason.startswith("no CUDA GPU")
    assert "CuPy" not in reason


def test_missing_cupy_is_explained_with_the_install_command(monkeypatch, fresh_reason):
    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    reason = runtime.unavailable_reason()
    assert "CuPy is not installed" in reason
    assert 'pip install -e ".[cuda13]"' in reason
    with pytest.raises(gpu.GpuUnavailableError, match="CuPy is not installed"):
        runtime.require_cupy()


def test_a_failing_check_never_raises(monkeypatch, fresh_reason):
    def broken():
        raise OSError("driver exploded")

    monkeypatch.setattr(runtime, "_find_problem", broken)
    assert "driver exploded" in runtime.unavailable_reason()


def test_gpu_unavailable_error_is_a_runtime_error():
    assert issubclass(gpu.GpuUnavailableError, RuntimeError)


@pytest.mark.parametrize(
    ("capability", "arch"),
    [((9, 0), "sm_90a"), ((8, 0), "sm_80"), ((8, 9), "sm_89"), ((12, 0), "sm_120")],
)
def test_arch_for(capability, arch):
    assert runtime.arch_for(capability) == arch


def test_define_options_are_sorted_tokens():
    assert runtime.define_options({"B": 1, "A": "bf16"}) == ("-DA=bf16", "-DB=1")
    options = runtime.compile_options("sm_90a", {"HEAD_DIM": 128})
    assert (
        options[0] == "-arch=sm_90a" and "-std=c++17" in options and options[-1] == "-DHEAD_DIM=128"
    )


@pytest.mark.parametrize(
    ("defines", "error", "match"),
    [
        ({"1BAD": 1}, ValueError, "C identifiers"),
        ({"A B": 1}, ValueError, "C identifiers"),
        ({"FLAG": True}, TypeError, "define FLAG must be an int or str, got bool"),
        ({"X": 1.5}, TypeError, "got float"),
        ({"X": "a b"}, ValueError, "plain token"),
        ({"X": "1;rm"}, ValueError, "plain token"),
    ],
)
def test_define_options_refuse_unsafe_values(defines, error, match):
    with pytest.raises(error, match=match):
        runtime.define_options(defines)


@pytest.mark.parametrize(
    "name", ["../runtime.py", "missing.cu", "/etc/passwd", "x.txt", "forward/../../setup.cu"]
)
def test_kernel_source_refuses_names_of_anything_but_a_kernel_source(name):
    with pytest.raises(ValueError, match=r"source must be a \.cu file of the gpu package"):
        runtime.kernel_source(name)


def test_every_kernel_source_opens_with_a_comment_and_sits_beside_its_launcher():
    sources = runtime.kernel_sources()
    assert set(sources) == {"backward/fused.cu", "backward/sm90.cu", "backward/sm90_dq.cu",
                            "forward/sm80.cu", "forward/sm90.cu", "sdd/pipeline.cu"}  # fmt: skip
    for source in sources:
        assert runtime.kernel_source(source).lstrip().startswith(("//", "/*")), source
        launcher = runtime.PACKAGE_DIR / source.replace(".cu", ".py")
        assert runtime.source_beside(str(launcher)) == source


def test_no_kernel_source_passes_400_lines():
    """Longer sources split their helpers into headers (``gpu/include``, or beside them)."""
    for source in runtime.kernel_sources():
        lines = runtime.kernel_source(source).count("\n")
        assert lines <= 400, (source, lines)


def test_each_source_gets_the_shared_headers_and_its_own():
    forward = dict(runtime.kernel_headers("forward/sm90.cu"))
    assert {"attention_common.cuh", "hopper.cuh", "wgmma.cuh", "persistent_units.cuh"} <= set(
        forward
    )
    assert "attention_bwd_tiles.cuh" not in forward
    assert "attention_bwd_tiles.cuh" in dict(runtime.kernel_headers("backward/fused.cu"))


def test_every_include_resolves_to_a_header_the_source_is_given():
    """What NVRTC gets by name is all a source includes (nvcc finds the same files)."""
    for source in runtime.kernel_sources():
        names = {name for name, _ in runtime.kernel_headers(source)}
        texts = [runtime.kernel_source(source), *(text for _, text in
                                                   runtime.kernel_headers(source))]  # fmt: skip
        included = {
            line.split('"')[1] for text in texts for line in text.splitlines()
            if line.startswith("#include")
        }  # fmt: skip
        assert included <= names, (source, included - names)


@pytest.mark.gpu
def test_on_a_gpu_the_reason_is_none_and_hopper_gets_sm_90a():
    import torch

    assert gpu.unavailable_reason() is None
    if torch.cuda.get_device_capability() == (9, 0):
        assert runtime.arch_for(torch.cuda.get_device_capability()) == "sm_90a"


@pytest.mark.gpu
def test_compile_errors_name_the_source_options_and_log():
    with pytest.raises(RuntimeError, match=r"(?s)gpu/sdd/pipeline\.cu.*DTYPE_BF16 must be defined"):
        runtime.compile_kernel("sdd/pipeline.cu", "sdd_softmax", {"BLOCK": 16})


@pytest.mark.gpu
def test_compiled_kernels_are_cached_per_options():
    defines = {"DTYPE_BF16": 1, "BLOCK": 16, "HEAD_DIM": 64}
    first = runtime.compile_kernel("sdd/pipeline.cu", "sdd_softmax", defines)
    again = runtime.compile_kernel("sdd/pipeline.cu", "sdd_softmax", dict(defines))
    assert len(runtime._MODULES) >= 1
    assert first.attributes["num_regs"] == again.attributes["num_regs"] > 0
