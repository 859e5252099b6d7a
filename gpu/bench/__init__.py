"""The benchmark harness: every contender timed the same way on the same inputs.

>>> from gpu.bench import BenchConfig, run_benchmark                      # doctest: +SKIP
>>> result = run_benchmark(BenchConfig(seq_q=4096), layout, progress=print)  # doctest: +SKIP
>>> result.result("fused").tflops                                          # doctest: +SKIP

``BenchConfig(backward=True)`` times training steps (forward then backward) instead.
``python -m gpu.bench --help`` runs it from the command line (a standard case, a saved design,
or the standard sweep) and writes JSON; ``benchmarks/README.md`` explains the columns.
"""

from gpu.bench.config import (
    BACKWARD_CONTENDERS,
    CONTENDERS,
    DEFAULT_BACKWARD_CONTENDERS,
    DEFAULT_CONTENDERS,
    BenchConfig,
)
from gpu.bench.harness import (
    BenchResult,
    BenchSession,
    ContenderResult,
    run_benchmark,
    seeded_inputs,
    seeded_training_inputs,
)
from gpu.bench.report import document, format_table, write_json

__all__ = [
    "BACKWARD_CONTENDERS",
    "CONTENDERS",
    "DEFAULT_BACKWARD_CONTENDERS",
    "DEFAULT_CONTENDERS",
    "BenchConfig",
    "BenchResult",
    "BenchSession",
    "ContenderResult",
    "document",
    "format_table",
    "run_benchmark",
    "seeded_inputs",
    "seeded_training_inputs",
    "write_json",
]
