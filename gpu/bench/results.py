"""Benchmark documents as the panel reads them: checks, table rows and the numbers charts need.

A document is the harness's JSON (``gpu.bench.document``: format, version, date, environment,
cases), the same whether ``python -m gpu.bench`` wrote it or the panel did. The panel adds a few
keys the harness ignores: ``design`` (name and digest), ``kind`` ("run" or "sweep"),
``details`` (per-head errors, see ``gpu.bench.details``) and, in a sweep, a ``sweep`` entry per
case. Everything here works on plain dicts, so stored and fresh runs are shown the same way.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gpu.bench.config import FORWARD_BACKWARD

#: The benchmark document's format name and version (``gpu.bench.report.document`` writes it).
FORMAT = "blocksparse-bench"
VERSION = 1

#: Dense baselines in order of preference for "speedup vs dense".
DENSE_BASELINES = ("sdpa_cudnn", "sdpa", "sdpa_flash")
#: Contenders that compute the layout's attention with our kernels (per-head errors shown).
OUR_IMPLS = ("fused", "sdd")
_RESULT_NUMBERS = (
    "ms", "tflops", "own_tflops", "speedup_vs_cudnn", "speedup_vs_flex", "speedup_vs_bsa",
    "max_abs_error", "rel_error", "fwd_ms", "bwd_ms", "bwd_tflops", "dq_rel_error",
    "dk_rel_error", "dv_rel_error", "grad_max_abs_error", "seconds",
)  # fmt: skip


def read_document(text: str | bytes, source: str) -> dict[str, Any]:
    """Parse and check a benchmark JSON document; ``ValueError`` naming ``source`` and the
    problem otherwise."""
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{source} is not JSON: {error}") from None
    try:
        _check_document(doc)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{source} is not a benchmark document: {error}") from None
    return doc


def claims_benchmark_format(data: bytes) -> bool:
    """Whether JSON ``data`` says it is a benchmark document (its ``format``), right or not;
    True for text that is no JSON object, so that ``read_document`` says what is wrong."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return True
    return not isinstance(doc, dict) or doc.get("format") == FORMAT


def _check_document(doc: Any) -> None:
    _expect(doc, dict, "the document")
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ValueError(
            f"format must be {FORMAT!r} version {VERSION}, got {doc.get('format')!r} "
            f"version {doc.get('version')!r}"
        )
    _expect(doc.get("cases"), list, "cases")
    if not doc["cases"]:
        raise ValueError("cases must not be empty")
    for i, case in enumerate(doc["cases"]):
        _expect(case, dict, f"cases[{i}]")
        _expect(case.get("case"), str, f"cases[{i}].case")
        _expect(case.get("config"), dict, f"cases[{i}].config")
        _expect(case.get("layout"), dict, f"cases[{i}].layout")
        _expect(case.get("results"), list, f"cases[{i}].results")
        for j, result in enumerate(case["results"]):
            where = f"cases[{i}].results[{j}]"
            _expect(result, dict, where)
            _expect(result.get("name"), str, f"{where}.name")
            _expect(result.get("status"), str, f"{where}.status")
            for key in _RESULT_NUMBERS:
                value = result.get(key)
                if value is not None and (isinstance(value, bool) or not _is_number(value)):
                    raise TypeError(f"{where}.{key} must be a number or null, got {value!r}")
        density = case["layout"].get("token_density")
        if not _is_number(density) or not 0 <= density <= 1:
            raise ValueError(f"cases[{i}].layout.token_density must be in [0, 1], got {density!r}")


def _expect(value: Any, kind: type, what: str) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{what} must be a {kind.__name__}, got {type(value).__name__}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def document_bytes(doc: dict[str, Any]) -> bytes:
    """The document as the JSON text ``python -m gpu.bench`` writes (NaN kept)."""
    return (json.dumps(doc, indent=1, allow_nan=True) + "\n").encode()


def plain_document(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """``doc`` as it reads back from its JSON (tuples become lists), checked like a file."""
    return read_document(document_bytes(doc), source)


def results_by_name(case: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The case's contender results by name."""
    return {result["name"]: result for result in case["results"]}


def measured(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The results that have a time."""
    return [r for r in case["results"] if r["status"] == "ok" and r.get("ms")]


def dense_baseline(case: dict[str, Any]) -> dict[str, Any] | None:
    """The dense SDPA result speedups are measured against (cuDNN first), if any ran."""
    by_name = results_by_name(case)
    for name in DENSE_BASELINES:
        result = by_name.get(name)
        if result and result["status"] == "ok" and result.get("ms"):
            return result
    return None


def speedup_vs_dense(case: dict[str, Any], result: dict[str, Any]) -> float | None:
    """How many times faster than the dense baseline ``result`` ran."""
    baseline = dense_baseline(case)
    if baseline is None or not result.get("ms"):
        return None
    return baseline["ms"] / result["ms"]


def ideal_speedup(case: dict[str, Any]) -> float | None:
    """The speedup of skipping exactly the inactive pairs: the dense baseline's own FLOPs over
    the layout's (``1 / density``, counted against causal attention in causal cases)."""
    baseline = dense_baseline(case)
    if baseline and baseline.get("own_tflops") and baseline.get("tflops"):
        return baseline["own_tflops"] / baseline["tflops"]
    density = case["layout"]["token_density"]
    return 1 / density if density > 0 else None


def failure_kind(message: str) -> str:
    """What kind of failure a contender's message describes, for a headline."""
    text = message.lower()
    if "out of memory" in text or "outofmemory" in text:
        return "out of memory"
    if "compil" in text or "nvrtc" in text:
        return "kernel compile error"
    if "launch" in text or "cuda error" in text or "cuda_error" in text or "illegal" in text:
        return "kernel launch failure"
    return "error"


def is_backward(case: dict[str, Any]) -> bool:
    """Whether the case timed training steps (forward then backward)."""
    return case.get("mode") == FORWARD_BACKWARD


def table_rows(case: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per contender: numbers stay numbers (None where not measured), the note says why
    one did not run or which variant stands for it. A training step's rows name its time
    "fwd+bwd ms" and add the forward and backward alone and the gradients' relative errors."""
    backward = is_backward(case)
    rows = []
    for r in case["results"]:
        note = r.get("message") or ""
        if r["status"] == "failed":
            note = f"{failure_kind(note)}: {note}"
        elif r.get("variant"):  # the fastest accurate way a contender with variants ran
            note = f"variant {r['variant']}"
        row = {"contender": r["name"], "status": r["status"]}
        if backward:
            row |= {"fwd+bwd ms": r.get("ms"), "fwd ms": r.get("fwd_ms"), "bwd ms": r.get("bwd_ms"),
                    "TFLOP/s": r.get("tflops"), "bwd TFLOP/s": r.get("bwd_tflops")}  # fmt: skip
        else:
            row |= {"ms": r.get("ms"), "TFLOP/s": r.get("tflops")}
        row |= {
            "x dense": speedup_vs_dense(case, r),
            "x cuDNN": r.get("speedup_vs_cudnn"),
            "x Flex": r.get("speedup_vs_flex"),
            "x BSA": r.get("speedup_vs_bsa"),
            "max abs err": r.get("max_abs_error"),
            "rel err": r.get("rel_error"),
        }
        if backward:
            row |= {f"{g} rel err": r.get(f"{g}_rel_error") for g in ("dq", "dk", "dv")}
            row["grad max abs err"] = r.get("grad_max_abs_error")
        rows.append(row | {"note": note})
    return rows


def problems(case: dict[str, Any]) -> list[str]:
    """A line for each contender that failed or could not run, with its cause."""
    lines = []
    for r in case["results"]:
        message = r.get("message") or ""
        if r["status"] == "failed":
            lines.append(f"{r['name']} failed ({failure_kind(message)}): {message}")
        elif r["status"] != "ok":
            lines.append(f"{r['name']} not measured: {message}")
    return lines


def case_label(case: dict[str, Any]) -> str:
    """A short description of a case: shape, block, dtype and density."""
    config, layout = case["config"], case["layout"]
    seq_k = config.get("seq_k") or config["seq_q"]
    shape = (
        f"S={config['seq_q']}" if seq_k == config["seq_q"] else f"Sq={config['seq_q']} Sk={seq_k}"
    )
    return (
        f"B={config['batch']} H={config['heads']} {shape} D={config['head_dim']} "
        f"{config['dtype']} · block {layout['block_size']} · "
        f"density {100 * layout['token_density']:.2f}%"
        + (" · causal" if config["causal"] else "")
        + (" · forward + backward" if is_backward(case) else "")
    )


def document_label(doc: dict[str, Any], source: str) -> str:
    """How a stored document is listed: date, what it holds, GPU."""
    gpu = doc.get("environment", {}).get("gpu", "n/a")
    cases = doc["cases"]
    what = doc.get("kind") or ("sweep" if len(cases) > 1 else "run")
    first = case_label(cases[0]) if len(cases) == 1 else f"{len(cases)} cases"
    if len(cases) > 1 and doc.get("mode") == FORWARD_BACKWARD:
        first += " · forward + backward"
    return f"{doc.get('date', '?')} · {what} · {first} · {gpu} ({source})"


def short_label(doc: dict[str, Any]) -> str:
    """A legend entry for a one-case document: when, batch, head dim, dtype, and "fwd+bwd" for a
    training step (its times are not the forward's)."""
    case = doc["cases"][0]
    config = case["config"]
    label = f"{doc.get('date', '?')} B={config['batch']} D={config['head_dim']} {config['dtype']}"
    return label + (" fwd+bwd" if is_backward(case) else "")


def finite(value: Any) -> bool:
    """A number that can be plotted."""
    return _is_number(value) and math.isfinite(value)
