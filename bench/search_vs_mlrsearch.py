#!/usr/bin/env python3
"""perfkit's ndrpdr search against FD.io CSIT's MLRsearch 1.2.1 (PyPI ``MLRsearch``).

Both tools search NDR (loss 0) and PDR (loss 0.5 %) at relative width 0.5 % (``--width``) on the
same DUTs with the same min/max rate and the same final trial duration (``--final-duration``) and
initial trial duration (``--initial-duration``); MLRsearch's warm-up trial is off, since perfkit
has none.
MLRsearch runs in two configurations:

- ``mlr-default``: MLRsearch's own goal defaults for everything else (exceed ratio 0.5, duration
  sum max(21 s, final duration), 2 preceding targets) -- what CSIT runs;
- ``mlr-strict``: exceed ratio 0 and duration sum = final duration, i.e. perfkit's acceptance
  rule: a lower bound needs one good full-duration trial, any bad trial makes an upper bound.

DUTs are ``perfkit.generators.sim`` models (sharp, noisy, smooth; ``--models`` adds ``buffered``),
each run with ``--seeds`` seeds (only the noisy one differs between seeds, unless ``--speed-sigma``:
then every trial runs at a CPU speed drawn afresh, varying less in longer trials, and trials are
speed-normalized as on the testbed: the host noise of a VM, reproducible and in seconds). ``--testbed`` adds the
real veth testbed (``perfkit.generators.create('xdp', scenario)``): PGW-U uplink by default, or any
dataplane (``--dataplane``, ``--param``, ``--flows``), with the veth ring or a NIC-sized receive
queue (``--rx-queue``), ``--runs`` searches per tool taking turns; with two or more, each tool's
searches are also compared with each other (how consistent a tool is with itself bounds how
consistent two tools can be). On the testbed every tool gets the same host handling (``--handling``,
on by default): a trial whose loss measured host stalls explain is run again (up to 3 times, every
run's seconds counted), and rates are judged at the DUT cores' reference speed (one saturating
trial at the start, ``Generator.set_speed_reference("auto")``); MLRsearch gets it through perfkit's
``TrialLog``, so that the tools differ only in how they search.

Printed per DUT and tool: mean trials, mean total trial seconds, the bounds of the first seed, the
ratio perfkit / MLRsearch of trial seconds, and in how many seeds each tool's lower bound lies
within the other's bounds (B.lower x (1 - width) <= A.lower <= B.upper; the width allowance is
there because two correct lower bounds may each sit up to one width below the truth); for the
simulated DUTs also in how many seeds each tool's bounds bracket the truth, and with two or more
seeds or runs, how consistent each tool's searches are with each other. Figures only: nothing here asserts a timing.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from MLRsearch import AbstractMeasurer, Config, MeasurementResult, MultipleLossRatioSearch, SearchGoal

from perfkit import benchcli
from perfkit.cli.options import integer, number, seconds
from perfkit.errors import ConfigError
from perfkit.generators import create
from perfkit.generators.base import Generator
from perfkit.generators.sim import SimGenerator
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.search import NdrPdr, line_rate_pps, ndrpdr
from perfkit.search.common import TrialLog, trial_dict
from perfkit.trial import TrialResult

GOALS = (0.0, 0.005)
WIDTH = 0.005
"""The relative width both tools search to, unless ``--width`` says otherwise (issue 5: 0.5 %)."""
TOOLS = ("perfkit", "mlr-default", "mlr-strict")


@dataclass
class Run:
    """One search by one tool on one DUT."""

    tool: str
    trials: list[tuple[float, float, float]]
    """(duration [s], intended rate [pps], loss ratio) per trial."""
    bounds: dict[float, tuple[float | None, float | None]]
    """goal loss ratio -> (lower, upper) [pps]."""
    wall: float
    disturbed: int = 0
    """Trials whose loss measured host stalls explained (each run again; their seconds count)."""
    limited_by: str = ""
    """What limited the NDR (``perfkit.search.limits.LIMITS``). MLRsearch's bounds are loads it asked
    for, which speed-normalized trials seldom land on exactly, so the loss behind its upper bound is
    seldom found: its NDR is told ``dut`` unless the generator or the maximum rate limited it."""

    @property
    def seconds(self) -> float:
        return sum(t[0] for t in self.trials)


@dataclass
class Settings:
    min_rate: float
    max_rate: float
    initial: float
    final: float
    width: float = WIDTH
    """Relative width of every goal [1]."""
    on_trial: Callable[[TrialResult], None] | None = None
    """Called with every trial (``--trials``)."""


# -- the two tools -----------------------------------------------------------------------------
def run_perfkit(gen: Generator, s: Settings) -> Run:
    start = time.monotonic()
    res = ndrpdr(gen, NdrPdr(goals=GOALS, relative_width=s.width, initial_duration=s.initial,
                             final_duration=s.final, min_rate=s.min_rate, max_rate=s.max_rate),
                 on_trial=s.on_trial)
    trials = [(t.duration, t.intended_pps, t.loss_ratio) for t in res.trials]
    bounds = {b.loss_tolerance: (b.lower_bound, b.upper_bound) for b in res.goals}
    return Run("perfkit", trials, bounds, time.monotonic() - start, res.disturbed_trials, res.limited_by)


class _MlrMeasurer(AbstractMeasurer):
    """MLRsearch's measurer interface over a perfkit generator, through perfkit's ``TrialLog``: the
    same host handling as perfkit's searches get (a disturbed trial is run again, the rate asked
    for is corrected for the DUT cores' predicted speed), so that the tools differ only in how
    they search. MLRsearch files a trial under the load it asked for; perfkit judges at the
    (speed-normalized) offered rate, which lands within a few per cent of it."""

    def __init__(self, gen: Generator, on_trial: Callable[[TrialResult], None] | None = None):
        self.log = TrialLog(gen, "mlrsearch", on_trial)

    @property
    def trials(self) -> list[TrialResult]:
        return self.log.trials

    def measure(self, intended_duration: float, intended_load: float) -> MeasurementResult:
        t = self.log.run(intended_load, intended_duration, "trial")
        # the DUT's loss, as perfkit judges it: frames the tester's own ring dropped were forwarded
        forwarded = t.tx_packets - round(t.dut_loss_ratio * t.tx_packets)
        return MeasurementResult(intended_duration=intended_duration, intended_load=intended_load,
                                 offered_count=t.tx_packets, forwarding_count=forwarded,
                                 intended_count=t.intended_packets)


def run_mlr(gen: Generator, s: Settings, strict: bool) -> Run:
    extra = dict(exceed_ratio=0.0, duration_sum=s.final) if strict else dict(duration_sum=max(21.0, s.final))
    goals = [SearchGoal(loss_ratio=g, relative_width=s.width, initial_trial_duration=s.initial,
                        final_trial_duration=s.final, **extra) for g in GOALS]
    config = Config()
    config.goals = goals
    config.min_load = s.min_rate
    config.max_load = s.max_rate
    config.warmup_duration = None
    config.search_duration_max = 1e9
    measurer = _MlrMeasurer(gen, s.on_trial)
    start = time.monotonic()
    result = MultipleLossRatioSearch(config).search(measurer, debug=lambda _msg: None)
    bounds = {}
    for goal, gr in result.items():
        lo, hi = gr.relevant_lower_bound, gr.relevant_upper_bound
        bounds[goal.loss_ratio] = (float(lo) if lo else None, float(hi) if hi else None)
    trials = [(t.duration, t.intended_pps, t.loss_ratio) for t in measurer.trials]
    return Run("mlr-strict" if strict else "mlr-default", trials, bounds, time.monotonic() - start,
               sum(t.disturbed for t in measurer.trials), measurer.log.evidence().limit(*bounds[0.0], 0.0))


RUNNERS: dict[str, Callable[[Generator, Settings], Run]] = {
    "perfkit": run_perfkit,
    "mlr-default": lambda g, s: run_mlr(g, s, strict=False),
    "mlr-strict": lambda g, s: run_mlr(g, s, strict=True),
}


# -- comparing ---------------------------------------------------------------------------------
def within(a: tuple[float | None, float | None], b: tuple[float | None, float | None],
           width: float) -> bool | None:
    """Whether a's lower bound lies within b's bounds (with one width of allowance below)."""
    if a[0] is None or b[0] is None:
        return None if a[0] is None and b[0] is None else False
    upper = b[1] if b[1] is not None else float("inf")
    return b[0] * (1 - width) <= a[0] <= upper


def fmt_bounds(b: tuple[float | None, float | None]) -> str:
    f = (lambda x: "   none" if x is None else f"{x / 1e6:7.4f}")
    return f"{f(b[0])}..{f(b[1])}"


def count(flags: list[bool | None]) -> str:
    return f"{sum(1 for f in flags if f)}/{len(flags)}"


def report(dut: str, runs: dict[str, list[Run]], truth: dict[float, float] | None, verbose: bool,
           noise: float, width: float) -> None:
    pk = runs["perfkit"]
    pk_seconds = statistics.mean(r.seconds for r in pk)
    for tool in TOOLS:
        rs = runs[tool]
        seconds = statistics.mean(r.seconds for r in rs)
        trials = statistics.mean(len(r.trials) for r in rs)
        cols = [f"{dut:10s}", f"{tool:11s}", f"{trials:6.1f}", f"{seconds:8.1f}"]
        cols += [fmt_bounds(rs[0].bounds[g]) for g in GOALS]
        if tool == "perfkit":
            cols += [f"{'':>6s}", f"{'':>17s}", f"{'':>17s}"]
        else:
            cols.append(f"{pk_seconds / seconds:6.2f}")
            for g in GOALS:
                a_in_b = count([within(p.bounds[g], m.bounds[g], width) for p, m in zip(pk, rs)])
                b_in_a = count([within(m.bounds[g], p.bounds[g], width) for p, m in zip(pk, rs)])
                cols.append(f"{a_in_b:>7s} {b_in_a:>9s}")
        print("  ".join(cols))
        if verbose:
            for d, rate, loss in rs[0].trials:
                print(f"{'':26s}trial {d:5.2f} s at {rate / 1e6:9.5f} Mpps  loss {loss:.6f}")
    spread = [_spread(tool, runs[tool]) for tool in TOOLS]
    if any(spread):
        print(f"{'':10s}  lower bounds over seeds, mean (min..max) [Mpps]: " + "; ".join(filter(None, spread)))
    if truth:
        allowance = f" +-{noise:.0%} (2 sigma of the threshold and speed noise)" if noise else ""
        print(f"{'':10s}  truth: NDR {truth[0.0] / 1e6:.4f} Mpps, PDR {truth[0.005] / 1e6:.4f} Mpps; "
              f"bounds bracket the truth{allowance}: " + _coverage(runs, truth, noise)
              + (f"; exactly: {_coverage(runs, truth, 0.0)}" if noise else ""))
    if len(pk) > 1:
        print(f"{'':10s}  each tool's searches consistent with each other (NDR, ordered pairs): "
              + ", ".join(f"{t} {self_consistency(runs[t], width)}" for t in TOOLS))


def _coverage(runs: dict[str, list[Run]], truth: dict[float, float], tolerance: float) -> str:
    """Per tool: in how many searches both goals' bounds bracket the truth (within ``tolerance``)."""
    return ", ".join(f"{t} {count([all(_brackets(r.bounds[g], truth[g], tolerance) for g in GOALS) for r in rs])}"
                     for t, rs in runs.items())


def _spread(tool: str, rs: list[Run]) -> str:
    """``tool NDR m (a..b), PDR ...`` if the lower bounds differ between seeds, else ''."""
    parts = []
    for g in GOALS:
        lows = [r.bounds[g][0] for r in rs if r.bounds[g][0] is not None]
        if len(set(lows)) > 1:
            parts.append(f"{'NDR' if g == 0 else 'PDR'} {statistics.mean(lows) / 1e6:.4f} "
                         f"({min(lows) / 1e6:.4f}..{max(lows) / 1e6:.4f})")
    return f"{tool} " + ", ".join(parts) if parts else ""


def _brackets(b: tuple[float | None, float | None], true: float, tolerance: float) -> bool:
    """lower <= true < upper, each side allowed ``tolerance`` (relative) of slack."""
    return b[0] is not None and b[0] <= true * (1 + tolerance) and (
        b[1] is None or true * (1 - tolerance) < b[1])


HEADER = (f"{'DUT':10s}  {'tool':11s}  {'trials':>6s}  {'trial s':>8s}  {'NDR lo..hi [Mpps]':>16s}  "
          f"{'PDR lo..hi [Mpps]':>16s}  {'pk/mlr':>6s}  {'NDR pk∈mlr mlr∈pk':>17s}  "
          f"{'PDR pk∈mlr mlr∈pk':>17s}")


# -- main --------------------------------------------------------------------------------------
def arguments() -> argparse.ArgumentParser:
    ap = benchcli.parser(__doc__, json=False)
    ap.add_argument("--final-duration", type=seconds, default=10.0, help="final trial duration [s] (10)")
    ap.add_argument("--width", type=number(0.0, "a relative width"), default=WIDTH,
                    help=f"relative width of both goals ({WIDTH})")
    ap.add_argument("--initial-duration", type=seconds, default=1.0, help="initial trial duration [s] (1)")
    ap.add_argument("--threshold", default="1Mpps", help="simulated DUT capacity (1Mpps)")
    ap.add_argument("--sigma", type=number(0.0, "a relative sigma"), default=0.01,
                    help="noisy DUT: relative threshold sigma (0.01)")
    ap.add_argument("--seeds", type=integer(1, what="a seed count"), default=10, help="runs per simulated DUT (10)")
    ap.add_argument("--speed-sigma", type=number(0.0, "a relative standard deviation"), default=0.0,
                    help="simulated DUTs: relative standard deviation of the CPU's speed in 1 s trials, averaging "
                         "down as 1/sqrt(duration) in longer ones, trials speed-normalized as on the testbed "
                         "(a VM's host noise: this VM's was about 0.07; 0: none)")
    ap.add_argument("--models", default="sharp,noisy,smooth", help="simulated DUTs (sharp,noisy,smooth[,buffered])")
    ap.add_argument("--max-rate", default="100%", help="max rate, e.g. 100%% (of 10GbE) or 5Mpps")
    ap.add_argument("--min-rate", default=None, help="min rate (default max / 1000)")
    ap.add_argument("--testbed", action="store_true", help="also run on the local veth testbed")
    ap.add_argument("--runs", type=integer(1, what="a search count"), default=1,
                    help="testbed: searches per tool, alternating (1)")
    ap.add_argument("--dataplane", default="pgwu", help="testbed: the dataplane (pgwu)")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                    help="testbed: a dataplane parameter (default for pgwu: direction=ul)")
    ap.add_argument("--flows", type=integer(1, what="a flow count"), default=None,
                    help="testbed: flows (default: the dataplane's)")
    ap.add_argument("--rx-queue", type=integer(0, what="a frame count"), default=0,
                    help="testbed: frames of the DUT's receive queue (0: the veth rings; 4096: a NIC's)")
    ap.add_argument("--handling", choices=("on", "off"), default="on",
                    help="testbed: host handling for every tool -- on: disturbed trials run again and rates "
                         "judged at the DUT cores' reference speed and kernel path cost, measured once at the "
                         "start; off: raw trials (default on)")
    ap.add_argument("--shield", action="store_true",
                    help="testbed: move every other task off the DUT core for the whole run (perfkit.testbed.shield)")
    ap.add_argument("--trials", type=Path, default=None, metavar="FILE",
                    help="testbed: write every trial as a JSON line as it ends (the tool and search number added)")
    ap.add_argument("--verbose", action="store_true", help="print every trial of the first seed")
    return ap


def settings(args: argparse.Namespace, scenario: Scenario) -> Settings:
    wire = scenario.traffic().wire_frame_size
    top = Rate.parse(args.max_rate, scenario.line_rate).pps(wire) if args.max_rate else line_rate_pps(scenario)
    low = Rate.parse(args.min_rate, scenario.line_rate).pps(wire) if args.min_rate else top / 1000
    return Settings(min_rate=low, max_rate=top, initial=args.initial_duration, final=args.final_duration,
                    width=args.width)


def main(args: argparse.Namespace) -> int:
    if not 0 < args.width < 1:
        raise ConfigError("--width", args.width, "a relative width, 0 < x < 1 (0.005 = 0.5 %)")
    if not 0 <= args.speed_sigma < 0.5:
        raise ConfigError("--speed-sigma", args.speed_sigma, "a relative standard deviation, 0 <= x < 0.5")
    scenario = Scenario("pgwu", frame_size=64, params={"direction": "ul"})
    s = settings(args, scenario)
    print(f"NDR (0) and PDR (0.5%) at relative width {s.width:.2%}; rates {s.min_rate:.6g}..{s.max_rate:.6g} pps; "
          f"trials {s.initial:g} s initial, {s.final:g} s final; {args.seeds} seed(s) per simulated DUT")
    print(HEADER)
    for model in args.models.split(","):
        runs: dict[str, list[Run]] = {t: [] for t in TOOLS}
        sim = None
        for seed in range(args.seeds):
            for tool in TOOLS:
                sim = SimGenerator(scenario, model=model, threshold=args.threshold, sigma=args.sigma, seed=seed,
                                   **({"speed_sigma": args.speed_sigma, "speed_per_second": True, "speed_reference": "auto"}
                                      if args.speed_sigma else {}))
                runs[tool].append(RUNNERS[tool](sim, s))
        truth = {g: sim.model.pdr(g, s.final) for g in GOALS} if sim else None
        # the bounds rest on final-duration trials, whose speed varies less than 1 s ones
        noise = 2 * math.hypot(args.sigma if model == "noisy" else 0.0, args.speed_sigma / math.sqrt(s.final))
        report(model + (f"+speed{args.speed_sigma:g}" if args.speed_sigma else ""), runs, truth, args.verbose, noise, s.width)
    if args.testbed:
        params = dict(kv.split("=", 1) for kv in args.param) if args.param else (
            {"direction": "ul"} if args.dataplane == "pgwu" else {})
        bed = Scenario(args.dataplane, frame_size=64, params=params,
                       **({"flows": args.flows} if args.flows else {}))
        run_testbed(bed, settings(args, bed), args.verbose, args.runs, args.rx_queue, args.handling == "on",
                    args.trials, args.shield)
    print("pk/mlr: perfkit's mean trial seconds / the MLRsearch row's; pk∈mlr: seeds where perfkit's lower bound "
          "lies within MLRsearch's bounds (mlr∈pk: the reverse), one width of allowance below the lower bound")
    return 0


def run_testbed(scenario: Scenario, s: Settings, verbose: bool, n: int = 1, rx_queue: int = 0,
                handling: bool = True, trial_file: Path | None = None, shield: bool = False) -> None:
    """The same comparison on the real veth testbed: ``n`` searches per tool, the tools taking
    turns (the host's drifts hit every tool alike), every tool with the same host handling."""
    with create("xdp", scenario, rx_queue=rx_queue, disturbed_retries=3 if handling else 0, shield=shield) as gen:
        if handling:
            gen.set_speed_reference("auto")
        ref = (f"disturbed trials run again, rates at the reference speed {gen.speed_reference_ns:.3f} ns per "
               f"probe step" + (f" and kernel path cost {gen.kernel_reference_ns:.0f} ns per packet"
                                if gen.kernel_reference_ns else "")) if handling else "off (raw trials)"
        print(f"testbed: {scenario.key}, DUT receive queue {rx_queue or 'the veth ring (256)'} frames, "
              f"rates {s.min_rate:.6g}..{s.max_rate:.6g} pps, {n} search(es) per tool; host handling: {ref}"
              + ("; the DUT core shielded" if shield else ""))
        runs: dict[str, list[Run]] = {tool: [] for tool in TOOLS}
        out = trial_file.open("w") if trial_file else None
        for i in range(n):
            for tool in TOOLS:
                if out:
                    s.on_trial = lambda t, tool=tool, i=i: (out.write(json.dumps({"tool": tool, "search": i, **trial_dict(t)},
                                                                                 default=str) + "\n"), out.flush())
                run = RUNNERS[tool](gen, s)
                runs[tool].append(run)
                print(f"testbed search {i + 1}/{n} {tool}: {len(run.trials)} trials, {run.seconds:.1f} trial s, "
                      f"{run.disturbed} disturbed, NDR {fmt_bounds(run.bounds[0.0])} (limited by {run.limited_by}), "
                      f"PDR {fmt_bounds(run.bounds[0.005])} Mpps", file=sys.stderr, flush=True)
    report("testbed", runs, None, verbose, 0.0, s.width)
    for tool in TOOLS:
        disturbed = statistics.mean(r.disturbed for r in runs[tool])
        print(f"{'':10s}  {tool}: wall {statistics.mean(r.wall for r in runs[tool]):.1f} s per search, "
              f"{disturbed:.1f} disturbed trials, NDR limited by {', '.join(r.limited_by for r in runs[tool])}")


def self_consistency(rs: list[Run], width: float) -> str:
    """In how many ordered pairs of one tool's searches the first's NDR lower bound lies within the
    second's bounds (``within``): what the tool's own repeatability allows between two tools."""
    pairs = [(a, b) for a in rs for b in rs if a is not b]
    return count([within(a.bounds[0.0], b.bounds[0.0], width) for a, b in pairs])


if __name__ == "__main__":
    benchcli.run(main, arguments())
