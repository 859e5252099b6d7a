"""Our speedup over each peer, per standard case, from a forward and a forward+backward sweep: the
tables the README and the closing notes quote, as markdown. A sweep run in parts (one document
per head dim, say) gives its documents one after another; they share the sweep's columns.

    PYTHONPATH=. python benchmarks/peer_ratios.py benchmarks/results/<date>-h200-peers.json \
        benchmarks/results/<date>-h200-peers-backward.json

A cell is the peer's time over ours (above 1: we are faster): ours is the public call with a
plan (``fused_api``, else ``fused``); Triton Flex is the faster of ``flex`` and ``flex_tuned``.
A peer that did not run a case shows "—", with its reason listed under the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpu.bench.results import is_backward, read_document, results_by_name

OURS = ("fused_api", "fused")
PEERS = (("Flex Triton", ("flex", "flex_tuned")), ("Flex FLASH", ("flex_flash",)),
         ("cuDNN BSA", ("cudnn_bsa",)))  # fmt: skip


def ratios(case: dict[str, Any]) -> tuple[dict[str, float | None], list[str]]:
    """``({peer: its ms over ours}, [why a peer did not run])`` for one case of a document."""
    by_name = results_by_name(case)
    ours = next((by_name[n]["ms"] for n in OURS if _ran(by_name.get(n))), None)
    cells, reasons = {}, []
    for label, names in PEERS:
        times = [by_name[n]["ms"] for n in names if _ran(by_name.get(n))]
        cells[label] = min(times) / ours if times and ours else None
        if not times:
            reasons += [f"{case['case']} / {n}: {by_name[n].get('message')}" for n in names
                        if n in by_name]  # fmt: skip
    return cells, reasons


def _ran(result: dict[str, Any] | None) -> bool:
    return result is not None and result["status"] == "ok" and bool(result.get("ms"))


def markdown(docs: list[dict[str, Any]]) -> str:
    """One table: a row per case, per mode (forward, forward+backward) a column per peer; the
    documents of one mode are the parts of one sweep (a case is taken from the first that has
    it)."""
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        by_mode.setdefault("fwd+bwd" if is_backward(doc["cases"][0]) else "fwd", []).append(doc)
    columns = [f"{mode} vs {label}" for mode in by_mode for label, _ in PEERS]
    names = list(dict.fromkeys(case["case"] for doc in docs for case in doc["cases"]))
    rows, notes = [], []
    for name in names:
        cells = []
        for parts in by_mode.values():
            cases = (c for doc in parts for c in doc["cases"] if c["case"] == name)
            case = next(cases, None)
            found, why = ratios(case) if case else ({}, [])
            notes += why
            cells += [f"{found[label]:.2f}" if found.get(label) else "—" for label, _ in PEERS]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    lines = ["| case | " + " | ".join(columns) + " |", "| --- " * (len(columns) + 1) + "|"]
    return "\n".join([*lines, *rows, "", *(f"- {note}" for note in dict.fromkeys(notes))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("documents", nargs="+", help="benchmark JSON files (gpu.bench --out)")
    args = parser.parse_args(argv)
    docs = [read_document(Path(p).read_bytes(), Path(p).name) for p in args.documents]
    print(markdown(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
