"""Work that runs beside the page: one thread per key, its result kept where the page finds it.

A design held as runs (past the dense grid) is analysed on its runs in a background thread, so
no page waits for its statistics and lints: the page starts the job (``start``), shows a
progress line and polls in a fragment until the job is done (``state_of``), then reruns to show
the result, which the job leaves in the analysis cache keyed by the design's content. A job is
started once per key however many pages ask (again if its result left the cache); one that
fails keeps its reason for the pages.

Jobs of one ``lane`` run one at a time: a job asked for while another of its lane runs waits,
and a newer one takes its place (it is then done with no result: a page that still wants it
asks again). Painting a long design starts an analysis per stroke; this way a burst of strokes
costs the analysis running and the one of the last design, not one per stroke side by side.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from designer.threads import lower_priority

#: How far a job's thread steps back when a page's thread wants the core.
NICENESS = 10
#: Finished jobs remembered (their results live elsewhere; this keeps their outcome).
MAX_JOBS = 64


@dataclass
class Job:
    """A job's outcome so far: when it started, whether it is done, and why it failed."""

    started: float
    done: bool = False
    error: str | None = None


_JOBS: dict[str, Job] = {}
_LOCK = threading.Lock()
#: Per lane: whether a job of it runs, and the job waiting for it (with its work).
_RUNNING: set[str] = set()
_WAITING: dict[str, tuple[str, Job, Callable[[], object], Callable[[], object] | None]] = {}


def start(
    key: str,
    work: Callable[[], object],
    *,
    lane: str | None = None,
    prepare: Callable[[], object] | None = None,
) -> Job:
    """Run ``work`` on a thread of its own unless a job under ``key`` runs (or waits) already or
    failed (a job that finished is run again: the caller asks only when its result is gone);
    within ``lane``, after the job running there (see the module docstring). ``prepare`` runs
    first, before the thread lowers its priority: work that other threads may wait for, such
    as compiling code, must not be starved."""
    with _LOCK:
        job = _JOBS.get(key)
        if job is not None and (not job.done or job.error is not None):
            return job
        if len(_JOBS) >= MAX_JOBS:  # forget the oldest finished ones
            for old in [k for k, j in _JOBS.items() if j.done][: MAX_JOBS // 2]:
                del _JOBS[old]
        job = _JOBS[key] = Job(time.monotonic())
        if lane is not None and lane in _RUNNING:
            if lane in _WAITING:
                _WAITING[lane][1].done = True  # superseded: never run
            _WAITING[lane] = (key, job, work, prepare)
            return job
        if lane is not None:
            _RUNNING.add(lane)
    _launch(key, job, work, prepare, lane)
    return job


def _launch(
    key: str,
    job: Job,
    work: Callable[[], object],
    prepare: Callable[[], object] | None,
    lane: str | None,
) -> None:
    def run() -> None:
        try:
            if prepare is not None:
                prepare()
            _at_lower_priority(work)
        except (ValueError, TypeError, MemoryError) as error:
            job.error = str(error) or type(error).__name__
        finally:
            job.done = True
            if lane is not None:
                _next_in(lane)

    threading.Thread(target=run, name=f"background-{key[:12]}", daemon=True).start()


def _at_lower_priority(work: Callable[[], object]) -> None:
    """Run ``work`` on a thread of its own at ``NICENESS`` and wait for it (raising what it
    raised). The calling thread keeps its priority, and so does the next job it starts: a
    thread starts at the priority of the thread that starts it."""
    failure: list[BaseException] = []

    def lowered() -> None:
        lower_priority(NICENESS)
        try:
            work()
        except BaseException as error:  # re-raised on the job's thread
            failure.append(error)

    thread = threading.Thread(target=lowered, name=threading.current_thread().name, daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _next_in(lane: str) -> None:
    """Start the job waiting in ``lane``, if any, else mark the lane idle."""
    with _LOCK:
        waiting = _WAITING.pop(lane, None)
        if waiting is None:
            _RUNNING.discard(lane)
            return
    key, job, work, prepare = waiting
    job.started = time.monotonic()
    _launch(key, job, work, prepare, lane)


def state_of(key: str) -> Job | None:
    """The job under ``key``, if one was started."""
    with _LOCK:
        return _JOBS.get(key)
