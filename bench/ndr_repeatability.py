#!/usr/bin/env python3
"""Is NDR reproducible on this machine? The same NDR search, N times with disturbance handling on
(trials whose loss measured host stalls explain are run again, ``perfkit.host.disturbance``) and N times off,
alternately, on one testbed in one run.

The scenario must be one where the DUT, not the generator, sets the limit (each search says what
limited it). Default: PGW-U uplink, 64-byte frames, 1,001,000 sessions over 1000 tenant VLANs,
every packet to a session drawn at random (seed 001's set-up), 1 DUT core. On a 2-vCPU VM whose
tester core also hands frames to a NIC-sized queue (``--rx-queue``), the generator's ceiling can
come close to that DUT's capacity; the calibrated DUT (``--dataplane calib --param
work_iterations=120``: about 1.6 µs per packet) is DUT-limited anywhere.

Per mode it prints each search's NDR bracket and what limited it, the coefficient of variation of
the NDRs, whether each result is consistent with every other (their brackets, each widened by its
search's width -- the bracket, at least ``--relative-width`` -- overlap) and the disturbed trial
count. With handling on, the NDRs are rates at the DUT cores' reference speed and kernel path
cost (``TrialResult.speed_factor``), both measured by one saturating trial at the start.

    .venv/bin/python bench/ndr_repeatability.py [--runs 5] [--dataplane pgwu] [--param KEY=VALUE ...]
        [--flows 1001000] [--flow-op random] [--duration 1] [--rule majority -n 3] [--rx-queue FRAMES] [--shield] [--trials FILE] [--json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm import tqdm

from perfkit import benchcli
from perfkit.cli.options import integer, number, seconds
from perfkit.errors import ConfigError
from perfkit.generators import create
from perfkit.generators.xdpcores import NIC_RX_QUEUE
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.search import run_method
from perfkit.search.result import trial_dict
from perfkit.units import FRAME_MAX, FRAME_MIN

MODES = {"on": (3, True, True), "speed": (3, True, False), "off": (0, False, False)}
"""Host handling: (retries of a disturbed trial, judged at the DUT cores' reference speed, and at the
kernel path's reference cost; ``TrialResult.speed_factor``). The references are measured once, by
one saturating trial at the start (``Generator.measure_reference``). "speed" (``--modes
on,speed,off``) tells what the kernel path's reference adds."""


@dataclass
class Search:
    mode: str
    ndr_pps: float | None
    upper_pps: float | None
    trials: int
    disturbed: int
    wall_s: float
    limited_by: str
    relative_width: float
    """The precision the search was asked for [1]."""

    @property
    def width(self) -> float:
        """The search's width [pps]: its bracket, at least the precision it was asked for (a bracket
        can end narrower: speed-normalized trials land near, not at, the rates asked for)."""
        upper = self.upper_pps or self.ndr_pps or 0.0
        return max(upper - (self.ndr_pps or 0.0), self.relative_width * upper)


def consistent(a: Search, b: Search) -> bool:
    """Whether two brackets, each widened by its own width (``Search.width``), overlap."""
    if a.ndr_pps is None or b.ndr_pps is None:
        return False
    lo_a, hi_a = a.ndr_pps - a.width, (a.upper_pps or a.ndr_pps) + a.width
    lo_b, hi_b = b.ndr_pps - b.width, (b.upper_pps or b.ndr_pps) + b.width
    return lo_a <= hi_b and lo_b <= hi_a


def summary(searches: list[Search]) -> dict:
    ndrs = [s.ndr_pps for s in searches if s.ndr_pps is not None]
    cv = statistics.pstdev(ndrs) / statistics.mean(ndrs) if len(ndrs) > 1 else None
    agree = [sum(consistent(s, o) for o in searches if o is not s) for s in searches]
    return {"ndr_mpps": [None if n is None else n / 1e6 for n in (s.ndr_pps for s in searches)],
            "cv": cv, "consistent_with_others": agree, "all_consistent": all(a == len(searches) - 1 for a in agree),
            "disturbed_trials": sum(s.disturbed for s in searches), "trials": sum(s.trials for s in searches)}


def main(args: argparse.Namespace) -> int:
    params_in = dict(kv.split("=", 1) for kv in args.param) if args.param else (
        {"direction": "ul", "sessions": 1_001_000, "vlan": True} if args.dataplane == "pgwu" else {})
    sc = Scenario(args.dataplane, frame_size=args.frame_size, flows=args.flows, params=params_in)
    params = {"relative_width": args.relative_width, "max_rate": Rate.parse(args.max_rate, sc.line_rate).pps(sc.wire_frame_size)}
    params.update({"duration": args.duration, **({"rule": "majority", "n": args.n} if args.rule == "majority" else {})}
                  if args.method == "ndr" else
                  {"goals": [0.0], "initial_duration": args.duration, "final_duration": args.final_duration})
    modes = args.modes.split(",")
    if not modes or any(m not in MODES for m in modes):
        raise ConfigError("--modes", args.modes, f"a comma-separated list of {', '.join(MODES)}")
    order = [m for _ in range(args.runs) for m in modes]  # alternate: drifts hit every mode alike
    results: dict[str, list[Search]] = {m: [] for m in modes}
    options = {"flow_op": args.flow_op, "rx_queue": args.rx_queue, "shield": args.shield}
    trial_file = args.trials.open("w") if args.trials else None
    with create("xdp", sc, **options) as gen:
        reference, kernel = gen.measure_reference()
        for mode in tqdm(order, desc="NDR searches", file=sys.stderr):
            gen.disturbed_retries, speed, kernel_too = MODES[mode]
            gen.speed_reference_ns = reference if speed else None
            gen.kernel_reference_ns = kernel if kernel_too else None
            r = run_method(args.method, gen, params)
            if trial_file:
                for t in r.trials:
                    trial_file.write(json.dumps({"search": sum(map(len, results.values())), "mode": mode,
                                                 **trial_dict(t)}) + "\n")
                trial_file.flush()
            results[mode].append(Search(mode, r.lower_bound, r.upper_bound, r.trial_count, r.disturbed_trials,
                                        r.wall_seconds, r.limited_by, args.relative_width))
    out = {"scenario": sc.key, "method": args.method, "params": params, "speed_reference_ns": reference,
           "kernel_reference_ns": kernel, "rx_queue": gen.rx_queue, "shield": args.shield, **{m: {**summary(s), "searches": [asdict(x) for x in s]}
                                                     for m, s in results.items()}}
    if args.json:
        benchcli.print_json(out)
        return 0
    trials = (f"{args.duration:g} s trials" + (f", majority of {args.n}" if args.rule == "majority" else "")
              if args.method == "ndr" else
              f"{args.duration:g} s trials, lower bounds on {args.final_duration:g} s trials")
    print(f"NDR ({args.method}) of {sc.key}, {args.runs} searches per mode, alternating, {trials}, "
          f"DUT receive queue {out['rx_queue'] or 'the veth ring (256)'} frames"
          + ("; the DUT core shielded" if args.shield else "") + f"; handling on: disturbed trials "
          f"retried, rates at the DUT cores' reference speed {reference:.3f} ns per probe step"
          + (f" and kernel path cost {kernel:.0f} ns per packet" if kernel else "")
          + ("; handling speed: the same at the reference speed alone" if "speed" in results else ""))
    for mode, s in results.items():
        d = out[mode]
        ndrs = ", ".join("-" if n is None else f"{n:.4f}" for n in d["ndr_mpps"])
        cv = "-" if d["cv"] is None else f"{d['cv'] * 100:.1f} %"
        limits = ", ".join(sorted({x["limited_by"] for x in d["searches"]}))
        print(f"handling {mode:5s}: NDR [Mpps] {ndrs} (limited by {limits}); CV {cv}; consistent with the others: "
              f"{d['consistent_with_others']} of {args.runs - 1}; disturbed trials {d['disturbed_trials']} "
              f"of {d['trials']}")
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__)
    ap.add_argument("--runs", type=integer(1, what="a search count"), default=5, help="searches per mode (default 5)")
    ap.add_argument("--dataplane", default="pgwu", help="the dataplane (default pgwu)")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="a dataplane parameter (default for pgwu: direction=ul sessions=1001000 vlan=true)")
    ap.add_argument("--frame-size", type=integer(FRAME_MIN, FRAME_MAX, "a frame size [bytes]"), default=64)
    ap.add_argument("--flow-op", default="random", help="how flows are walked: inc, dec, random (default random)")
    ap.add_argument("--method", choices=("ndr", "ndrpdr"), default="ndr",
                    help="ndr: binary search, every trial --duration; ndrpdr: short trials to bracket, "
                         "lower bounds confirmed by --final-duration trials (default ndr)")
    ap.add_argument("--rule", choices=("single", "majority"), default="single",
                    help="ndr: a rate's verdict is one trial, or the majority of up to -n trials (default single)")
    ap.add_argument("-n", type=integer(1, what="a trial count"), default=3, help="N of --rule majority (default 3)")
    ap.add_argument("--duration", type=seconds, default=1.0, help="trial duration [s] (ndrpdr: the short trials; default 1)")
    ap.add_argument("--final-duration", type=seconds, default=10.0, help="ndrpdr's confirmation trials [s] (default 10)")
    ap.add_argument("--max-rate", default="2Mpps", help="the search's maximum rate (default 2Mpps)")
    ap.add_argument("--relative-width", type=number(0.0, "a relative width"), default=0.02, help="search precision (default 0.02)")
    ap.add_argument("--rx-queue", type=integer(0, what="a frame count"), default=NIC_RX_QUEUE,
                    help=f"frames of the DUT's receive queue (0: the veth rings; default {NIC_RX_QUEUE})")
    ap.add_argument("--flows", type=integer(1, what="a flow count"), default=1_001_000, help="flows the traffic walks (default 1001000)")
    ap.add_argument("--shield", action="store_true",
                    help="move every other task off the DUT core for the whole run (perfkit.testbed.shield)")
    ap.add_argument("--modes", default="on,off", help=f"host handling modes, in turn (of {', '.join(MODES)}; default on,off)")
    ap.add_argument("--trials", type=Path, default=None, metavar="FILE",
                    help="also write every trial as a JSON line (its search's number and mode added)")
    benchcli.run(main, ap)
