"""Jobs beside the page: one per key, one at a time per lane, the newest waiting one kept."""

from __future__ import annotations

import os
import threading
import time

from ui import background


def wait_done(job: background.Job, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not job.done:
        assert time.monotonic() < deadline, "the job did not finish"
        time.sleep(0.005)


def test_a_lane_runs_one_job_at_a_time_and_the_newest_waiting_one_after_it():
    lane, release, ran = f"lane-{time.monotonic_ns()}", threading.Event(), []

    def work(name: str, gate: threading.Event | None = None):
        def run() -> None:
            if gate is not None:
                gate.wait(10)
            ran.append(name)

        return run

    first = background.start(f"{lane}-a", work("a", release), lane=lane)
    second = background.start(f"{lane}-b", work("b"), lane=lane)
    third = background.start(f"{lane}-c", work("c"), lane=lane)
    assert background.start(f"{lane}-c", work("c again"), lane=lane) is third  # once per key
    assert second.done and not third.done and not first.done  # b is superseded by c
    release.set()
    wait_done(third)
    assert ran == ["a", "c"] and first.done and first.error is None
    fourth = background.start(f"{lane}-d", work("d"), lane=lane)  # the lane is idle again
    wait_done(fourth)
    assert ran == ["a", "c", "d"]


def test_a_failed_job_keeps_its_reason_and_frees_its_lane():
    lane = f"lane-{time.monotonic_ns()}"

    def fail() -> None:
        raise ValueError("no such head")

    failed = background.start(f"{lane}-x", fail, lane=lane)
    wait_done(failed)
    assert failed.error == "no such head"
    assert background.start(f"{lane}-x", fail, lane=lane) is failed
    after = background.start(f"{lane}-y", lambda: None, lane=lane)
    wait_done(after)
    assert after.error is None


def test_prepare_runs_at_the_servers_priority_and_work_after_lowering_it():
    lane, seen, gate = f"lane-{time.monotonic_ns()}", {}, threading.Event()

    def priority() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def prepare() -> None:
        seen["prepare"] = priority()

    def work() -> None:
        seen["work"] = priority()

    busy = background.start(f"{lane}-a", lambda: gate.wait(10), lane=lane)  # holds the lane
    queued = background.start(f"{lane}-b", work, lane=lane, prepare=prepare)
    wait_done(background.start(f"{lane}-c", work, prepare=prepare))  # no lane: at once
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert seen == {"prepare": base, "work": max(base, background.NICENESS)}
    assert not busy.done and not queued.done  # waits for the lane, its prepare too
    seen.clear()
    gate.set()
    wait_done(queued)
    assert seen == {"prepare": base, "work": max(base, background.NICENESS)}
