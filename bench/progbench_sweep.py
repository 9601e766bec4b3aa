#!/usr/bin/env python3
"""Sweep `perfkit prog-bench` over frame sizes, directions, UDP checksum modes and 1 vs 1M sessions.

Prints one row per configuration (kernel-timed ns per packet, the XDP_DROP baseline of the same
run, the net cost and the ratio) and the foundation target: at 64 bytes, zero UDP checksum, one
session, net cost <= 67 ns for UL and DL. Run as root after `make bpf`:

    .venv/bin/python bench/progbench_sweep.py [--quick] [--json]
"""
from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from perfkit import benchcli
from perfkit.progbench import BUDGET_64B_10GBE_NS, prog_bench

FRAME_SIZES = (64, 128, 256, 512, 1024, 1424)
MANY = 1_000_000


def main(args: argparse.Namespace) -> int:
    many = 100_000 if args.quick else MANY
    rounds, repeat = (5, 50_000) if args.quick else (21, 200_000)
    rows = []
    configs = [(d, s, c, f) for s in (1, many) for d in ("ul", "dl") for c in (False, True) for f in FRAME_SIZES]
    for direction, sessions, csum, frame in tqdm(configs, desc="prog-bench", unit="config", file=sys.stderr):
        res = prog_bench("pgwu", frame_size=frame, rounds=rounds, repeat=repeat,
                         params={"direction": direction, "sessions": sessions, "udp_csum": csum, "vlan": sessions > 1})
        rows.append(res.to_dict() | res.params)
    target = [r for r in rows if r["frame_size"] == 64 and not r["udp_csum"] and r["sessions"] == 1]
    if args.json:
        benchcli.print_json({"rows": rows, "target_ns": BUDGET_64B_10GBE_NS})
        return 0
    print(f"{'dir':3} {'sessions':>8} {'vlan':4} {'csum':4} {'frame':>5} {'wire':>5} {'prog ns':>8} "
          f"{'base ns':>8} {'net ns':>7} {'net range':>11} {'ratio':>6} {'path':>8}")
    for r in rows:
        print(f"{r['direction']:3} {r['sessions']:>8} {'on' if r['vlan'] else 'off':4} "
              f"{'on' if r['udp_csum'] else 'off':4} {r['frame_size']:>5} {r['wire_frame_size']:>5} "
              f"{r['ns_per_packet']:>8.1f} {r['baseline_ns_per_packet']:>8.1f} {r['net_ns_per_packet']:>7.1f} "
              f"{r['net_min_ns']:>5.0f}..{r['net_max_ns']:<5.0f} {r['ratio']:>6.2f} "
              f"{'ok' if r['path_verified'] else 'WRONG':>8}")
    print()
    for r in target:
        verdict = "meets" if r["net_ns_per_packet"] <= BUDGET_64B_10GBE_NS else "MISSES"
        print(f"target {r['direction'].upper()} 64B, zero UDP checksum, 1 session: net "
              f"{r['net_ns_per_packet']:.1f} ns {verdict} the {BUDGET_64B_10GBE_NS:.1f} ns budget")
    return 0 if all(r["path_verified"] for r in rows) else 1


if __name__ == "__main__":
    ap = benchcli.parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and sessions (a smoke run)")
    benchcli.run(main, ap)
