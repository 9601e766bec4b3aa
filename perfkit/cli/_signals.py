"""Ctrl-C and SIGTERM for long commands (``run``, ``search``): one clean stop.

``stop_on_signals()`` makes the first SIGINT or SIGTERM raise ``KeyboardInterrupt`` (so ``finally``
blocks take the testbed down and a run writes its status), and makes any further one print that
perfkit is stopping instead of interrupting the clean-up. The CLI exits 130 for both signals.

Inside it SIGPIPE is ignored: ``perfkit.cli.main`` restores its default action (so that ``perfkit ...
| head`` ends quietly), which would also kill the process the moment it writes to the socket of a
metrics server that just died; with SIGPIPE ignored that write is an error the push reports, and
the run goes on. Print the command's output after leaving the block.
"""
from __future__ import annotations

import contextlib
import signal
import sys
from typing import Iterator


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    stopping = False

    def handler(signum: int, frame: object) -> None:
        nonlocal stopping
        if stopping:
            print(f"perfkit: {signal.Signals(signum).name} again: still stopping cleanly (taking the testbed "
                  "down, writing what was measured), please wait", file=sys.stderr, flush=True)
            return
        stopping = True
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGPIPE] = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
