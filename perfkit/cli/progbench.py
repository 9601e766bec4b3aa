"""``perfkit prog-bench``: kernel-timed cost per packet of a dataplane program (see perfkit.progbench)."""
from __future__ import annotations

import argparse

from perfkit.cli.options import add_json, add_scenario, emit, integer, params_from_args, split_knobs
from perfkit.errors import ConfigError
from perfkit.progbench import prog_bench


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("prog-bench", help="kernel-timed ns per packet of a dataplane program vs an XDP_DROP baseline",
                       description=__doc__)
    add_scenario(p, cores=False)
    p.add_argument("--rounds", type=integer(3), default=21, help="measured rounds (alternating with the baseline)")
    p.add_argument("--repeat", type=integer(1000), default=200_000, help="runs per round")
    p.add_argument("--cpu", type=integer(0, what="a CPU number"), default=None, help="CPU to run on (default: the last one)")
    add_json(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    system = split_knobs(args)[1]
    if system:
        name = next(iter(system))
        raise ConfigError("--knob", f"{name}={system[name]}", "a build option of the dataplane (prog-bench runs the "
                          "program alone, without interfaces or sysctls)")
    res = prog_bench(dataplane=args.dataplane, frame_size=args.frame_size, params=params_from_args(args),
                     rounds=args.rounds, repeat=args.repeat, cpu=args.cpu)
    emit(res.to_dict(), args.json, _human)
    return 0 if res.path_verified else 2


def _human(d: dict) -> str:
    params = " ".join(f"{k}={v}" for k, v in d["params"].items())
    return (f"{d['dataplane']} {d['frame_size']}B (wire {d['wire_frame_size']}B) {params}, {d['keys']} keys\n"
            f"  program+harness  {d['ns_per_packet']:8.1f} ns/packet\n"
            f"  XDP_DROP+harness {d['baseline_ns_per_packet']:8.1f} ns/packet\n"
            f"  net              {d['net_ns_per_packet']:8.1f} ns/packet  (rounds: {d['net_min_ns']:.0f} .. "
            f"{d['net_max_ns']:.0f}; budget at 10GbE line rate {d['budget_ns']:.1f} ns)\n"
            f"  ratio {d['ratio']:.2f}; path {d['path_counter']} +{d['path_packets']} for "
            f"{d['measured_runs']} runs: {'verified' if d['path_verified'] else 'NOT VERIFIED ' + str(d['other_counters'])}")
