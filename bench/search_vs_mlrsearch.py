#!/usr/bin/env python3
"""perfkit's ndrpdr search against FD.io CSIT's MLRsearch 1.2.1 (PyPI ``MLRsearch``), with the same goals.

Both tools search NDR (loss 0) and PDR (loss 0.5 %) at relative width 0.5 % (``--width``) on the
same DUTs with the same min/max rate and the same final trial duration (``--final-duration``) and
initial trial duration (``--initial-duration``); MLRsearch's warm-up trial is off, since perfkit
has none. MLRsearch runs as perfkit's ``mlrsearch`` method (``perfkit.search.mlr``: the library
measuring through perfkit's trial runner). The goals come in two configurations, each searched
by both tools (``--configs``):

- ``default``: MLRsearch's own goal defaults (exceed ratio 0.5, duration sum max(21 s, final
  duration), 2 preceding targets) -- what CSIT runs;
- ``strict``: exceed ratio 0 and duration sum = final duration, i.e. perfkit's old goals: a lower
  bound needs one good full-duration trial, any bad trial makes an upper bound.

DUTs are ``perfkit.generators.sim`` models (sharp, noisy, smooth; ``--models`` adds ``buffered``
and ``rare``: a sharp DUT whose trials lose 1e-4 of their packets at any rate with probability
``--spike-probability``), each run with ``--seeds`` seeds (only the noisy and rare ones differ
between seeds, unless ``--speed-sigma``: then every trial runs at a CPU speed drawn afresh, varying
less in longer trials, and trials are speed-normalized as on the testbed: the host noise of a VM,
reproducible and in seconds). ``--testbed`` adds the
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
ratio perfkit / MLRsearch of trial seconds for the same goals, and in how many seeds each tool's
lower bound lies within the other's bounds (B.lower x (1 - width) <= A.lower <= B.upper; the width
allowance is there because two correct lower bounds may each sit up to one width below the
truth); for the simulated DUTs also in how many seeds each tool's bounds bracket the truth, and
with two or more seeds or runs, how consistent each tool's searches are with each other. The
figures are recorded (``bench/results/search_vs_mlrsearch.jsonl`` and ``bench/RESULTS.md``; not with
``--no-record``). Figures only: nothing here asserts a timing.
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
from typing import Any, Callable

from perfkit import benchcli
from perfkit.cli.options import integer, number, seconds
from perfkit.errors import ConfigError
from perfkit.generators import create
from perfkit.generators.base import Generator
from perfkit.generators.sim import SimGenerator
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.search import line_rate_pps, run_method
from perfkit.search.result import trial_dict
from perfkit.trial import TrialResult

GOALS = (0.0, 0.005)
WIDTH = 0.005
"""The relative width both tools search to, unless ``--width`` says otherwise (issue 5: 0.5 %)."""
CONFIGS = ("default", "strict")
TOOLS = ("perfkit", "mlr")
#: The simulated DUTs: (model, options). ``rare``: a sharp DUT whose trials lose 1e-4 of their
#: packets at any rate now and then (``--spike-probability``), as a host's stalls make them.
SIM_MODELS = {"sharp": ("sharp", {}), "noisy": ("noisy", {}), "smooth": ("smooth", {}), "buffered": ("buffered", {}),
              "rare": ("noisy", {"sigma": 0.0, "spike_loss": 1e-4})}


@dataclass
class Run:
    """One search by one tool on one DUT."""

    tool: str
    """``<perfkit|mlr>-<config>``."""
    trials: list[tuple[float, float, float]]
    """(duration [s], intended rate [pps], loss ratio) per trial."""
    bounds: dict[float, tuple[float | None, float | None]]
    """goal loss ratio -> (relevant lower, relevant upper bound) [pps]."""
    throughput: dict[float, float | None]
    """goal loss ratio -> conditional throughput [pps]."""
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

    def goal_params(self, config: str) -> dict[str, Any]:
        """The goals of ``config`` (module doc), as both methods take them."""
        extra = (dict(exceed_ratio=0.0, duration_sum=self.final) if config == "strict"
                 else dict(exceed_ratio=0.5, duration_sum=max(21.0, self.final)))
        return dict(goals=list(GOALS), relative_width=self.width, initial_duration=self.initial,
                    final_duration=self.final, min_rate=self.min_rate, max_rate=self.max_rate, **extra)


# -- the two tools -----------------------------------------------------------------------------
def run_tool(gen: Generator, s: Settings, tool: str) -> Run:
    """``tool`` (``perfkit-default`` ...): perfkit's ndrpdr or MLRsearch with the config's goals."""
    name, config = tool.split("-")
    params = s.goal_params(config)
    if name == "perfkit":
        params["max_trials"] = 1000  # the bench compares the searches' own ends, not the safety stop
    start = time.monotonic()
    res = run_method("ndrpdr" if name == "perfkit" else "mlrsearch", gen, params, on_trial=s.on_trial)
    trials = [(t.duration, t.intended_pps, t.loss_ratio) for t in res.trials]
    bounds = {b.loss_tolerance: (b.lower_bound, b.upper_bound) for b in res.goals}
    throughput = {b.loss_tolerance: b.conditional_throughput for b in res.goals}
    return Run(tool, trials, bounds, throughput, time.monotonic() - start, res.disturbed_trials, res.limited_by)


def tools(configs: list[str]) -> list[str]:
    return [f"{t}-{c}" for c in configs for t in TOOLS]


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
           noise: float, width: float) -> dict[str, Any]:
    """Print the DUT's rows; return its figures per config (what is recorded)."""
    figures: dict[str, Any] = {}
    for tool, rs in runs.items():
        name, config = tool.split("-")
        pk = runs[f"perfkit-{config}"]
        seconds = statistics.mean(r.seconds for r in rs)
        trials = statistics.mean(len(r.trials) for r in rs)
        cols = [f"{dut:14s}", f"{tool:15s}", f"{trials:6.1f}", f"{seconds:8.1f}"]
        cols += [fmt_bounds(rs[0].bounds[g]) for g in GOALS]
        if name == "perfkit":
            cols += [f"{'':>6s}", f"{'':>17s}", f"{'':>17s}"]
        else:
            pk_seconds = statistics.mean(r.seconds for r in pk)
            fig = figures[config] = {"perfkit_trial_seconds": round(pk_seconds, 2), "mlr_trial_seconds": round(seconds, 2),
                                     "ratio": round(pk_seconds / seconds, 3),
                                     "perfkit_trials": statistics.mean(len(r.trials) for r in pk), "mlr_trials": trials}
            cols.append(f"{pk_seconds / seconds:6.2f}")
            for g in GOALS:
                a_in_b = count([within(p.bounds[g], m.bounds[g], width) for p, m in zip(pk, rs)])
                b_in_a = count([within(m.bounds[g], p.bounds[g], width) for p, m in zip(pk, rs)])
                cols.append(f"{a_in_b:>7s} {b_in_a:>9s}")
                goal = "ndr" if g == 0 else "pdr"
                fig[f"{goal}_perfkit_in_mlr"], fig[f"{goal}_mlr_in_perfkit"] = a_in_b, b_in_a
        print("  ".join(cols))
        if verbose:
            for d, rate, loss in rs[0].trials:
                print(f"{'':32s}trial {d:5.2f} s at {rate / 1e6:9.5f} Mpps  loss {loss:.6f}")
    spread = [_spread(tool, rs) for tool, rs in runs.items()]
    if any(spread):
        print(f"{'':14s}  conditional throughput over seeds, mean (min..max) [Mpps]: " + "; ".join(filter(None, spread)))
    if truth:
        allowance = f" +-{noise:.0%} (2 sigma of the threshold and speed noise)" if noise else ""
        print(f"{'':14s}  truth: NDR {truth[0.0] / 1e6:.4f} Mpps, PDR {truth[0.005] / 1e6:.4f} Mpps; "
              f"bounds bracket the truth{allowance}: " + _coverage(runs, truth, noise)
              + (f"; exactly: {_coverage(runs, truth, 0.0)}" if noise else ""))
        for tool, rs in runs.items():
            figures.setdefault(tool.split("-")[1], {})[f"{tool.split('-')[0]}_brackets_truth"] = count(
                [all(_brackets(r.bounds[g], truth[g], noise) for g in GOALS) for r in rs])
    if len(next(iter(runs.values()))) > 1:
        print(f"{'':14s}  each tool's searches consistent with each other (NDR, ordered pairs): "
              + ", ".join(f"{t} {self_consistency(rs, width)}" for t, rs in runs.items()))
    return figures


def _coverage(runs: dict[str, list[Run]], truth: dict[float, float], tolerance: float) -> str:
    """Per tool: in how many searches both goals' bounds bracket the truth (within ``tolerance``)."""
    return ", ".join(f"{t} {count([all(_brackets(r.bounds[g], truth[g], tolerance) for g in GOALS) for r in rs])}"
                     for t, rs in runs.items())


def _spread(tool: str, rs: list[Run]) -> str:
    """``tool NDR m (a..b), PDR ...`` if the conditional throughputs differ between seeds, else ''."""
    parts = []
    for g in GOALS:
        tps = [r.throughput[g] for r in rs if r.throughput[g] is not None]
        if len(set(tps)) > 1:
            parts.append(f"{'NDR' if g == 0 else 'PDR'} {statistics.mean(tps) / 1e6:.4f} "
                         f"({min(tps) / 1e6:.4f}..{max(tps) / 1e6:.4f})")
    return f"{tool} " + ", ".join(parts) if parts else ""


def _brackets(b: tuple[float | None, float | None], true: float, tolerance: float) -> bool:
    """lower <= true < upper, each side allowed ``tolerance`` (relative) of slack."""
    return b[0] is not None and b[0] <= true * (1 + tolerance) and (
        b[1] is None or true * (1 - tolerance) < b[1])


HEADER = (f"{'DUT':14s}  {'tool':15s}  {'trials':>6s}  {'trial s':>8s}  {'NDR lo..hi [Mpps]':>16s}  "
          f"{'PDR lo..hi [Mpps]':>16s}  {'pk/mlr':>6s}  {'NDR pk∈mlr mlr∈pk':>17s}  "
          f"{'PDR pk∈mlr mlr∈pk':>17s}")


# -- main --------------------------------------------------------------------------------------
def arguments() -> argparse.ArgumentParser:
    ap = benchcli.parser(__doc__, record="search_vs_mlrsearch", json=False)
    ap.add_argument("--final-duration", type=seconds, default=10.0, help="final trial duration [s] (10)")
    ap.add_argument("--width", type=number(0.0, "a relative width"), default=WIDTH,
                    help=f"relative width of both goals ({WIDTH})")
    ap.add_argument("--initial-duration", type=seconds, default=1.0, help="initial trial duration [s] (1)")
    ap.add_argument("--configs", default="default,strict", help="goal configurations (default,strict)")
    ap.add_argument("--threshold", default="1Mpps", help="simulated DUT capacity (1Mpps)")
    ap.add_argument("--sigma", type=number(0.0, "a relative sigma"), default=0.01,
                    help="noisy DUT: relative threshold sigma (0.01)")
    ap.add_argument("--spike-probability", type=number(0.0, "a probability"), default=0.2,
                    help="rare DUT: probability that a trial loses 1e-4 of its packets (0.2)")
    ap.add_argument("--seeds", type=integer(1, what="a seed count"), default=10, help="runs per simulated DUT (10)")
    ap.add_argument("--speed-sigma", type=number(0.0, "a relative standard deviation"), default=0.0,
                    help="simulated DUTs: relative standard deviation of the CPU's speed in 1 s trials, averaging "
                         "down as 1/sqrt(duration) in longer ones, trials speed-normalized as on the testbed "
                         "(a VM's host noise: this VM's was about 0.07; 0: none)")
    ap.add_argument("--models", default="sharp,noisy,smooth",
                    help="simulated DUTs (sharp,noisy,smooth[,buffered,rare]; none: only --testbed)")
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


def _configs(text: str) -> list[str]:
    configs = [c.strip() for c in text.split(",") if c.strip()]
    for c in configs:
        if c not in CONFIGS:
            raise ConfigError("--configs", c, CONFIGS)
    return configs or list(CONFIGS)


def _models(text: str) -> list[str]:
    models = [m.strip() for m in text.split(",") if m.strip() and m.strip() != "none"]
    for m in models:
        if m not in SIM_MODELS:
            raise ConfigError("--models", m, SIM_MODELS)
    return models


def main(args: argparse.Namespace) -> int:
    if not 0 < args.width < 1:
        raise ConfigError("--width", args.width, "a relative width, 0 < x < 1 (0.005 = 0.5 %)")
    if not 0 <= args.speed_sigma < 0.5:
        raise ConfigError("--speed-sigma", args.speed_sigma, "a relative standard deviation, 0 <= x < 0.5")
    if not 0 <= args.spike_probability <= 1:
        raise ConfigError("--spike-probability", args.spike_probability, "a probability, 0 .. 1")
    configs, models = _configs(args.configs), _models(args.models)
    scenario = Scenario("pgwu", frame_size=64, params={"direction": "ul"})
    s = settings(args, scenario)
    print(f"NDR (0) and PDR (0.5%) at relative width {s.width:.2%}; rates {s.min_rate:.6g}..{s.max_rate:.6g} pps; "
          f"trials {s.initial:g} s initial, {s.final:g} s final; {args.seeds} seed(s) per simulated DUT; "
          f"goals: " + "; ".join(f"{c}: exceed ratio {s.goal_params(c)['exceed_ratio']:g}, duration sum "
                                 f"{s.goal_params(c)['duration_sum']:g} s" for c in configs))
    print(HEADER)
    figures: dict[str, Any] = {}
    for model in models:
        kind, options = SIM_MODELS[model]
        options = {**options, **({"spike_probability": args.spike_probability} if model == "rare" else {})}
        runs: dict[str, list[Run]] = {t: [] for t in tools(configs)}
        sim = None
        for seed in range(args.seeds):
            for tool in runs:
                sim = SimGenerator(scenario, model=kind, threshold=args.threshold,
                                   **{"sigma": args.sigma, **options}, seed=seed,
                                   **({"speed_sigma": args.speed_sigma, "speed_per_second": True, "speed_reference": "auto"}
                                      if args.speed_sigma else {}))
                runs[tool].append(run_tool(sim, s, tool))
        truth = {g: sim.model.pdr(g, s.final) for g in GOALS} if sim else None
        # the bounds rest on final-duration trials, whose speed varies less than 1 s ones
        noise = 2 * math.hypot(args.sigma if model == "noisy" else 0.0, args.speed_sigma / math.sqrt(s.final))
        dut = model + (f"+speed{args.speed_sigma:g}" if args.speed_sigma else "")
        figures[dut] = report(dut, runs, truth, args.verbose, noise, s.width)
    if args.testbed:
        params = dict(kv.split("=", 1) for kv in args.param) if args.param else (
            {"direction": "ul"} if args.dataplane == "pgwu" else {})
        bed = Scenario(args.dataplane, frame_size=64, params=params,
                       **({"flows": args.flows} if args.flows else {}))
        figures["testbed"] = run_testbed(bed, settings(args, bed), configs, args.verbose, args.runs, args.rx_queue,
                                         args.handling == "on", args.trials, args.shield)
    print("pk/mlr: perfkit's mean trial seconds / MLRsearch's with the same goals; pk∈mlr: seeds where perfkit's lower "
          "bound lies within MLRsearch's bounds (mlr∈pk: the reverse), one width of allowance below the lower bound")
    benchcli.record(args, "search_vs_mlrsearch", figures, summary(figures))
    return 0


def summary(figures: dict[str, Any]) -> str:
    """One line per run for bench/RESULTS.md: per DUT and config, the trial-seconds ratio and how
    often each tool's NDR and PDR lay within the other's bounds."""
    parts = []
    for dut, per_config in figures.items():
        for config, f in per_config.items():
            if "ratio" not in f:
                continue
            parts.append(f"{dut} {config}: perfkit {f['perfkit_trial_seconds']:g} s / MLRsearch {f['mlr_trial_seconds']:g} s "
                         f"= {f['ratio']:.2f}, NDR pk∈mlr {f['ndr_perfkit_in_mlr']} mlr∈pk {f['ndr_mlr_in_perfkit']}, "
                         f"PDR pk∈mlr {f['pdr_perfkit_in_mlr']} mlr∈pk {f['pdr_mlr_in_perfkit']}")
    return "; ".join(parts)


def run_testbed(scenario: Scenario, s: Settings, configs: list[str], verbose: bool, n: int = 1, rx_queue: int = 0,
                handling: bool = True, trial_file: Path | None = None, shield: bool = False) -> dict[str, Any]:
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
        runs: dict[str, list[Run]] = {tool: [] for tool in tools(configs)}
        out = trial_file.open("w") if trial_file else None
        for i in range(n):
            for tool in runs:
                if out:
                    s.on_trial = lambda t, tool=tool, i=i: (out.write(json.dumps({"tool": tool, "search": i, **trial_dict(t)},
                                                                                 default=str) + "\n"), out.flush())
                run = run_tool(gen, s, tool)
                runs[tool].append(run)
                print(f"testbed search {i + 1}/{n} {tool}: {len(run.trials)} trials, {run.seconds:.1f} trial s, "
                      f"{run.disturbed} disturbed, NDR {fmt_bounds(run.bounds[0.0])} (limited by {run.limited_by}), "
                      f"PDR {fmt_bounds(run.bounds[0.005])} Mpps", file=sys.stderr, flush=True)
    figures = report("testbed", runs, None, verbose, 0.0, s.width)
    for tool, rs in runs.items():
        disturbed = statistics.mean(r.disturbed for r in rs)
        print(f"{'':14s}  {tool}: wall {statistics.mean(r.wall for r in rs):.1f} s per search, "
              f"{disturbed:.1f} disturbed trials, NDR limited by {', '.join(r.limited_by for r in rs)}")
    return figures


def self_consistency(rs: list[Run], width: float) -> str:
    """In how many ordered pairs of one tool's searches the first's NDR lower bound lies within the
    second's bounds (``within``): what the tool's own repeatability allows between two tools."""
    pairs = [(a, b) for a in rs for b in rs if a is not b]
    return count([within(a.bounds[0.0], b.bounds[0.0], width) for a, b in pairs])


if __name__ == "__main__":
    benchcli.run(main, arguments())
