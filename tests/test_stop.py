"""perfkit.stop: a stop is recorded once, kept inside a deferred region, never dropped.

The signal cases run in a child process of their own: its handlers and ``sys.unraisablehook`` are
then perfkit's alone (pytest replaces the hook around each test).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from perfkit import stop
from tests.conftest import ROOT


@pytest.fixture(autouse=True)
def _no_stop_left():
    stop.reset()
    yield
    stop.reset()


def test_a_stop_outside_a_region_is_raised_at_once_and_only_the_first():
    with pytest.raises(KeyboardInterrupt):
        stop.request(signal.SIGTERM)
    assert stop.requested() == signal.SIGTERM
    assert stop.request(signal.SIGINT) is False          # a repeat raises nothing: the clean-up goes on
    assert stop.requested() == signal.SIGTERM
    stop.check()                                         # nothing pending: it was raised


def test_a_stop_inside_a_region_is_raised_as_the_outermost_region_ends():
    reached = []
    with pytest.raises(SystemExit) as exc:
        with stop.deferred():
            with stop.deferred():
                assert stop.request(signal.SIGTERM, SystemExit(143)) is True
                stop.check()                             # inside: kept
                reached.append("inner")
            reached.append("outer")                      # the inner region's end raised nothing
    assert reached == ["inner", "outer"] and exc.value.code == 143


def test_a_region_that_fails_with_a_stop_pending_raises_the_stop():
    with pytest.raises(KeyboardInterrupt) as exc:
        with stop.deferred():
            stop.request(signal.SIGINT)
            raise OSError("the C call failed")
    assert isinstance(exc.value.__context__, OSError)


def test_another_thread_neither_defers_nor_raises_a_stop():
    def worker() -> None:
        with stop.deferred():
            out.append(stop._s.depth)
        stop.check()
        out.append(stop.requested())

    out: list[object] = []
    stop._s.pending = KeyboardInterrupt()                # as if dropped somewhere
    stop._s.signum = signal.SIGTERM
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert out == [0, signal.SIGTERM]                    # the main thread raises it, not the worker
    with pytest.raises(KeyboardInterrupt):
        stop.check()


# A stop raised where Python drops exceptions (here a __del__; a ctypes callback is the same) is made
# pending by the hook and raised by the next check, silently (no "Exception ignored" on stderr).
_DROPPED = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    from perfkit import stop
    from perfkit.cli._signals import stop_on_signals

    class SignalledWhileCollected:
        def __del__(self):
            os.kill(os.getpid(), int(sys.argv[2]))
            self.after = True                     # the handler runs in here: its raise is dropped

    try:
        with stop_on_signals():
            SignalledWhileCollected()
            print("dropped")
            stop.check()
            print("not stopped")
    except KeyboardInterrupt:
        print("stopped")
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_dropped_by_python_is_raised_by_the_next_check(sig):
    proc = subprocess.run([sys.executable, "-c", _DROPPED, str(ROOT), str(int(sig))], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "dropped\nstopped\n", "")


# The CLI's handler: the first signal stops, a second one only says so.
_TWICE = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, sys.argv[1])
    from perfkit.cli._signals import stop_on_signals

    with stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            print("not stopped")
        except KeyboardInterrupt:
            os.kill(os.getpid(), signal.SIGINT)   # while cleaning up
            print("cleaned up")
""")


def test_a_second_signal_does_not_cut_the_clean_up_short():
    proc = subprocess.run([sys.executable, "-c", _TWICE, str(ROOT)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "cleaned up\n", proc
    assert proc.stderr.startswith("perfkit: SIGINT again: still stopping cleanly"), proc.stderr


def test_a_ctrl_c_python_wrapped_while_creating_a_class_exits_130(monkeypatch, capsys):
    """A SIGINT landing in ``__set_name__`` while an imported module builds a dataclass reaches the
    CLI as ``RuntimeError`` from ``KeyboardInterrupt`` (Python 3.11): it is an interruption, exit 130,
    not an internal error (the stop drill met it once, at 0.36 s into ``perfkit search ndr``)."""
    import argparse

    import perfkit.cli as cli

    class Interrupts:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    def build() -> argparse.ArgumentParser:
        class Search:   # what importing a command's module does, interrupted
            goals = Interrupts()
        raise AssertionError("not reached")

    monkeypatch.setattr(cli, "build_parser", build)
    assert cli._main(["search"]) == 130
    assert capsys.readouterr().err.strip() == "perfkit: interrupted"
    assert not cli._caused_by_interrupt(RuntimeError("a bug"))
