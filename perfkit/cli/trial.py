"""``perfkit trial``: one trial of a scenario at one rate, with every figure the trial measured."""
from __future__ import annotations

import argparse

from perfkit.cli.options import add_json, add_scenario, add_trial, emit, generator_options, scenario_from_args
from perfkit.generators import create
from perfkit.rate import Rate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trial", help="run one trial (offered rate for a duration or packet count)",
                       description=__doc__)
    add_scenario(p)
    add_trial(p)
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    rate_pps = Rate.parse(args.rate, args.line_rate).pps(scenario.wire_frame_size) if args.rate else None
    with create(args.generator, scenario, **generator_options(args)) as gen:
        result = gen.measure(rate_pps, args.duration, args.packets)
    emit(result.to_dict(), args.json, _human)
    return 0


def _human(d: dict) -> str:
    lat = d["latency_ns"]
    lines = [
        f"{d['dataplane']} {' '.join(f'{k}={v}' for k, v in d['params'].items())} {d['frame_size']}B "
        f"(wire {d['wire_frame_size']}B) flows={d['flows']} "
        f"dut_cores={d['dut_cores']} generator={d['generator']}",
        f"  offered  {d['tx_packets']:>12} packets  {d['tx_pps'] / 1e6:9.3f} Mpps   (intended {d['intended_packets']})",
        f"  received {d['rx_packets']:>12} packets  {d['rx_pps'] / 1e6:9.3f} Mpps  {d['rx_bps_l1'] / 1e9:7.3f} Gbps L1",
        f"  loss     {d['loss_ratio'] * 100:11.4f} %   (DUT's own: {d['dut_loss_ratio'] * 100:.4f} %)"
        f"   drops: DUT {d['dut_drops'] or '-'}, tester {d['tester_drops'] or '-'}",
    ]
    if lat:
        lines.append("  latency  " + "  ".join(f"{k} {v / 1e3:.1f}us" for k, v in lat.items() if k != "mean"))
    lines.append(f"  DUT CPU busy {d['dut_cpu']}, kthreads {d['dut_kthread_cpu']}, "
                 f"BPF {d['bpf_ns_per_packet'] or 0:.1f} ns/packet")
    lines.append(f"  sequence: reordered {d['reordered']}, duplicates {d['duplicates']}; "
                 f"mismatched packets {d['mismatched_packets']}")
    lines += [f"  note: {n}" for n in d["notes"]]
    return "\n".join(lines)
