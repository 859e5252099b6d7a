"""``tools/sanitize.py`` without a GPU: the sanitizer summaries it reads (clean and failing),
the verdict of a run, the commands and environments of the runs, its arguments and its JSON."""

from __future__ import annotations

import dataclasses
import json
import zlib

import pytest
import torch

import gpu
from gpu.backward.builds import BUILDS, choose_backward_build
from gpu.forward.builds import choose_config, hopper_builds
from gpu.support import DTYPES, HEAD_DIMS
from tests.scripts import ROOT, load_script

SCRIPT = ROOT / "tools" / "sanitize.py"


@pytest.fixture(scope="module")
def sanitize():
    return load_script("tools/sanitize")


CASE = "bwd-fp16-d64-b16-s200"
MEMCHECK_CLEAN = f"""========= COMPUTE-SANITIZER
case {CASE}: ok rel err q 2.0e-04, k 2.0e-04, v 2.1e-04 (3.2 s)
========= ERROR SUMMARY: 0 errors
"""
MEMCHECK_FAILING = f"""========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at attention_bwd+0x1c40
=========     by thread (5,0,0) in block (2,0,0)
=========     Address 0x7f2a3c000200 is out of bounds
=========
case {CASE}: ok rel err q 2.0e-04, k 2.0e-04, v 2.1e-04 (9.1 s)
========= ERROR SUMMARY: 2 errors
"""
RACECHECK_CLEAN = f"""========= COMPUTE-SANITIZER
case {CASE}: ok rel err q 2.0e-04, k 2.0e-04, v 2.1e-04 (20.0 s)
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""
RACECHECK_FAILING = f"""========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at attention_bwd+0x2a0
=========     and Read access at attention_bwd+0x3b0 [508 hazards]
=========
case {CASE}: ok rel err q 2.0e-04, k 2.0e-04, v 2.1e-04 (20.0 s)
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_summaries_are_read_clean_and_failing(sanitize):
    assert sanitize.parse_summary(MEMCHECK_CLEAN) == {
        "line": "========= ERROR SUMMARY: 0 errors", "errors": 0}  # fmt: skip
    assert sanitize.parse_summary(MEMCHECK_FAILING)["errors"] == 2
    assert sanitize.parse_summary("========= ERROR SUMMARY: 1 error\n")["errors"] == 1
    assert sanitize.parse_summary(RACECHECK_CLEAN) == {
        "line": "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)",
        "errors": 0, "warnings": 0, "hazards": 0,
    }  # fmt: skip
    failing = sanitize.parse_summary(RACECHECK_FAILING)
    assert (failing["hazards"], failing["errors"], failing["warnings"]) == (1, 1, 0)
    warned = sanitize.parse_summary("RACECHECK SUMMARY: 3 hazards displayed (0 errors, 3 warnings)")
    assert (warned["errors"], warned["warnings"]) == (0, 3)
    assert sanitize.parse_summary("ERROR SUMMARY: 0 errors\nERROR SUMMARY: 4 errors")["errors"] == 4
    assert sanitize.parse_summary("Traceback (most recent call last):\n") is None


def _finished(sanitize, output, returncode=0, seconds=12.5):
    return sanitize.Finished(returncode, output, seconds)


def test_a_clean_run_passes_and_keeps_no_tail(sanitize):
    for tool, output in (("memcheck", MEMCHECK_CLEAN), ("racecheck", RACECHECK_CLEAN)):
        record = sanitize.judge(tool, [CASE], _finished(sanitize, output))
        assert record["passed"] and record["errors"] == 0 and record["seconds"] == 12.5
        assert record["results"] == {CASE: "ok"} and "tail" not in record


def test_failing_runs_say_why_and_keep_the_tail(sanitize):
    record = sanitize.judge("memcheck", [CASE], _finished(sanitize, MEMCHECK_FAILING, 1))
    assert not record["passed"] and record["errors"] == 2
    assert record["problems"] == ["exit status 1", "ERROR SUMMARY: 2 errors"]
    assert "Invalid __global__ read of size 16 bytes" in "\n".join(record["tail"])
    record = sanitize.judge("racecheck", [CASE], _finished(sanitize, RACECHECK_FAILING, 1))
    assert not record["passed"] and record["hazards"] == 1
    # a clean sanitizer but a wrong result, a crash before the summary, a hang
    wrong = MEMCHECK_CLEAN.replace(": ok", ": WRONG")
    assert sanitize.judge("memcheck", [CASE], _finished(sanitize, wrong, 1))["problems"] == [
        "exit status 1", f"{CASE}: WRONG"]  # fmt: skip
    crashed = sanitize.judge("memcheck", [CASE], _finished(sanitize, "Segmentation fault", -11))
    assert crashed["problems"] == [
        "exit status -11", "no sanitizer summary", f"{CASE}: did not finish"]  # fmt: skip
    hung = sanitize.judge("memcheck", [CASE], _finished(sanitize, "", None, 600.0))
    assert not hung["passed"] and hung["problems"][0] == "timed out after 600 s"


def test_tail_is_bounded(sanitize):
    output = "\n".join(f"line {i}" for i in range(1000))
    record = sanitize.judge(None, [CASE], _finished(sanitize, output, 1))
    assert len(record["tail"]) == sanitize.TAIL_LINES and record["tail"][-1] == "line 999"


def test_plain_run_then_one_run_per_tool_and_case(sanitize):
    calls = []

    def fake_run(command, env, timeout):
        calls.append((list(command), env, timeout))
        names = command[command.index("--cases") + 1].split(",")
        lines = [f"case {name}: ok rel err out 1e-03 (1.0 s)" for name in names]
        if "--tool" in command:
            tool = command[command.index("--tool") + 1]
            failing = tool == "racecheck" and names == [CASE]
            lines.append(RACECHECK_FAILING if failing else "========= ERROR SUMMARY: 0 errors")
        return sanitize.Finished(0, "\n".join(lines), 1.0)

    names = [sanitize.CASES[0].name, CASE]
    checks = sanitize.run_checks(names, ["memcheck", "racecheck", "initcheck"],
                                 "/opt/cs/compute-sanitizer", timeout=99, run=fake_run)  # fmt: skip
    commands = [command for command, _, _ in calls]
    assert len(calls) == 1 + 3 * 2 and all(timeout == 99 for _, _, timeout in calls)
    assert commands[0][1:] == [str(SCRIPT), "--child", "--cases", ",".join(names)]
    assert "PYTORCH_NO_CUDA_MEMORY_CACHING" not in calls[0][1]
    memcheck = commands[1]
    assert memcheck[:5] == ["/opt/cs/compute-sanitizer", "--tool", "memcheck",
                            "--error-exitcode", "1"]  # fmt: skip
    assert memcheck.count("--kernel-name") == len(sanitize.KERNEL_NAMES)
    assert "kns=attention_bwd" in memcheck and memcheck[-1] == names[0]
    assert "--kernel-name" not in commands[5]  # initcheck sees every kernel
    for _, env, _ in calls[1:]:
        assert env["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
        assert env["PYTHONPATH"].split(":")[0] == str(SCRIPT.parents[1])
    assert checks["plain"]["passed"] and checks["plain"]["results"] == dict.fromkeys(names, "ok")
    verdicts = [(r["tool"], r["cases"], r["passed"]) for r in checks["runs"]]
    assert ("racecheck", [CASE], False) in verdicts and sum(not p for *_, p in verdicts) == 1
    assert not checks["passed"]


def test_arguments(sanitize, capsys):
    args = sanitize._arguments([])
    assert args.tools == ("memcheck", "racecheck") and len(args.cases) == len(sanitize.CASES)
    assert not args.child and args.timeout == 600
    assert sanitize._arguments(["--quick"]).cases == list(sanitize.QUICK)
    assert sanitize._arguments(["--tools", "all"]).tools == sanitize.TOOLS
    assert sanitize._arguments(["--child", "--cases", CASE]).cases == [CASE]
    for argv, message in (
        (["--tools", "memcheck,leakcheck"], "--tools must be among .* got leakcheck"),
        (["--cases", "fwd-nothing"], "unknown case fwd-nothing"),
        (["--quick", "--cases", CASE], "give --cases or --quick, not both"),
        (["--timeout", "0"], "--timeout must be > 0"),
    ):
        with pytest.raises(SystemExit):
            sanitize._arguments(argv)
        assert message.split(" .*")[0] in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        sanitize._arguments(["--list"])
    assert exited.value.code == 0 and CASE in capsys.readouterr().out.splitlines()


def test_cases_cover_what_they_claim(sanitize):
    cases = sanitize.CASES
    names = [case.name for case in cases]
    assert len(set(names)) == len(names) and set(sanitize.QUICK) <= set(names)
    assert {c.kind for c in cases} == {"forward", "backward", "sdd"}
    for kind in ("forward", "backward"):
        these = [c for c in cases if c.kind == kind]
        assert {(c.dtype, c.head_dim) for c in these} == {
            (t, d) for t in DTYPES for d in (64, 128)}  # fmt: skip
        assert {16, 64} <= {c.block for c in these}
        assert any(c.seq_q % c.block or c.seq_k % c.block for c in these)  # partial blocks
        assert any(c.kv_heads < c.q_heads for c in these)
        assert {c.alignment for c in these if c.causal} == {"top_left", "bottom_right"}
        assert any(c.bshd for c in these) and any(c.mma_sync for c in these)
        assert any(c.shared_layout for c in these)


def test_forward_cases_plan_every_hopper_build(sanitize):
    """On Hopper the plans of the forward cases choose each build a plan can take, without and
    with partial blocks (``gpu.forward.builds.hopper_builds``)."""
    chosen = set()
    for case in sanitize.CASES:
        if case.kind != "forward" or case.mma_sync or case.empty:
            continue
        gen = torch.Generator().manual_seed(zlib.crc32(case.name.encode()))
        blocks, partials = sanitize.case_layout(case, gen)
        plan = gpu.plan(
            blocks, case.block, causal=case.causal, causal_alignment=case.alignment,
            seq_q=case.seq_q, seq_k=case.seq_k, partials=partials, device="cpu",
        )  # fmt: skip
        config = choose_config(head_dim=case.head_dim, dtype=DTYPES[case.dtype], wgmma=True,
                               work=plan.tile_work, tokens=plan.n_partials > 0)  # fmt: skip
        chosen.add(dataclasses.replace(config, dtype="bf16"))
    builds = {
        config
        for head_dim in HEAD_DIMS
        for tokens in (False, True)
        for config, _ in hopper_builds("bf16", head_dim, tokens=tokens)
    }
    assert chosen == builds


def test_backward_cases_run_every_backward_build(sanitize):
    """The backward cases run each build of ``gpu.backward.builds.BUILDS`` on Hopper, and the
    token-level cases have partial tiles."""
    chosen = {
        choose_backward_build(hopper=not case.mma_sync, deterministic=False,
                              build=case.backward_build)
        for case in sanitize.CASES if case.kind == "backward"
    }  # fmt: skip
    assert chosen == set(BUILDS)
    for case in sanitize.CASES:
        if case.token_window:
            _, partials = sanitize.case_layout(case, torch.Generator())
            assert partials[0].shape[0] > 0, case.name


@pytest.mark.parametrize("name", [case.name for case in load_script("tools/sanitize").CASES
                                  if case.kind != "sdd"])  # fmt: skip
def test_case_code_runs_on_the_cpu_against_the_reference(sanitize, name):
    """The cases' tensors, layouts, autograd and comparison, with impl="reference" on the CPU."""
    case = next(case for case in sanitize.CASES if case.name == name)
    right, details = sanitize.run_case(case, device="cpu", impl="reference")
    assert right, details
    assert details.startswith("rel err " + ("q" if case.kind == "backward" else "out"))


def test_a_wrong_result_is_caught(sanitize):
    ref = {"out": torch.randn(2, 8, dtype=torch.float64), "lse": torch.tensor([1.0, -torch.inf])}
    got = {"out": ref["out"].float(), "lse": ref["lse"].float()}
    assert sanitize._compare(got, ref, 1e-3)[0]
    assert not sanitize._compare({**got, "out": got["out"] * 1.1}, ref, 1e-3)[0]
    assert not sanitize._compare({**got, "lse": torch.tensor([1.0, 0.0])}, ref, 1e-3)[0]
    assert not sanitize._compare({**got, "out": got["out"] * torch.nan}, ref, 1e-3)[0]


def test_child_prints_one_result_line_per_case(sanitize, capsys):
    status = sanitize.child([CASE])  # without a GPU the case reports an error and the child fails
    results = sanitize.case_results(capsys.readouterr().out)
    assert results == {CASE: "ok" if status == 0 else "ERROR"}


def test_finding_the_sanitizer(sanitize, tmp_path, monkeypatch):
    assert sanitize.find_sanitizer(str(tmp_path / "missing")) is None
    fake = tmp_path / "compute-sanitizer"
    fake.write_text("#!/bin/sh\necho 'Version 2026.3.0.0 (build 1) (public-release)'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert sanitize.find_sanitizer() == str(fake)
    assert sanitize.sanitizer_version(str(fake)) == "Version 2026.3.0.0 (build 1) (public-release)"


def test_main_writes_the_record(sanitize, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        sanitize.main(["--quick"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sanitize, "find_sanitizer", lambda explicit: None)
    with pytest.raises(SystemExit, match="compute-sanitizer not found"):
        sanitize.main(["--quick"])

    def fake_checks(names, tools, sanitizer, *, timeout):
        record = {"tool": None, "cases": list(names), "passed": True, "seconds": 1.0}
        runs = [{**record, "tool": tool, "errors": 0} for tool in tools for _ in names]
        return {"plain": record, "runs": runs, "passed": True}

    monkeypatch.setattr(sanitize, "find_sanitizer", lambda explicit: "/opt/compute-sanitizer")
    monkeypatch.setattr(sanitize, "sanitizer_version", lambda path: "Version 2026.3.0.0")
    monkeypatch.setattr(sanitize, "environment", lambda: {"gpu": "NVIDIA H200", "torch": "2"})
    monkeypatch.setattr(sanitize, "run_checks", fake_checks)
    out = tmp_path / "checks" / "sanitizer.json"
    assert sanitize.main(["--quick", "--tools", "memcheck", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["format"] == "blocksparse-sanitizer" and document["passed"]
    assert document["environment"]["compute_sanitizer"] == "Version 2026.3.0.0"
    assert document["tools"] == ["memcheck"] and len(document["runs"]) == len(sanitize.QUICK)
    assert [c["name"] for c in document["cases"]] == list(sanitize.QUICK)
    assert document["command"].endswith(f"sanitize.py --quick --tools memcheck --out {out}")
    assert sanitize._default_out(document).name == f"{document['date'][:10]}-h200-sanitizer.json"
