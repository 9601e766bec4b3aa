"""A dataplane perfkit did not write: xdp-tools' ``xdp-filter``, attached and configured by its own
CLI (the NF's own loader, ``DutProgram.attached_by_nf``), with XDP_DROP and XDP_PASS verdicts.

Kept in the tests until dataplane description files (``perfkit.describe``) can say the same: its
setup runs ``xdp-filter load <ingress> -m native`` and ``xdp-filter port 9 --mode dst --proto udp``
in the DUT's namespace; its counters are xdp-filter's own statistics map (``xdp_stats_map``: packets
per XDP action); its teardown runs ``xdp-filter unload``.

xdp-filter keeps its state pinned under ``/sys/fs/bpf/xdp-filter``, one per host. So that tests and
users of the host do not share it, each instance gets a bpffs of its own
(``/run/perfkit/nf-bpffs/<ifname>``), bind-mounted over ``/sys/fs/bpf`` in a mount namespace made
for each command (``unshare -m``); the thread that runs them is in the DUT's network namespace.

Traffic: the calibrated DUT's IPv4/UDP frames, to UDP port 9 (denied: XDP_DROP) or 5001 (allowed:
XDP_PASS, to the DUT's kernel, counted by its IPv4 counters: its destination 198.19.0.1 is no
address of the DUT, which does not forward, so nothing comes back).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import socket
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from perfkit import dataplanes
from perfkit.dataplane import BenchSpec, Dataplane, DutProgram, Emitted, Param, Traffic
from perfkit.dataplanes.calib.traffic import DST_ADDR, SRC_ADDR, CalibTraffic, sport
from perfkit.errors import ConfigError, TestbedError
from perfkit.libbpf import Map, Program, _MapInfo, lib, prog_from_id, xdp_prog_id
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
from perfkit.units import FCS_LEN

NAME = "xdpfilter"
BPFFS_ROOT = Path("/run/perfkit/nf-bpffs")
#: xdp-filter's statistics map: a per-CPU array indexed by XDP action, of {rx_packets, rx_bytes}.
ACTIONS = ("XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT")
DENIED_PORT, ALLOWED_PORT = 9, 5001
#: Run one command in a mount namespace of its own whose /sys/fs/bpf is the instance's bpffs.
_PRIVATE_BPFFS = 'mount --make-rprivate / && mount --bind "$0" /sys/fs/bpf && exec "$@"'


@dataclass(frozen=True)
class FilterTraffic(CalibTraffic):
    """The calibrated DUT's frames to UDP port ``dport``, which xdp-filter gives ``verdict``."""

    dport: int = DENIED_PORT
    verdict: str = "XDP_DROP"

    def packet(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        src, dst = self.macs.into(self.ingress)
        hdr = (Ether(src=src, dst=dst) / IP(src=SRC_ADDR, dst=DST_ADDR, id=0, flags="DF", ttl=64) /
               UDP(sport=sport(flow % self.flows), dport=self.dport, chksum=0))
        pad = self.frame_size - FCS_LEN - len(hdr) - SIGNATURE.size
        return bytes(hdr / Raw(SIGNATURE.pack(SIGNATURE_MAGIC, stream, seq, ts) + b"\0" * pad))

    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """The frame as the kernel gets it (XDP_PASS: unchanged; XDP_DROP: nothing leaves)."""
        return self.packet(flow, seq, stream, ts)


def xdp_filter(bpffs: Path, *argv: str, check: bool = True) -> str:
    """``xdp-filter ARGV`` with ``bpffs`` as its /sys/fs/bpf, in the calling thread's network namespace."""
    cmd = ["unshare", "-m", "sh", "-c", _PRIVATE_BPFFS, str(bpffs), "xdp-filter", *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise TestbedError(f"xdp-filter {' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def parse_status(text: str) -> dict[str, int]:
    """Packets per action from ``xdp-filter status``'s aggregate statistics."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(XDP_\w+)\s+(\d+) pkts", text, re.M)}


def _pinned_map(path: Path) -> Map:
    fd = lib().bpf_obj_get(str(path).encode())
    if fd < 0:
        raise TestbedError(f"xdp-filter: no map pinned at {path}")
    try:
        info = _MapInfo()
        size = ctypes.c_uint32(ctypes.sizeof(info))
        lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size))
    finally:
        os.close(fd)
    return Map.from_id(info.id)


class XdpFilterDut(DutProgram):
    """xdp-filter attached by its own CLI to the ingress port, UDP port 9 denied."""

    attached_by_nf = True

    def __init__(self, traffic: FilterTraffic, ifindex: int):
        # Dataplane.load runs with the calling thread in the DUT's namespace
        self.ifname = socket.if_indextoname(ifindex)
        self.bpffs = BPFFS_ROOT / self.ifname
        self._prog: Program | None = None
        self._stats: Map | None = None
        self._netns = os.open("/proc/thread-self/ns/net", os.O_RDONLY)  # where teardown must run
        self.bpffs.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "bpf", "bpf", str(self.bpffs)], check=True)
        try:
            xdp_filter(self.bpffs, "load", self.ifname, "-m", "native")
            xdp_filter(self.bpffs, "port", str(DENIED_PORT), "--mode", "dst", "--proto", "udp")
            prog_id = xdp_prog_id(ifindex, "native")
            if not prog_id:
                raise TestbedError(f"xdp-filter load {self.ifname}: setup attached nothing")
            self._prog = prog_from_id(prog_id)
            self._stats = _pinned_map(self.bpffs / "xdp-filter" / "xdp_stats_map")
        except BaseException:
            self.close()
            raise

    @property
    def program(self) -> Program:
        assert self._prog is not None
        return self._prog

    def counters(self) -> dict[str, int]:
        assert self._stats is not None
        out = {}
        for i, action in enumerate(ACTIONS):
            raw = self._stats.lookup(struct.pack("=I", i)) or b""
            out[action] = sum(struct.unpack_from("=Q", v)[0] for v in self._stats.percpu_values(raw))
        return out

    def status(self) -> dict[str, int]:
        """xdp-filter's own count, per action, as ``xdp-filter status`` prints it."""
        with _inside_fd(self._netns):
            return parse_status(xdp_filter(self.bpffs, "status"))

    def close(self) -> None:
        """Unload xdp-filter (the NF's teardown) and drop its bpffs; idempotent, also half set up."""
        if self._netns < 0:
            return
        with contextlib.suppress(Exception), _inside_fd(self._netns):
            xdp_filter(self.bpffs, "unload", self.ifname, check=False)
        for held in (self._stats, self._prog):
            if isinstance(held, Map):
                held.close()
            elif held is not None:
                os.close(held.fd)
        self._stats = self._prog = None
        subprocess.run(["umount", "-l", str(self.bpffs)], capture_output=True)
        with contextlib.suppress(OSError):
            self.bpffs.rmdir()
        os.close(self._netns)
        self._netns = -1


@contextlib.contextmanager
def _inside_fd(fd: int) -> Iterator[None]:
    """The calling thread in the network namespace ``fd`` refers to (gone: a ConfigError is no use)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:
            raise TestbedError("setns into the DUT's namespace failed")
        try:
            yield
        finally:
            ctypes.CDLL(None, use_errno=True).setns(home, 0x40000000)
    finally:
        os.close(home)


class XdpFilterDataplane(Dataplane):
    name = NAME
    title = "xdp-filter"
    params = (Param("verdict", "XDP_DROP", "traffic to the denied port (XDP_DROP) or to an allowed one (XDP_PASS)",
                    choices=("XDP_DROP", "XDP_PASS")),)
    variant = "verdict"

    def traffic(self, frame_size: int, flows: int, params: Mapping[str, Any]) -> Traffic:
        verdict = params.get("verdict", "XDP_DROP")
        return FilterTraffic(frame_size=frame_size, flows=flows, verdict=verdict,
                             dport=DENIED_PORT if verdict == "XDP_DROP" else ALLOWED_PORT)

    def load(self, traffic: Traffic, ifindex_a: int, ifindex_b: int, cpumap: bool = False) -> DutProgram:
        if cpumap:
            raise ConfigError("dut_cores", "several", "1: xdp-filter attaches itself")
        return XdpFilterDut(traffic, ifindex_a if traffic.ingress == "a" else ifindex_b)  # type: ignore[arg-type]

    def forwarding(self, traffic: Traffic) -> frozenset[str]:
        """The counter of the verdict the traffic should get: for denied traffic, dropped as intended."""
        return frozenset({traffic.verdict})

    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        raise ConfigError("dataplane xdpfilter", "emit", "no reference model")

    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        return "xdp-filter sends nothing out of a port"

    def bench_spec(self, frame_size: int, params: Mapping[str, Any], seed: int = 1) -> tuple[BenchSpec, DutProgram]:
        raise ConfigError("dataplane xdpfilter", "prog-bench", "no bench spec")

    def min_frame_size(self, params: Mapping[str, Any]) -> int:
        return FilterTraffic().min_frame_size


DATAPLANE = XdpFilterDataplane()


@contextlib.contextmanager
def registered() -> Iterator[Dataplane]:
    """``perfkit.dataplanes.get("xdpfilter")`` finds it while the block runs."""
    original = dataplanes.get

    def get(name: str) -> Dataplane:
        return DATAPLANE if name == NAME else original(name)

    dataplanes.get = get  # type: ignore[assignment]
    try:
        yield DATAPLANE
    finally:
        dataplanes.get = original  # type: ignore[assignment]


