"""Network namespaces: run code or commands inside one.

``inside(name)`` moves the *calling thread* into a namespace and back (setns(2) is per thread), so
a BPF attach or a live-frames generator thread can work in the tester or DUT namespace while the
rest of the process stays in its own.
"""
from __future__ import annotations

import ctypes
import os
import socket
import subprocess
from contextlib import contextmanager
from typing import Iterator

from perfkit.errors import TestbedError

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"
_libc = ctypes.CDLL(None, use_errno=True)


def exists(name: str) -> bool:
    return os.path.exists(os.path.join(NETNS_RUN_DIR, name))


def names() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_RUN_DIR))
    except FileNotFoundError:
        return []


def _setns(fd: int, what: str) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise TestbedError(f"setns({what}): {os.strerror(err)}")


@contextmanager
def inside(name: str | None) -> Iterator[None]:
    """Run the body with the calling thread in network namespace ``name`` (None: where it is, as on
    a lab host, whose interfaces are in the namespace perfkit runs in)."""
    if not name:
        yield
        return
    try:
        target = os.open(os.path.join(NETNS_RUN_DIR, name), os.O_RDONLY)
    except FileNotFoundError:
        raise TestbedError(f"network namespace {name!r} does not exist (is the testbed up?)") from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(target, name)
        try:
            yield
        finally:
            _setns(home, "back home")
    finally:
        os.close(target)
        os.close(home)


def ifindex(ns: str | None, dev: str) -> int:
    """Interface index of ``dev`` in namespace ``ns`` (None: this thread's)."""
    with inside(ns):
        try:
            return socket.if_nametoindex(dev)
        except OSError:
            raise TestbedError(f"no interface {dev!r} in namespace {ns!r}") from None


def run(ns: str | None, *argv: str, check: bool = True) -> str:
    """Run a command (in ``ns`` via ``ip netns exec`` when given); returns stdout."""
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise TestbedError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def link_stats(ns: str | None, dev: str) -> dict[str, int]:
    """``ethtool -S`` counters of ``dev`` in ``ns`` (veth: per-queue XDP counters); {} without any."""
    out = run(ns, "ethtool", "-S", dev, check=False)
    stats = {}
    for line in out.splitlines()[1:]:
        key, _, value = line.strip().partition(":")
        if value.strip().lstrip("-").isdigit():
            stats[key.strip()] = int(value)
    return stats
