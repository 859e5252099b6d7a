"""One contender run several ways (``contenders.Variants``): which way stands for it.

The harness measures every variant like a contender (same error check against the fp64
reference, then the same timer). The contender's result is the fastest variant (lowest median)
among those that ran and are accurate: a variant that failed, could not run, or whose errors
exceed bf16/fp16 noise by a wide margin (``ACCURACY_LIMITS``; measured noise is about 2.3e-3
relative, 8e-3 max-abs for the output and 2.5e-3 relative for the gradients; such a result is
never timed and "failed") is never picked. Without a reference (``check_error=False``)
accuracy is unknown and every variant that ran is eligible. Each variant's time and errors are
kept (``VariantResult``), so the JSON shows the choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The largest error an accurate variant may have, per result field (None: not measured).
ACCURACY_LIMITS = {
    "rel_error": 1e-2,
    "max_abs_error": 5e-2,
    "dq_rel_error": 2e-2,
    "dk_rel_error": 2e-2,
    "dv_rel_error": 2e-2,
}


@dataclass(frozen=True)
class VariantResult:
    """What one variant gave: its median (the step's with a backward pass), errors and status."""

    name: str
    status: str  # "ok", "unavailable" or "failed"
    message: str = ""
    ms: float | None = None
    fwd_ms: float | None = None
    bwd_ms: float | None = None
    rel_error: float | None = None
    max_abs_error: float | None = None
    grad_rel_error: float | None = None  # the largest of dq, dk, dv's
    accurate: bool | None = None  # None: nothing checked (no reference, or it did not run)
    seconds: float | None = None  # wall time: compile, check and timing


def accurate(result: Any) -> bool | None:
    """Whether every error of ``result`` is within ``ACCURACY_LIMITS`` (NaN never is); None when
    none was measured.

    >>> from types import SimpleNamespace as R
    >>> accurate(R(rel_error=3e-3, max_abs_error=8e-3)), accurate(R(rel_error=0.2))
    (True, False)
    """
    measured = [(getattr(result, key, None), limit) for key, limit in ACCURACY_LIMITS.items()]
    measured = [(value, limit) for value, limit in measured if value is not None]
    if not measured:
        return None
    return all(not math.isnan(value) and value <= limit for value, limit in measured)


def fastest_accurate(results: Sequence[Any]) -> int | None:
    """The index of the fastest result that ran and is not inaccurate, or None."""
    eligible = [
        i for i, r in enumerate(results)
        if r.status == "ok" and r.ms is not None and accurate(r) is not False
    ]  # fmt: skip
    return min(eligible, key=lambda i: results[i].ms) if eligible else None


def variant_result(name: str, result: Any) -> VariantResult:
    """The summary of a variant's ``ContenderResult``."""
    grads = [getattr(result, f"{g}_rel_error") for g in ("dq", "dk", "dv")]
    grads = [g for g in grads if g is not None]
    return VariantResult(
        name, result.status, result.message, result.ms, result.fwd_ms, result.bwd_ms,
        result.rel_error, result.max_abs_error, max(grads) if grads else None, accurate(result),
        result.seconds,
    )  # fmt: skip


def no_variant(variants: Sequence[VariantResult]) -> tuple[str, str]:
    """``(status, message)`` of a contender none of whose variants can stand for it: "failed"
    when one ran or failed, "unavailable" when none could run."""
    status = "unavailable" if all(v.status == "unavailable" for v in variants) else "failed"
    return status, "no accurate variant ran; " + "; ".join(f"{v.name}: {v.message}"
                                                          for v in variants)  # fmt: skip
