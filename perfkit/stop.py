"""A stop was requested (Ctrl-C, SIGTERM): one record of it, and how code that waits looks at it.

Why a record, not only an exception. Python runs a signal handler in the main thread between two
bytecodes of whatever Python code runs there, also where Python drops exceptions: inside a ctypes
callback (libbpf calls ``RingBuffer``'s once per record, inside ``ring_buffer__consume``), a
``__del__`` method, a weakref callback. A handler that raises ``KeyboardInterrupt`` there only gets
"Exception ignored on calling ctypes callback function" printed, and the command runs on: issue 22
saw ``perfkit search`` take a SIGTERM inside the ring buffer's callback and exit 0. So:

- ``request(signum)``, called by the handlers (the CLI's ``perfkit.cli._signals.stop_on_signals``,
  the testbed's library-mode SIGTERM handler, ``perfkit experiment``'s before its kernel runs),
  records the first stop and raises it at once -- a sleep, a wait on a process, a socket read or a
  subprocess is interrupted, as Python's own Ctrl-C does -- except inside ``deferred()``.
- ``deferred()`` is the region a caller wraps around a C function that calls back into Python
  (``RingBuffer.drain``), or around a few steps that must not be cut in half (a new run's
  directory and its metadata). There the request is kept *pending* and nothing is raised; the
  region raises it as it ends, right after the C function returned. The caller marks the region,
  not the callback: a callback cannot mark itself before its first bytecode, and CPython runs a
  pending handler exactly there (on entering the function), so a depth counter kept by the
  callback itself would miss the most likely moment: a signal that arrived while libbpf was in C.
- A stop raised anyway where Python drops exceptions (a ``__del__``, a callback that no
  ``deferred()`` covers) reaches ``sys.unraisablehook``; this module's hook makes it pending again
  (a ``KeyboardInterrupt`` of another handler, such as a Jupyter kernel's, is made pending too).
- ``check()`` raises a pending stop. Every loop that waits calls it on each turn: the generator's
  send loop, the wait for the sink to drain, the trials of a search, the units of a campaign, the
  waits for the metrics servers and Prometheus. Other threads cannot take a handler's exception:
  their loops ask ``requested()`` (the generator's threads stop sending) and the main thread raises.
- Later signals raise nothing (``request`` returns False; the CLI's handler prints that perfkit is
  still stopping), so the clean-up the first stop started is never cut short.

Why not a flag alone: a handler that never raises leaves ``time.sleep``, ``Popen.wait`` and socket
reads blocked until they end by themselves (PEP 475 resumes them after the handler), so a stop
during a 60 s wait for Prometheus would take a minute. Raising at once where that is safe keeps
stops immediate; the record, the deferral and the hook make the rare unsafe moment harmless.

Measured (the stop drill, ``tests/test_reliability.py``, on the real testbed): with the callback
slowed to 2 ms a record so that random signals often land in it, searches lost 11 of 40 stops
before this module (exit 0 after "Exception ignored on calling ctypes callback function"), 0 of 40
after. What the CLI exits with is ``perfkit.cli._signals``'s.

The state belongs to the process and the handlers run in the main thread; ``deferred()`` counts
only the main thread's regions (a ring buffer drained by another thread needs none: no handler
runs there). ``reset()`` forgets a stop (a new command in the same process, a testbed's handler
put away).
"""
from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Iterator


class _State:
    signum = 0
    """The first stop's signal number; 0: none requested."""
    repeats = 0
    """Signals after the first one (they raised nothing)."""
    pending: BaseException | None = None
    """A stop requested (or dropped where Python ignores exceptions) and not raised yet."""
    raised: BaseException | None = None
    """The exception last raised for the stop: the hook knows it by identity."""
    depth = 0
    """The main thread's nesting of ``deferred()`` regions."""


_s = _State()
_next_hook: Any = None


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def request(signum: int, exc: BaseException | None = None) -> bool:
    """Record a stop by ``signum`` (from a signal handler, in the main thread) and raise ``exc``
    (default ``KeyboardInterrupt``) now, or, inside ``deferred()``, when the region ends.

    Returns False, raising nothing, for a signal after the first (the stop is under way); returns
    True only when the first stop was deferred.
    """
    if _s.signum:
        _s.repeats += 1
        return False
    _install_hook()
    _s.signum = signum
    err = exc if exc is not None else KeyboardInterrupt()
    if _s.depth:
        _s.pending = err
        return True
    _s.raised = err
    raise err


def requested() -> int | None:
    """The signal number of the stop requested, or None."""
    return _s.signum or None


def check() -> None:
    """Raise a pending stop (in the main thread; elsewhere nothing: the main thread will)."""
    if _s.pending is not None and not _s.depth and _main_thread():
        err, _s.pending = _s.pending, None
        _s.raised = err
        raise err


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A region where a stop is kept pending rather than raised: around a call into C that calls
    back into Python. It raises the stop as it ends (the outermost region, in the main thread)."""
    if not _main_thread():
        yield
        return
    _s.depth += 1
    try:
        yield
    finally:
        _s.depth -= 1
        check()   # also over an error of the C call: the stop is what the user asked for


def reset() -> None:
    """Forget the stop (its record, a pending raise)."""
    _s.signum, _s.repeats, _s.pending, _s.raised = 0, 0, None, None


def _hook(unraisable: Any) -> None:
    """``sys.unraisablehook``: a stop that Python was about to drop is made pending instead."""
    exc = unraisable.exc_value
    if exc is not None and (exc is _s.raised or isinstance(exc, KeyboardInterrupt)):
        if _s.pending is None:
            _s.pending = exc
        return
    (_next_hook or sys.__unraisablehook__)(unraisable)


def _install_hook() -> None:
    """Put ``_hook`` in front of the current hook (again, if something replaced it)."""
    global _next_hook
    if sys.unraisablehook is not _hook:
        _next_hook = sys.unraisablehook
        sys.unraisablehook = _hook


_install_hook()
