"""Why the designer's tensor work runs on one torch thread, and the context that sees to it;
and the lower priority of threads whose work may wait (``lower_priority``).

Building and reading a layout is many small tensor operations (a pattern step, thousands of
edits). torch's intra-op pool splits each across its threads, which then wait for work by
spinning: on a 2-core machine with anything else running, the default pool made one 3,000-edit
file cost 74 s of CPU instead of 5, and a 1,024-head step 18 times its single-thread time. The
app sets one thread for the whole server; ``one_thread`` does the same around library entry
points (``read_design_file``, ``Recipe.build``) and restores the caller's setting after.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the body with torch's intra-op pool at one thread (a no-op if it already is)."""
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def lower_priority(niceness: int) -> None:
    """Lower the calling thread's priority to ``niceness`` (Linux; elsewhere a no-op): when it
    and a thread at the default 0 both want a core, the other gets it first. A thread cannot
    raise its priority back, so call this only in threads whose remaining work may wait."""
    with contextlib.suppress(OSError, AttributeError):
        now = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        if niceness > now:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
