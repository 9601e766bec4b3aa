"""``perfkit prog-bench``: kernel-timed cost per packet of a dataplane program (see perfkit.progbench)."""
from __future__ import annotations

import argparse

from perfkit.cli.options import add_json, emit
from perfkit.progbench import prog_bench
from perfkit.trial import DATAPLANES, DIRECTIONS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prog-bench", help="kernel-timed ns per packet of a dataplane program vs an XDP_DROP baseline",
                       description=__doc__)
    p.add_argument("--dataplane", default="pgwu", choices=DATAPLANES)
    p.add_argument("--direction", default="ul", choices=DIRECTIONS)
    p.add_argument("--frame-size", type=int, default=64, help="user-side frame size in bytes, FCS included")
    p.add_argument("--sessions", type=int, default=1, help="sessions installed and hit in random order")
    p.add_argument("--udp-csum", choices=("on", "off"), default="off")
    p.add_argument("--vlan", choices=("on", "off", "auto"), default="auto",
                   help="802.1Q tags; auto: on when the sessions need several tenants")
    p.add_argument("--rounds", type=int, default=21, help="measured rounds (alternating with the baseline)")
    p.add_argument("--repeat", type=int, default=200_000, help="runs per round")
    p.add_argument("--cpu", type=int, default=None, help="CPU to run on (default: the last one)")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    res = prog_bench(dataplane=args.dataplane, direction=args.direction, frame_size=args.frame_size,
                     sessions=args.sessions, udp_csum=args.udp_csum == "on",
                     vlan=None if args.vlan == "auto" else args.vlan == "on",
                     rounds=args.rounds, repeat=args.repeat, cpu=args.cpu)
    emit(res.to_dict(), args.json, _human)
    return 0 if res.path_verified else 2


def _human(d: dict) -> str:
    return (f"{d['dataplane']} {d['direction']} {d['frame_size']}B (wire {d['wire_frame_size']}B) "
            f"sessions={d['sessions']} udp_csum={'on' if d['udp_csum'] else 'off'} vlan={'on' if d['vlan'] else 'off'}\n"
            f"  program+harness  {d['ns_per_packet']:8.1f} ns/packet\n"
            f"  XDP_DROP+harness {d['baseline_ns_per_packet']:8.1f} ns/packet\n"
            f"  net              {d['net_ns_per_packet']:8.1f} ns/packet  (rounds: {d['net_min_ns']:.0f} .. "
            f"{d['net_max_ns']:.0f}; budget at 10GbE line rate {d['budget_ns']:.1f} ns)\n"
            f"  ratio {d['ratio']:.2f}; path {d['path_counter']} +{d['path_packets']} for "
            f"{d['measured_runs']} runs: {'verified' if d['path_verified'] else 'NOT VERIFIED ' + str(d['other_counters'])}")
