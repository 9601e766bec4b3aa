"""The socket sink (``perfkit.testbed.socksink``) on the real kernel: a UDP socket with UDP GRO and
a BPF socket filter counts what the kernel delivers, a GRO (or GSO) packet as its segments."""
from __future__ import annotations

import socket
import subprocess
import time
import uuid

import pytest

from perfkit.testbed import netns
from perfkit.testbed.socksink import SocketSink

UDP_SEGMENT = 103   # linux/udp.h: send one buffer as datagrams of this size (UDP GSO)


@pytest.fixture
def ns():
    name = f"pkss{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    yield name
    subprocess.run(["ip", "netns", "del", name], check=True)


def _settle(sink: SocketSink, want: int) -> None:
    deadline = time.monotonic() + 2
    while sink.totals()[0] < want and time.monotonic() < deadline:
        time.sleep(0.01)


def test_each_datagram_counts_once_and_a_segmented_packet_as_its_segments(ns):
    sink = SocketSink(ns, "127.0.0.1", 9, wire_frame_size=100)
    try:
        with netns.inside(ns):
            tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with tx:
            for _ in range(5):
                tx.sendto(b"x" * 40, ("127.0.0.1", 9))
            _settle(sink, 5)
            assert sink.totals() == (5, 500) and sink.skbs() == 5
            # ten 100-byte datagrams in one GSO packet: loopback delivers it whole to a UDP_GRO socket
            tx.setsockopt(socket.SOL_UDP, UDP_SEGMENT, 100)
            tx.sendto(b"y" * 1000, ("127.0.0.1", 9))
            _settle(sink, 15)
        assert sink.totals()[0] == 15 and sink.skbs() == 6
        rep = sink.read()
        assert rep.packets == 15 and rep.frames == 15 and rep.latency_ns() == {}
        sink.reset()
        assert sink.totals() == (0, 0)
    finally:
        sink.close()


def test_the_port_it_serves_gets_the_address(ns):
    subprocess.run(["ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"], check=True)
    sink = SocketSink(ns, "198.18.200.1", 9, wire_frame_size=64, dev="d0")
    try:
        assert "198.18.200.1/32" in netns.run(ns, "ip", "-o", "addr", "show", "dev", "d0")
    finally:
        sink.close()
