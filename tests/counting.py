"""What an exact count means on this VM: every frame sent is received, or counted as lost to a full
receive ring. A veth's XDP ring holds 256 frames (the kernel's VETH_RING_SIZE); the host takes a
vCPU away for up to ~18 ms, longer than the ring lasts at 20 kpps (12.8 ms), so a stall can cost a
trial frames however correct the program. Those frames are counted (``rx_ring_full``), on the DUT's
side or the tester's, and tests of the program's behaviour discount them, and only them."""
from __future__ import annotations

RING = "rx_ring_full"
"""The drop reason of a full receive ring, in ``dut_drops`` and ``tester_drops``."""

QUIET_RATE = 5_000
"""[pps] A rate whose 256-frame ring lasts 51 ms: longer than any host stall seen here. Tests that
assert exact per-flow counts offer a fixed number of frames at this rate."""


def accounted(r) -> bool:
    """sent = received + every drop counted somewhere."""
    return r.tx_packets == r.rx_packets + sum(r.dut_drops.values()) + sum(r.tester_drops.values())


def ring_lost(r) -> int:
    """Frames lost to a full receive ring, the DUT's or the tester's: the host, not the program."""
    return r.dut_drops.get(RING, 0) + r.tester_drops.get(RING, 0)


def all_through(r, n: int) -> bool:
    """``n`` frames offered, and every one received but for those counted as lost to a full ring."""
    return (r.tx_packets == n and r.rx_packets + ring_lost(r) == n and set(r.dut_drops) <= {RING}
            and set(r.tester_drops) <= {RING} and accounted(r))
