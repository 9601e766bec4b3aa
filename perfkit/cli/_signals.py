"""Ctrl-C and SIGTERM for every command: one clean stop, exit 130.

``stop_on_signals()`` (``perfkit.cli.main`` runs every command inside it) makes the first SIGINT or
SIGTERM a stop (``perfkit.stop.request``): ``KeyboardInterrupt`` at once, so ``finally`` blocks take
the testbed down and a run writes its status -- or, while Python is inside a call into C that calls
back into Python (libbpf's ring buffer), right after that call returns: an exception raised inside
a ctypes callback would be dropped, and the stop lost (``perfkit.stop`` says why and how). Any
further signal prints that perfkit is stopping and raises nothing, so it cannot cut the clean-up
short. The CLI exits 130 after a stop by either signal (``perfkit.cli.main``).

The exceptions are the process's first and last moments, when nothing of perfkit exists. Until
``perfkit.cli.main`` runs (Python starting and importing perfkit, about 0.5 s) a signal has its
default effect: SIGTERM kills the process (status 143 in a shell, -15 from Python's ``subprocess``),
Ctrl-C ends it with Python's ``KeyboardInterrupt`` (status 130 in a shell, -2). Once the command
has done its work and printed its result, while Python exits, both signals kill the process
(``then_default``: no traceback from a ``KeyboardInterrupt`` in Python's own exit).

``sigpipe_ignored()`` (``run``, ``search``): ``perfkit.cli.main`` restores SIGPIPE's default action
(so that ``perfkit ... | head`` ends quietly), which would also kill the process the moment it
writes to the socket of a metrics server that just died; with SIGPIPE ignored that write is an
error the push reports, and the run goes on. Print the command's output after leaving the block.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Iterator

from perfkit import stop


@contextlib.contextmanager
def stop_on_signals(then_default: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM stop the block once (see the module doc); a stop still pending when the
    block ends is raised there. Afterwards the handlers before it are back, or with ``then_default``
    (the block was the program's work) the signals' default actions. Outside the main thread (where
    no handler can be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if not stop.request(signum):
            print(f"perfkit: {signal.Signals(signum).name} again: still stopping cleanly (taking the testbed "
                  "down, writing what was measured), please wait", file=sys.stderr, flush=True)

    stop.reset()
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
        stop.check()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_DFL if then_default else old)
        stop.reset()


@contextlib.contextmanager
def sigpipe_ignored() -> Iterator[None]:
    """SIGPIPE ignored inside the block (see the module doc)."""
    old = signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGPIPE, old)
