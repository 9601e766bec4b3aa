"""``perfkit search METHOD``: run one benchmark methodology against a generator and print the result.

Methods: maxrate, sweep, ndr, pdr, ndrpdr, mlrsearch, bestworst, latency (see ``perfkit.search``). Every
method takes the scenario and trial options of ``perfkit trial``; ``--rate`` is the maximum rate
(default 100 % of --line-rate). ``--generator sim --sim-model sharp --sim-threshold 1Mpps`` runs
without a testbed. ``--json`` prints the result with every trial.

Ctrl-C or SIGTERM stop a search at any moment: the testbed goes down, one line says that nothing was
stored (a search keeps no state), exit status 130 (``perfkit.cli._signals``).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any, Callable

from perfkit.cli._signals import sigpipe_ignored
from perfkit.cli.options import (add_json, add_scenario, add_trial, emit, generator_options, integer, scenario_from_args,
                                 seconds)
from perfkit.errors import ConfigError, SearchError
from perfkit.generators import create
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.search import run_method
from perfkit.units import l1_bps

Params = dict[str, Any]
"""The method's parameters by field name, as ``perfkit.search.run_method`` (and campaigns) take them."""


# -- parsing helpers ---------------------------------------------------------------------------
def parse_fraction(name: str, text: str) -> float:
    """``0.5%`` -> 0.005, ``0.005`` -> 0.005; a ConfigError naming ``name`` otherwise."""
    try:
        value = float(text[:-1]) / 100 if text.strip().endswith("%") else float(text)
    except ValueError:
        raise ConfigError(name, text, "a ratio like 0.005 or a percentage like 0.5%") from None
    return value


def parse_fractions(name: str, text: str) -> tuple[float, ...]:
    """``10%,50%,90%`` -> (0.1, 0.5, 0.9)."""
    return tuple(parse_fraction(name, part) for part in text.split(",") if part.strip())


def rate_pps(name: str, text: str | None, scenario: Scenario) -> float | None:
    """A ``Rate`` string in pps for the scenario's wire frames (None stays None)."""
    if text is None:
        return None
    try:
        rate = Rate.parse(text, scenario.line_rate)
    except ConfigError as err:
        raise ConfigError(name, text, err.allowed) from None
    return rate.pps(scenario.wire_frame_size)


# -- per-method options and parameters -------------------------------------------------------------
def _binary_options(p: argparse.ArgumentParser, tolerance: str | None, n: bool = False) -> None:
    g = p.add_argument_group("binary search (vNet-SLA)")
    if tolerance is not None:
        g.add_argument("--loss-tolerance", default=tolerance,
                       help=f"loss ratio a good trial may have, e.g. 0.5%%, 0.01%%, 0.0001%% (default {tolerance.replace('%', '%%')})")
    g.add_argument("--min-rate", default=None, help="lowest rate (default max / 1000)")
    g.add_argument("--start-rate", default=None, help="first rate of the linear phase (default max / 10)")
    g.add_argument("--start-step", default=None, help="step of the linear phase (default max / 10)")
    g.add_argument("--resolution", default=None, help="stop at this bracket width, a rate (e.g. 1kpps)")
    g.add_argument("--relative-width", default="0.5%", help="else stop at this relative width (default 0.5%%)")
    if n:
        g.add_argument("-n", type=integer(1), default=5, help="N of best-of-N / worst-of-N (default 5)")
    else:
        g.add_argument("--rule", choices=("single", "majority"), default="single",
                       help="a rate's verdict: one trial, or the majority of up to -n trials (default single)")
        g.add_argument("-n", type=integer(1), default=3, help="N of majority-of-N (default 3)")


def _binary_params(args: argparse.Namespace, sc: Scenario, tolerance: float) -> Params:
    return dict(loss_tolerance=tolerance, duration=_duration(args, 2.0),
                max_rate=rate_pps("rate", args.rate, sc), min_rate=rate_pps("min_rate", args.min_rate, sc),
                start_rate=rate_pps("start_rate", args.start_rate, sc),
                start_step=rate_pps("start_step", args.start_step, sc),
                resolution=rate_pps("resolution", args.resolution, sc),
                relative_width=parse_fraction("relative_width", args.relative_width))


def _duration(args: argparse.Namespace, default: float) -> float:
    """--duration, or the method's default when it is not given (0 is refused, never a default)."""
    return default if args.duration is None else args.duration


def _tolerance(args: argparse.Namespace) -> float:
    return parse_fraction("loss_tolerance", args.loss_tolerance)


def opts_maxrate(p: argparse.ArgumentParser) -> None:
    p.add_argument_group("maxrate").add_argument(
        "--trials", type=int, default=1, help="trials at the rate, one after another; the figures are their medians (default 1)")


def build_maxrate(args: argparse.Namespace, sc: Scenario) -> Params:
    return dict(max_rate=rate_pps("rate", args.rate, sc), duration=_duration(args, 2.0), trials=args.trials)


def opts_sweep(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweep (fractions of --rate, default 100%% of --line-rate)")
    g.add_argument("--start", default="10%", help="first load (default 10%%)")
    g.add_argument("--stop", default="100%", help="last load (default 100%%)")
    g.add_argument("--step", default="10%", help="increment (default 10%%; vNet-SLA uses 1%%)")
    g.add_argument("--loss-tolerance", default="0", help="loss ratio counted as no loss (default 0)")


def build_sweep(args: argparse.Namespace, sc: Scenario) -> Params:
    return dict(nominal_rate=rate_pps("rate", args.rate, sc), start=parse_fraction("start", args.start),
                stop=parse_fraction("stop", args.stop), step=parse_fraction("step", args.step),
                duration=_duration(args, 2.0), loss_tolerance=_tolerance(args))


def _rule(args: argparse.Namespace) -> Params:
    return {"rule": "majority", "n": args.n} if args.rule == "majority" else {}


def build_ndr(args: argparse.Namespace, sc: Scenario) -> Params:
    return {**_binary_params(args, sc, 0.0), **_rule(args)}


def build_pdr(args: argparse.Namespace, sc: Scenario) -> Params:
    return {**_binary_params(args, sc, _tolerance(args)), **_rule(args)}


def build_bestworst(args: argparse.Namespace, sc: Scenario) -> Params:
    return {**_binary_params(args, sc, _tolerance(args)), "n": args.n}


def _goal_options(p: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The goals' options ndrpdr and mlrsearch share (draft-ietf-bmwg-mlrsearch's goal attributes)."""
    g = p.add_argument_group(title)
    g.add_argument("--goals", default="0,0.5%", help="goal loss ratios to search, comma-separated (default 0,0.5%%)")
    g.add_argument("--relative-width", default="0.5%", help="goal width: target relative width (default 0.5%%)")
    g.add_argument("--initial-duration", type=seconds, default=1.0,
                   help="goal initial trial duration: short trials (default 1 s)")
    g.add_argument("--exceed-ratio", default="0",
                   help="goal exceed ratio: share of the duration sum that may be bad at a lower bound (default 0)")
    g.add_argument("--duration-sum", type=seconds, default=None,
                   help="goal duration sum: full-length seconds that classify a load (default: --duration)")
    g.add_argument("--min-rate", default=None, help="lowest rate (default max / 1000)")
    return g


def _goal_params(args: argparse.Namespace, sc: Scenario) -> Params:
    return dict(goals=parse_fractions("goals", args.goals),
                relative_width=parse_fraction("relative_width", args.relative_width),
                initial_duration=args.initial_duration, final_duration=_duration(args, 10.0),
                exceed_ratio=parse_fraction("exceed_ratio", args.exceed_ratio), duration_sum=args.duration_sum,
                max_rate=rate_pps("rate", args.rate, sc), min_rate=rate_pps("min_rate", args.min_rate, sc))


def opts_mlrsearch(p: argparse.ArgumentParser) -> None:
    _goal_options(p, "mlrsearch (--duration is the goal final trial duration, default 10)")


def opts_ndrpdr(p: argparse.ArgumentParser) -> None:
    g = _goal_options(p, "ndrpdr (--duration is the goal final trial duration, default 10)")
    g.add_argument("--latency-fractions", default="", metavar="FRACTIONS",
                   help="then measure latency at these fractions of each goal found, e.g. 100%%,50%% "
                        "(default none)")
    g.add_argument("--latency-duration", type=seconds, default=None,
                   help="length of each latency trial (default: --duration)")


def build_ndrpdr(args: argparse.Namespace, sc: Scenario) -> Params:
    return dict(**_goal_params(args, sc),
                latency_fractions=parse_fractions("latency_fractions", args.latency_fractions),
                latency_duration=args.latency_duration)


def opts_latency(p: argparse.ArgumentParser) -> None:
    _binary_options(p, None)
    p.add_argument("--fractions", default="10%,50%,90%", help="fractions of NDR (default 10%%,50%%,90%%)")


def build_latency(args: argparse.Namespace, sc: Scenario) -> Params:
    return {**_binary_params(args, sc, 0.0), **_rule(args), "fractions": parse_fractions("fractions", args.fractions)}


#: name -> (help, add method options, the method's parameters from the options)
METHODS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None],
                         Callable[[argparse.Namespace, Scenario], Params]]] = {
    "maxrate": ("offer the maximum rate, report what comes through", opts_maxrate, build_maxrate),
    "sweep": ("frame-loss-rate sweep from --start to --stop of the rate", opts_sweep, build_sweep),
    "ndr": ("NDR: vNet-SLA binary search, loss tolerance 0", lambda p: _binary_options(p, None), build_ndr),
    "pdr": ("PDR: vNet-SLA binary search at --loss-tolerance", lambda p: _binary_options(p, "0.5%"), build_pdr),
    "ndrpdr": ("NDR and PDRs in one search: short trials, then full-duration confirmation",
               opts_ndrpdr, build_ndrpdr),
    "mlrsearch": ("the same goals searched by FD.io CSIT's MLRsearch library, measuring here",
                  opts_mlrsearch, _goal_params),
    "bestworst": ("best-of-N and worst-of-N binary searches: the run-to-run range",
                  lambda p: _binary_options(p, "0", n=True), build_bestworst),
    "latency": ("NDR, then latency at fractions of it", opts_latency, build_latency),
}
#: Methods whose result is meaningless without a lower bound (exit code 2 then).
NEEDS_LOWER = ("ndr", "pdr", "ndrpdr", "mlrsearch", "bestworst", "latency")


# -- output ------------------------------------------------------------------------------------
def human(d: dict[str, Any]) -> str:
    """A short table: the bounds per goal, or one line per trial for sweep and latency."""
    lines = [f"{d['method']} on {d['scenario_key']} (generator {d['generator']}): {d['trial_count']} trials, "
             f"{d['trial_seconds']:.1f} trial s, {d['wall_seconds']:.1f} s wall"]
    if d["method"] in ("sweep", "latency", "maxrate"):
        lines += _trial_table([t for t in d["trials"] if t["method"].startswith(d["method"])])
    if d["goals"]:
        lines.append(f"{'goal':10s} {'lower [Mpps]':>12s} {'upper [Mpps]':>12s} {'lower [Gbps L1]':>15s} "
                     f"{'width':>7s}" + (f" {'cond. tput [Mpps]':>17s}" if d["goals"][0].get("goal") else ""))
        for g in d["goals"]:
            lines.append(f"{g['name']:10s} {_mpps(g['lower_bound']):>12s} {_mpps(g['upper_bound']):>12s} "
                         f"{_gbps(g['lower_bound'], d):>15s} {_pct(g['relative_width']):>7s}"
                         + (f" {_mpps(g['conditional_throughput']):>17s}" if g.get("goal") else ""))
        lines += _goal_latency(d["goals"])
    elif d["method"] == "maxrate":
        lines.append(f"offered {_mpps(d['upper_bound'])} Mpps, received {_mpps(d['lower_bound'])} Mpps")
    elif d["method"] == "sweep":
        lines.append(f"highest step of the lossless run from the start: {_mpps(d['lower_bound'])} Mpps; "
                     f"first lossy step: {_mpps(d['upper_bound'])} Mpps")
    else:
        lines.append(f"lower {_mpps(d['lower_bound'])} Mpps, upper {_mpps(d['upper_bound'])} Mpps")
    if d["disturbed_trials"]:
        lines.append(f"{d['disturbed_trials']} trial(s) disturbed by host stalls ({d['disturbed_seconds']:.1f} s of "
                     "traffic), each run again; --json shows their evidence")
    lines += [f"note: {n}" for n in d["notes"]]
    return "\n".join(lines)


def _trial_table(trials: list[dict[str, Any]]) -> list[str]:
    rows = [f"{'phase':8s} {'rate [Mpps]':>11s} {'rx [Mpps]':>10s} {'loss':>9s} {'p50 [us]':>9s} "
            f"{'p99 [us]':>9s} {'DUT CPU':>7s}"]
    for t in trials:
        lat = t["latency_ns"]
        cpu = max(t["dut_cpu"].values(), default=None)
        rows.append(f"{t['phase']:8s} {t['intended_pps'] / 1e6:11.4f} {t['rx_pps'] / 1e6:10.4f} "
                    f"{_pct(t['loss_ratio'], 4):>9s} {_us(lat.get('p50')):>9s} {_us(lat.get('p99')):>9s} "
                    f"{_pct(cpu, 0):>7s}")
    return rows


def _goal_latency(goals: list[dict[str, Any]]) -> list[str]:
    """Latency at the goals found (ndrpdr's ``latency_fractions``): one line per goal and fraction."""
    points = [(g, p) for g in goals for p in g.get("latency", [])]
    if not points:
        return []
    rows = [f"{'latency at':18s} {'rate [Mpps]':>11s} {'loss':>9s} {'p50 [us]':>9s} {'p90 [us]':>9s} "
            f"{'p99 [us]':>9s} {'p99.9 [us]':>10s} {'max [us]':>9s} {'IPDV p99 [us]':>13s}"]
    for g, p in points:
        at = f"{p['fraction'] * 100:g}% of {g['name'].upper()}" + (" (>=)" if p["at_least"] else "")
        lat = p["latency_ns"]
        rows.append(f"{at:18s} {p['offered_pps'] / 1e6:11.4f} {_pct(p['loss_ratio'], 4):>9s} "
                    + " ".join(f"{_us(lat.get(k)):>{w}s}" for k, w in (("p50", 9), ("p90", 9), ("p99", 9),
                                                                      ("p99.9", 10), ("max", 9)))
                    + f" {_us(p['ipdv_ns'].get('p99')):>13s}")
    if any(p["at_least"] for _, p in points):
        rows.append("(>=): the goal's throughput is only a lower bound (not the DUT limited it), so the "
                    "latency is at a fraction of a lower bound of it")
    return rows


def _mpps(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:.4f}"


def _gbps(pps: float | None, d: dict[str, Any]) -> str:
    first = d["trials"][0] if d["trials"] else {}
    wire = first.get("wire_frame_size", 0)
    if first.get("frame_mix") and first.get("tx_packets") and first.get("tx_bytes"):
        wire = first["tx_bytes"] / first["tx_packets"]  # a frame mix: its frames as sent, not the rounded mean
    return "-" if pps is None or not wire else f"{l1_bps(pps, wire) / 1e9:.3f}"


def _pct(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x * 100:.{digits}f}%"


def _us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:.1f}"


# -- the command -------------------------------------------------------------------------------
def cmd_search(args: argparse.Namespace) -> int:
    if args.packets is not None:
        raise ConfigError("packets", args.packets, "not used by searches (their trials last --duration)")
    scenario = scenario_from_args(args)
    params = args.build(args, scenario)
    if args.disturbed_retries is not None and args.disturbed_retries < 0:
        raise ConfigError("disturbed_retries", args.disturbed_retries, "an integer >= 0")
    try:
        with sigpipe_ignored(), create(args.generator, scenario, **generator_options(args)) as gen:
            if args.disturbed_retries is not None:
                gen.disturbed_retries = args.disturbed_retries
            result = run_method(args.method, gen, params, progress=not args.no_progress and sys.stderr.isatty())
    except KeyboardInterrupt:
        print("perfkit: search stopped; the testbed is down and nothing was stored (a search outside a "
              "campaign keeps no trials: run it in a campaign to resume one)", file=sys.stderr)
        return 130
    d = result.to_dict()
    d.update(scenario=dataclasses.asdict(scenario), scenario_key=scenario.key, generator=args.generator)
    emit(d, args.json, human)
    if args.method in NEEDS_LOWER and result.lower_bound is None:
        raise SearchError(f"{args.method}: no lower bound found: {'; '.join(result.notes) or 'see the trials'}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="run a benchmark methodology (maxrate, sweep, ndr, pdr, ndrpdr ...)",
                       description=__doc__)
    methods = p.add_subparsers(dest="method", required=True, metavar="METHOD")
    for name, (help_, add_options, build) in METHODS.items():
        m = methods.add_parser(name, help=help_, description=help_)
        add_scenario(m)
        add_trial(m, duration=None)
        add_options(m)
        m.add_argument("--disturbed-retries", type=integer(0), default=None, metavar="N",
                       help="run a trial during which a DUT core stalled again, whatever it lost, up to N "
                            "times (default 3; 0: judge every trial as it came)")
        m.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
        add_json(m)
        m.set_defaults(func=cmd_search, build=build)

