"""Options shared by several commands, so that every command spells them the same way."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from perfkit.errors import ConfigError
from perfkit.trial import DATAPLANES, DIRECTIONS, LINE_RATES, Scenario


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def add_scenario(parser: argparse.ArgumentParser) -> None:
    """--dataplane --direction --frame-size --flows --dut-cores --sessions --udp-csum --vlan --line-rate"""
    g = parser.add_argument_group("scenario")
    g.add_argument("--dataplane", default="pgwu", choices=DATAPLANES)
    g.add_argument("--direction", default="ul", choices=DIRECTIONS)
    g.add_argument("--frame-size", type=int, default=64,
                   help="user-side frame size in bytes, FCS included (default 64)")
    g.add_argument("--flows", type=int, default=1, help="number of flows / sessions hit (default 1)")
    g.add_argument("--dut-cores", type=int, default=1, help="cores for the DUT's receive processing")
    g.add_argument("--sessions", type=int, default=0,
                   help="sessions installed in the DUT (default: as many as --flows)")
    g.add_argument("--udp-csum", choices=("on", "off"), default="off",
                   help="outer UDP checksum on encapsulation (default off: zero, TS 29.281)")
    g.add_argument("--vlan", action="store_true", help="802.1Q-tag both sides")
    g.add_argument("--line-rate", default="10GbE", choices=list(LINE_RATES),
                   help="nominal line rate that percentages refer to")


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    return Scenario(dataplane=args.dataplane, direction=args.direction, frame_size=args.frame_size,
                    flows=args.flows, dut_cores=args.dut_cores, sessions=args.sessions,
                    udp_csum=args.udp_csum == "on", vlan=args.vlan, line_rate=args.line_rate)


def emit(obj: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    """Print ``obj`` as JSON or through ``human``."""
    if as_json:
        json.dump(obj, sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        print(human(obj))


def add_trial(parser: argparse.ArgumentParser, duration: float | None = 2.0) -> None:
    """--rate --duration --packets --generator --capture, and the simulated DUT's --sim-* options.

    ``duration`` is the default of ``--duration`` (None lets the command pick per method).
    """
    from perfkit.generators import BACKENDS

    g = parser.add_argument_group("trial")
    g.add_argument("--rate", default=None,
                   help="offered rate: 2Mpps, 150kpps, 5Gbps (L1) or 40%% of --line-rate; "
                        "searches: the maximum rate (default 100%%)")
    g.add_argument("--duration", type=float, default=duration,
                   help="trial duration in seconds " + (f"(default {duration:g})" if duration else
                                                            "(default 2; ndrpdr: of the final trials, 10)"))
    g.add_argument("--packets", type=int, default=None, help="send exactly this many packets")
    g.add_argument("--generator", default="xdp", choices=list(BACKENDS),
                   help="traffic generator backend (default xdp: the local testbed; sim: simulated DUT)")
    g.add_argument("--capture", default=None, metavar="FILE", help="write received packets to a pcap")
    g.add_argument("--tester-cores", default=None, metavar="CPUS",
                   help="xdp: CPUs for generator and sink threads, e.g. 0 or 0,2 (default: all but the DUT's)")
    s = parser.add_argument_group("simulated DUT (--generator sim)")
    s.add_argument("--sim-model", default="sharp", help="sharp, noisy, smooth or buffered (default sharp)")
    s.add_argument("--sim-threshold", default="1Mpps", help="the simulated DUT's capacity (default 1Mpps)")
    s.add_argument("--sim-sigma", type=float, default=0.02,
                   help="noisy model: relative sigma of the per-trial threshold (default 0.02)")
    s.add_argument("--sim-seed", type=int, default=0, help="random seed of the noisy model (default 0)")


def generator_options(args: argparse.Namespace) -> dict[str, Any]:
    """Constructor options for ``perfkit.generators.create(args.generator, scenario, **options)``."""
    options: dict[str, Any] = {}
    if args.capture:
        options["capture"] = args.capture
    if args.generator == "xdp" and getattr(args, "tester_cores", None):
        try:
            options["tester_cores"] = [int(c) for c in args.tester_cores.split(",")]
        except ValueError:
            raise ConfigError("tester_cores", args.tester_cores, "CPU numbers separated by commas") from None
    if args.generator == "sim":
        options.update(model=args.sim_model, threshold=args.sim_threshold, sigma=args.sim_sigma,
                       seed=args.sim_seed)
    return options
