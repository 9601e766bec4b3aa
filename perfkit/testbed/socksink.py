"""The socket sink (``bpf/socksink.bpf.c``): where traffic that the dataplane passes to the DUT's
kernel (XDP_PASS) is counted, on a UDP socket in the DUT's namespace.

A dataplane's traffic says where it is delivered (``Traffic.to_socket``). The socket asks for UDP
GRO (``UDP_GRO``), as an application that reads in batches does: with the DUT port's ``gro`` knob on,
the kernel hands it aggregated packets, and the filter counts the segments they carry; with it off,
every datagram crosses the stack alone (seed 000's offload sweep). The filter drops what it has
counted, so that the figure is the kernel's receive path up to the socket, which no reader's speed
limits.
"""
from __future__ import annotations

import socket
import struct

import numpy as np

from perfkit.layouts import SINK_HIST_BUCKETS, socksink_totals
from perfkit.libbpf import BpfObject
from perfkit.testbed import netns
from perfkit.testbed.bpfbuild import object_path
from perfkit.testbed.sink import SinkReport, StreamStats

#: ``setsockopt`` options Python's socket module does not name (linux/udp.h, asm-generic/socket.h).
UDP_GRO = 104
SO_ATTACH_BPF = 50


class SocketSink:
    """A UDP socket bound to ``addr``:``port`` in namespace ``ns``, counting what the kernel delivers
    to it. ``wire_frame_size``: bytes of the frame each datagram came in [bytes, FCS included]."""

    def __init__(self, ns: str, addr: str, port: int, wire_frame_size: int, dev: str | None = None):
        """``dev``: the DUT port the traffic comes in on, which is given ``addr`` (the namespace's
        reverse-path filter off: the senders' addresses are routed nowhere there)."""
        self.wire_frame_size = wire_frame_size
        self.obj = BpfObject(object_path("socksink"))
        try:
            if dev:
                netns.run(ns, "ip", "addr", "add", f"{addr}/32", "dev", dev)
                netns.sysctl(ns, **{"net.ipv4.conf.all.rp_filter": "0", f"net.ipv4.conf.{dev}.rp_filter": "0"})
            with netns.inside(ns):
                self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.setsockopt(socket.SOL_UDP, UDP_GRO, 1)
            self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_BPF, self.obj.program("socksink").fd)
            self.sock.bind((addr, port))
        except BaseException:
            self.close()
            raise

    def reset(self, capture_max: int | None = None) -> None:
        """Zero the counters (``capture_max``: as ``Sink.reset``'s; a socket captures nothing)."""
        self.obj.map("socksink_totals").zero_all()

    def _totals(self) -> list[socksink_totals]:
        m = self.obj.map("socksink_totals")
        return [socksink_totals.from_bytes(v) for v in m.percpu_values(m.lookup(struct.pack("=I", 0)) or b"")]

    def totals(self) -> tuple[int, int]:
        """(datagrams, bytes of the frames they came in) so far (cheap: for drain polling)."""
        datagrams = sum(t.datagrams for t in self._totals())
        return datagrams, datagrams * self.wire_frame_size

    def skbs(self) -> int:
        """Packets the socket received: fewer than the datagrams when GRO aggregated them."""
        return sum(t.skbs for t in self._totals())

    def read(self) -> SinkReport:
        """What was delivered, as one stream with no sequence or latency figures (the filter does not
        read the signature)."""
        datagrams, frame_bytes = self.totals()
        empty = np.zeros(SINK_HIST_BUCKETS, dtype=np.int64)
        streams = [StreamStats(0, datagrams, frame_bytes, 0, 0, 0, 0, 0, 0)] if datagrams else []
        return SinkReport(frames=datagrams, frame_bytes=frame_bytes, unsigned=0, streams=streams,
                          latency_hist=empty, ipdv_hist=empty.copy())

    def close(self) -> None:
        sock = getattr(self, "sock", None)
        if sock is not None:
            sock.close()
        self.obj.close()
