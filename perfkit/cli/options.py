"""Options shared by several commands, so that every command spells them the same way."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

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
