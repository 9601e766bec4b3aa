"""Where traffic that the dataplane passes to the DUT's kernel (XDP_PASS) is counted when no socket
receives it: the IPv4 packets the DUT namespace's stack received, from its own counters.

The count is the sum of ``IpExt``'s ``InNoECTPkts``, ``InECT1Pkts``, ``InECT0Pkts`` and
``InCEPkts`` (``/proc/net/netstat``): ``ip_rcv`` adds each packet there by its ECN bits, and a
GRO-aggregated packet as the segments it carries, so the sum is exact, whatever the ``gro`` knob,
where ``Ip: InReceives`` counts aggregated packets once. The namespace is the testbed's own: nothing
else sends IPv4 into it (its IPv6 is off).
"""
from __future__ import annotations


from perfkit.testbed import netns
from perfkit.testbed.sink import SinkReport

#: The ``IpExt`` counters whose sum is every IPv4 packet received.
ECN_COUNTERS = ("InNoECTPkts", "InECT1Pkts", "InECT0Pkts", "InCEPkts")


def ipv4_received(ns: str | None) -> int:
    """IPv4 packets the stack of namespace ``ns`` has received since it was made (segments)."""
    with netns.inside(ns), open("/proc/thread-self/net/netstat") as f:
        lines = [line.split() for line in f if line.startswith("IpExt:")]
    names, values = lines[0][1:], [int(v) for v in lines[1][1:]]
    table = dict(zip(names, values))
    return sum(table.get(k, 0) for k in ECN_COUNTERS)


class KernelSink:
    """Counts what the DUT's kernel received in namespace ``ns`` between ``reset`` and ``read``, as
    a sink would (one stream, no sequence or latency figures: the kernel reads no signature).
    ``wire_frame_size``: bytes of each offered frame [bytes, FCS included]."""

    def __init__(self, ns: str, wire_frame_size: int):
        self.ns, self.wire_frame_size = ns, wire_frame_size
        self.base = ipv4_received(ns)

    def reset(self, capture_max: int | None = None) -> None:
        """Count from now (``capture_max``: as ``Sink.reset``'s; the kernel captures nothing)."""
        self.base = ipv4_received(self.ns)

    def totals(self) -> tuple[int, int]:
        """(packets, bytes of the frames they came in) since ``reset`` (for drain polling)."""
        n = ipv4_received(self.ns) - self.base
        return n, n * self.wire_frame_size

    def read(self) -> SinkReport:
        return SinkReport.counted(*self.totals())

    def close(self) -> None:
        """Nothing to release (``Sink.close``'s counterpart)."""
