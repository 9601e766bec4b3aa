"""``python -m perfkit`` is the ``perfkit`` command.

Once the command has returned its exit status, the process ends without tearing the interpreter
down: ``exit_now`` does what of the interpreter's exit has an effect outside the process (the
``atexit`` functions: a testbed's ``down``, ``weakref.finalize``'s, logging's flush; the standard
streams' flush) and then ``os._exit``. Freeing the objects of the ~1000 modules a run imports
(pandas, pyarrow, scapy ...) took 0.15-0.45 s of every ``perfkit run`` on a 2-vCPU VM, and
``perfkit ab`` and ``perfkit bisect`` start one such process per unit run (``perfkit.perfci.sides``).
A thread the interpreter would wait for (not a daemon) is waited for as before: such an exit is
the interpreter's own, as is any that does not come through ``main``'s return (``SystemExit`` of
``--help`` or a usage error, a signal's default action).
"""
import sys

from perfkit.cli import main


def exit_now(code: int) -> None:
    """End the process with ``code`` after the atexit functions and a flush of stdout and stderr,
    or by ``sys.exit`` while a non-daemon thread still runs."""
    import atexit
    import os
    import threading

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed or broken stream: as the interpreter's exit, nothing more to say
            pass
    os._exit(code)


if __name__ == "__main__":  # importing the module (pkgutil.walk_packages) must not run the command
    code = main()
    if isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 255:
        exit_now(code)
    sys.exit(code)
