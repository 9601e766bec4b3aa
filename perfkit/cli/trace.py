"""``perfkit trace``: the path of a sample of perfkit's packets through the DUT's kernel (docs/trace.md).

Runs a trial of the scenario on the local testbed and follows up to --packets of its packets, matched
by perfkit's signature, through the DUT kernel's receive path with bpftrace: per packet, each event's
function, the time since the one before, and the skb's gso_type and gso_segs where they change; then
how many GRO merged. It stops after --packets packets or --seconds seconds, and leaves nothing attached.
"""
from __future__ import annotations

import argparse

from perfkit.cli.options import add_json, add_scenario, emit, integer, scenario_from_args, seconds

PACKETS_MAX, SECONDS_MAX = 10_000, 120   # perfkit.trace's (not imported here: the parser stays light)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trace", help="the path of a sample of the trial's packets through the DUT's kernel (bpftrace)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_scenario(p)
    g = p.add_argument_group("trace")
    g.add_argument("--packets", type=integer(1, PACKETS_MAX, "packets to trace"), default=64, metavar="N",
                   help="trace this many packets, then stop (default 64)")
    g.add_argument("--seconds", type=integer(1, SECONDS_MAX, "seconds"), default=10, metavar="T",
                   help="stop after this many seconds at most (default 10)")
    g.add_argument("--rate", default=None, help="offered rate, as perfkit trial's (default: as fast as the "
                   "generator sends, so that GRO has packets to merge)")
    g.add_argument("--duration", type=seconds, default=1.0,
                   help="seconds of traffic (default 1; at most --seconds)")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from perfkit.rate import Rate
    from perfkit.trace import trace

    scenario = scenario_from_args(args)
    rate_pps = Rate.parse(args.rate, args.line_rate).pps(scenario.wire_frame_size) if args.rate else None
    result = trace(scenario, args.packets, args.seconds, rate_pps, args.duration)
    emit(result.to_dict(), args.json, lambda _: result.text())
    return 0
