"""A test aid for the stop drill (``tests/test_reliability.py``): on ``PYTHONPATH``, Python imports it at
start-up and every copy ``ctypes.string_at`` makes takes 2 ms more. perfkit calls it only inside the
ring buffer's ctypes callback (``perfkit.libbpf.RingBuffer``, ~64 sink captures a trial), so a signal
sent at a random moment of a search often lands while Python runs that callback (issue 22)."""
import ctypes
import time

_copy = ctypes.string_at


def _slow_copy(addr: int, size: int = -1) -> bytes:
    time.sleep(0.002)
    return _copy(addr, size)


ctypes.string_at = _slow_copy
