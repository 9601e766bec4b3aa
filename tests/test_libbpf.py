"""perfkit.libbpf's ownership of libbpf pointers, on the real libbpf and kernel."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Ctrl-C and SIGTERM raise in the main thread between any two calls, so also right after a libbpf
# call that freed something: simulated here by raising KeyboardInterrupt as each free returns.
_INTERRUPTED_CLOSES = textwrap.dedent("""
    import gc, sys
    sys.path.insert(0, sys.argv[1])
    from perfkit import libbpf
    from perfkit.host import stallprobe
    from perfkit.testbed.bpfbuild import object_path

    real = libbpf.lib()
    FREES = {"bpf_link__destroy", "bpf_object__close", "ring_buffer__free"}

    class InterruptedAfterEachFree:
        def __getattr__(self, name):
            fn = getattr(real, name)
            if name not in FREES:
                return fn
            def freed_then_interrupted(*args):
                fn(*args)
                raise KeyboardInterrupt
            return freed_then_interrupted

    obj = libbpf.BpfObject(object_path(stallprobe.PROGRAM))
    obj.attach("stall_wakeup")
    obj.attach("stall_switch")
    ring = libbpf.RingBuffer(obj.map("stall_events"))
    libbpf.lib = InterruptedAfterEachFree
    interrupts = 0
    for _ in range(6):  # closing again after each interrupt, as finally blocks and __del__ do
        for closable in (ring, obj):
            try:
                closable.close()
            except KeyboardInterrupt:
                interrupts += 1
    libbpf.lib = lambda: real
    try:
        obj.map("stall_events")
    except libbpf.BpfError as err:
        print(err)
    del obj, ring
    gc.collect()
    print(interrupts)
""")


def test_a_close_interrupted_after_each_free_frees_nothing_twice():
    """Each pointer is freed once: two links, the ring buffer and the object are 4 frees, so 4
    interrupts; a double free would crash the process (SIGSEGV or glibc's abort). Using the object
    after its close is an error, not a NULL dereference."""
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED_CLOSES, str(ROOT)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.splitlines() == ["stallprobe.o is closed: Bad file descriptor (errno 9)", "4"], proc.stdout


# A stop (SIGTERM, Ctrl-C) that lands while Python runs the ring buffer's ctypes callback, here forced
# by sending the signal from inside the copy the callback makes. Before issue 22's fix the handler's
# KeyboardInterrupt was dropped by ctypes ("Exception ignored on calling ctypes callback function")
# and libbpf got a garbage return value: the drain went on, or failed with a BpfError of a random errno.
_SIGNAL_IN_CALLBACK = textwrap.dedent("""
    import ctypes, os, sys
    sys.path.insert(0, sys.argv[1])
    from perfkit.cli._signals import stop_on_signals
    from perfkit.testbed.sink import Sink

    sig, sent = int(sys.argv[2]), []
    sink = Sink(capture_max=8)
    sink.reset(8)
    for _ in range(8):
        sink.program.test_run(bytes(64))          # captured: the ring holds 8 records
    copy = ctypes.string_at

    def copy_after_a_signal(addr, size=-1):
        if not sent:
            sent.append(sig)
            os.kill(os.getpid(), sig)             # the handler runs here, inside the callback
        return copy(addr, size)

    ctypes.string_at = copy_after_a_signal
    try:
        with stop_on_signals():
            print(f"not stopped: {len(sink.captures())} captures")
    except KeyboardInterrupt:
        print("stopped")
    finally:
        sink.close()
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_inside_the_ring_buffer_callback_is_raised_when_libbpf_returns(sig):
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_IN_CALLBACK, str(ROOT), str(int(sig))], capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "stopped\n", "")
