"""Network namespaces: run code or commands inside one.

``inside(name)`` moves the *calling thread* into a namespace and back (setns(2) is per thread), so
a BPF attach or a live-frames generator thread can work in the tester or DUT namespace while the
rest of the process stays in its own.

What needs no mount of the namespace's own sysfs is done in this process, not by a command under
``ip netns exec`` (a fork, an exec and a private mount namespace with sysfs mounted again, 5-30 ms
each on a 2-vCPU VM): ``link_stats`` (``ethtool -S``, twice per port and trial) and ``set_gro``
(``ethtool -K DEV gro``) ask the kernel with the ``SIOCETHTOOL`` ioctl as ethtool does, ``sysctl``
writes ``/proc/sys/net`` (which shows the namespace of the thread that opens it), and ``batch``
runs several ``ip`` commands as one ``ip -n NS -batch -``.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import re
import socket
import struct
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


def batch(ns: str | None, commands: list[list[str]]) -> None:
    """Run ``ip`` commands (each without the leading ``ip``) as one ``ip [-n NS] -batch -``: it stops
    at the first that fails, and so does this, with ip's message and that command."""
    if not commands:
        return
    lines = [" ".join(c) for c in commands]
    for c, line in zip(commands, lines):
        if any(not a or any(ch.isspace() or ch in "\"'#\\" for ch in a) for a in c):
            raise ValueError(f"ip -batch: an argument that needs quoting in {line!r}")
    cmd = ["ip", *(["-n", ns] if ns else []), "-batch", "-"]
    proc = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True)
    if proc.returncode != 0:
        err = proc.stderr.strip() or proc.stdout.strip()
        # ip names the line that failed: "Command failed -:N"
        failed = next((lines[int(n) - 1] for n in re.findall(r"Command failed -:(\d+)", err)
                       if 0 < int(n) <= len(lines)), "; ".join(lines))
        raise TestbedError(f"ip {'-n ' + ns + ' ' if ns else ''}{failed}: {' '.join(err.split())}")


def sysctl(ns: str | None, **values: str) -> None:
    """``sysctl -qw KEY=VALUE ...`` in ``ns`` for ``net.*`` keys named as sysctl names them
    (``**{"net.ipv6.conf.all.disable_ipv6": "1"}``; no device name with a dot), each written to
    ``/proc/sys/net/...`` by this thread from inside the namespace."""
    with inside(ns):
        for key, value in values.items():
            if not key.startswith("net."):
                raise ValueError(f"sysctl {key}: only net.* keys are per namespace")
            path = "/proc/sys/" + key.replace(".", "/")
            try:
                with open(path, "w") as f:
                    f.write(f"{value}\n")
            except OSError as err:
                raise TestbedError(f"sysctl -w {key}={value} in {ns or 'this namespace'}: {err.strerror}") from None


# -- ethtool's ioctl (include/uapi/linux/ethtool.h) --------------------------------------------
SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS, ETHTOOL_GSTATS, ETHTOOL_SGRO, ETHTOOL_GSSET_INFO = 0x1B, 0x1D, 0x2C, 0x37
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
_IFNAMSIZ = 16


def _ethtool(sock: socket.socket, dev: str, buf: ctypes.Array) -> None:
    """``SIOCETHTOOL`` on ``dev`` with ``buf`` (the command's structure, filled in place)."""
    name = dev.encode()
    if len(name) >= _IFNAMSIZ:
        raise OSError(19, f"no device {dev}")
    ifr = struct.pack(f"{_IFNAMSIZ}sP", name, ctypes.addressof(buf)).ljust(40, b"\0")
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifr)


#: Room for more statistics than the count said: the kernel writes as many as the driver has when
#: it answers (``ethtool_get_strings``, ``ethtool_get_stats``), whatever the buffer's length.
_SPARE_STATS = 1024


def _stats(dev: str) -> dict[str, int]:
    """``ethtool -S dev`` of this thread's namespace: the driver's ``ETH_SS_STATS`` names and values,
    asked as ethtool asks (the count, the names, the values)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        while True:
            info = ctypes.create_string_buffer(struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_STATS, 0))
            _ethtool(sock, dev, info)
            mask, count = struct.unpack_from("=QI", info, 8)
            if not mask & (1 << ETH_SS_STATS) or not count:
                return {}
            room = count + _SPARE_STATS
            names = ctypes.create_string_buffer(struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_STATS, count),
                                                12 + room * ETH_GSTRING_LEN)
            _ethtool(sock, dev, names)
            values = ctypes.create_string_buffer(struct.pack("=II", ETHTOOL_GSTATS, count), 8 + room * 8)
            _ethtool(sock, dev, values)
            n, n_values = struct.unpack_from("=I", names, 8)[0], struct.unpack_from("=I", values, 4)[0]
            if n == n_values:   # else the device changed between the calls (its queues): ask again
                break
    raw = names.raw[12:12 + n * ETH_GSTRING_LEN]
    keys = [raw[i:i + ETH_GSTRING_LEN].split(b"\0", 1)[0].decode(errors="replace").strip()
            for i in range(0, len(raw), ETH_GSTRING_LEN)]
    return dict(zip(keys, struct.unpack_from(f"={n}Q", values, 8)))


def link_stats(ns: str | None, dev: str) -> dict[str, int]:
    """``ethtool -S`` counters of ``dev`` in ``ns`` (veth: per-queue XDP counters); {} without any
    (no such device or namespace, a driver without statistics), as ``ethtool -S`` prints none then."""
    try:
        with inside(ns):
            return _stats(dev)
    except (OSError, TestbedError):
        return {}


def set_gro(ns: str | None, dev: str, on: bool = True) -> None:
    """``ethtool -K dev gro on|off`` in ``ns`` (the ``ETHTOOL_SGRO`` ioctl)."""
    with inside(ns):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                _ethtool(sock, dev, ctypes.create_string_buffer(struct.pack("=II", ETHTOOL_SGRO, int(on))))
            except OSError as err:
                raise TestbedError(f"ethtool -K {dev} gro {'on' if on else 'off'} in {ns}: {err.strerror}") from None
