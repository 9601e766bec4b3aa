"""A test aid: named points at which a test can make perfkit die by SIGKILL.

``crashpoint("name")`` does nothing unless the environment variable ``PERFKIT_CRASHPOINT`` names
that point. ``tests/test_reliability.py`` sets it for a ``perfkit run`` subprocess to kill it at a
dangerous moment (half a journal line written, a trial file half written, the testbed half set
up ...) and then checks that ``perfkit clean`` and ``perfkit run --resume`` lose and repeat nothing.

``PERFKIT_CRASHPOINT=name[@N]``: die the N-th time (default: the first) this process reaches the
point. ``crashpoint("name", after=s)`` dies ``s`` seconds after the point is reached (from a timer
thread, while the caller goes on: e.g. in the middle of a trial's traffic).

Points (``grep -rn 'crashpoint("' perfkit`` lists them): ``testbed.setup``, ``trial.mid``,
``store.write``, ``store.renamed``, ``store.atomic``, ``journal.append``, ``unit.searched``,
``push.sent``, ``pushes.append``.
"""
from __future__ import annotations

import os
import signal
import threading

ENV = "PERFKIT_CRASHPOINT"
_hits: dict[str, int] = {}


def crashpoint(name: str, after: float = 0.0) -> None:
    """SIGKILL this process here if ``$PERFKIT_CRASHPOINT`` names this point (see module doc)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    wanted, _, nth = spec.partition("@")
    if wanted != name:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] != int(nth or 1):
        return
    if after > 0:
        timer = threading.Timer(after, os.kill, (os.getpid(), signal.SIGKILL))
        timer.daemon = True
        timer.start()
        return
    os.kill(os.getpid(), signal.SIGKILL)
