#!/usr/bin/env python3
"""PGW-U on the local testbed: maximum loss-free rate (NDR) and the 0.5% PDR, UL and DL, at 64 and
1424 bytes, one DUT core; with the maximum rate the generator offers as the reference.

For each scenario: one max-rate trial (generator unpaced), then perfkit's NDR/PDR search
(``perfkit.search.ndrpdr``). Prints the bounds in Mpps and Gbps (L1), the DUT's own BPF cost per
packet and CPU busy at the NDR, and where the loss came from.

    .venv/bin/python bench/pgwu_ndr.py [--json] [--final-duration 2]
"""
from __future__ import annotations

import argparse
import sys

from perfkit import benchcli
from perfkit.cli.options import seconds
from perfkit.generators import create
from perfkit.search import MaxRate, NdrPdr, max_rate, ndrpdr, offered_rate
from perfkit.scenario import Scenario
from perfkit.units import l1_bps


def main(args: argparse.Namespace) -> int:
    rows = []
    for direction in ("ul", "dl"):
        for frame in (64, 1424):
            sc = Scenario("pgwu", frame_size=frame, params={"direction": direction})
            with create("xdp", sc) as gen:
                top = max_rate(gen, MaxRate(duration=1.0)).trials[0]
                res = ndrpdr(gen, NdrPdr(goals=(0.0, 0.005), initial_duration=0.5,
                                         final_duration=args.final_duration, max_rate=max(top.tx_pps, 1.0)),
                             progress=sys.stderr.isatty())
            ndr, pdr = res.goals[0], res.goals[1]
            at_ndr = [t for t in res.trials if ndr.lower_bound and abs(offered_rate(t) - ndr.lower_bound) < 1
                      and t.loss_ratio == 0]
            t = at_ndr[-1] if at_ndr else None
            rows.append({
                "direction": direction, "frame_size": frame, "wire_frame_size": top.wire_frame_size,
                "max_offered_pps": top.tx_pps, "max_received_pps": top.rx_pps,
                "max_drops": top.dut_drops, "max_tester_drops": top.tester_drops,
                "ndr_lower_pps": ndr.lower_bound, "ndr_upper_pps": ndr.upper_bound,
                "pdr_lower_pps": pdr.lower_bound, "pdr_upper_pps": pdr.upper_bound,
                "ndr_gbps_l1": l1_bps(ndr.lower_bound or 0, top.wire_frame_size) / 1e9,
                "bpf_ns_per_packet_at_ndr": t.bpf_ns_per_packet if t else None,
                "dut_kthread_cpu_at_ndr": t.dut_kthread_cpu if t else None,
                "trials": res.trial_count, "trial_seconds": res.trial_seconds, "notes": res.notes})
    if args.json:
        benchcli.print_json(rows)
        return 0
    print(f"{'dir':3} {'frame':>5} {'wire':>5} {'max tx Mpps':>11} {'max rx Mpps':>11} {'NDR Mpps':>17} "
          f"{'NDR Gbps':>8} {'PDR0.5% Mpps':>17} {'BPF ns':>7} {'trials':>6} {'s':>5}")
    for r in rows:
        bpf = r["bpf_ns_per_packet_at_ndr"]
        print(f"{r['direction']:3} {r['frame_size']:>5} {r['wire_frame_size']:>5} {r['max_offered_pps'] / 1e6:>11.3f} "
              f"{r['max_received_pps'] / 1e6:>11.3f} {_b(r['ndr_lower_pps'], r['ndr_upper_pps']):>17} "
              f"{r['ndr_gbps_l1']:>8.2f} {_b(r['pdr_lower_pps'], r['pdr_upper_pps']):>17} "
              f"{'-' if bpf is None else round(bpf):>7} {r['trials']:>6} {r['trial_seconds']:>5.0f}")
        print(f"      at max rate: DUT drops {r['max_drops'] or '-'}, tester drops {r['max_tester_drops'] or '-'}; "
              f"DUT threads at NDR {r['dut_kthread_cpu_at_ndr']}")
    return 0


def _b(lo: float | None, hi: float | None) -> str:
    if lo is None:
        return "none"
    return f"{lo / 1e6:.3f}..{hi / 1e6:.3f}" if hi is not None else f">= {lo / 1e6:.3f}"


if __name__ == "__main__":
    ap = benchcli.parser(__doc__)
    ap.add_argument("--final-duration", type=seconds, default=2.0)
    benchcli.run(main, ap)
