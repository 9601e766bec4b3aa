"""Traffic by its verdict on the local testbed: XDP_TX output counted and checked at the tester port
that sent it (xdp-filter's XDP_DROP and XDP_PASS: tests/test_xdpfilter.py)."""
from __future__ import annotations

from pathlib import Path

from perfkit.generators.xdp import XdpGenerator
from perfkit.scenario import Scenario
from tests.counting import QUIET_RATE
from tests.xdptx_dataplane import build, registered

PACKETS = 5_000


def test_xdp_tx_counted_at_the_sending_port(tmp_path: Path) -> None:
    with registered(build(tmp_path)):
        scenario = Scenario(dataplane="xdptx", frame_size=64, flows=4)
        assert scenario.traffic().egress == "a"
        with XdpGenerator(scenario, perf_stat=False) as gen:
            # a host stall longer than a ring lasts loses frames: such a trial is measured again
            # (at most 3 times), as searches do
            for _ in range(3):
                r = gen.measure(QUIET_RATE, 5.0, packets=PACKETS)
                if r.rx_packets == PACKETS or not r.stalled:
                    break
    # exact counts, signed and checked against the model, with latency, at p0 (cabled to a)
    assert r.tx_packets == PACKETS and r.rx_packets == PACKETS, r.notes
    assert r.mismatched_packets == 0 and r.reordered == 0 and r.duplicates == 0
    assert r.latency_ns["p50"] > 0 and r.latency_ns["max"] >= r.latency_ns["p50"]
    assert r.verdicts == {"XDP_TX": PACKETS} and r.verdicts_from == "perfkit"
    assert r.bpf_ns_per_packet and r.bpf_ns_per_packet > 0
