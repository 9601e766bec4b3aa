#!/usr/bin/env python3
"""What does the stall probe cost the CPU it watches? prog-bench of the calibrated DUT with and
without a ``perfkit.host.stallprobe.StallProbe`` armed on the bench CPU, alternated, at each timer period.

Every tick of the probe is a timer interrupt and a BPF callback on the probed CPU; on a VM the
interrupt and re-arming the timer are exits to the hypervisor, far dearer than on bare metal. Its
time is taken from whatever runs there: prog-bench's runs (the probe's softirq runs between them)
and, in a trial, the DUT's packet threads. The paired ratio (with / without, same round) is the
factor by which the probe slows the work; ``(ratio - 1) x period`` is the CPU time one tick costs
(with the speed probe's share: ~11 µs every ``SPEED_PERIOD_US``). The probe runs as in trials
(``TRIAL_REPORT_US``, ``SPEED_STEPS``); the order within a pair alternates from round to round.

Every run is recorded (``perfkit.benchresults``: ``bench/results/probe_cost.jsonl`` with the date and
host, a dated line in ``bench/RESULTS.md``) unless ``--no-record``: ``perfkit compare`` quotes the
latest when two runs' probes ticked at different periods. Run it under the testbed lock.

    .venv/bin/python bench/probe_cost.py [--periods 200,500,1000,1600] [--rounds 15] [--work 400] [--cpu N]
        [--json] [--no-record]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

from tqdm import tqdm

from perfkit import benchcli
from perfkit.cli.options import integer
from perfkit.dataplanes.calib import bench_work
from perfkit.dataplanes.calib.layouts import CALIB_MAX_WORK
from perfkit.errors import ConfigError
from perfkit.host.stallprobe import SPEED_STEPS, TRIAL_PERIOD_US, TRIAL_REPORT_US, StallProbe


#: prog-bench rounds per measurement: short, so that the two of a pair see the same host (its speed
#: drifts by some 10 % over seconds); many pairs make the median.
BENCH_ROUNDS = 5


def _refuse(field: str, value: object, allowed: str) -> int:
    print(f"probe_cost: {ConfigError(field, value, allowed)}", file=sys.stderr)
    return 2


def _periods(text: str) -> list[float] | None:
    """The distinct periods of ``text``, in order; None unless all lie between 50 and 100000 µs
    (above the timer resolution, below a trial)."""
    try:
        out = list(dict.fromkeys(float(p) for p in text.split(",")))
    except ValueError:
        return None
    return out if out and all(50 <= p <= 100_000 for p in out) else None


def _pair(work: int, cpu: int, period_us: float, probe_first: bool) -> float:
    """prog-bench with the probe armed / without it [1], the two measured back to back."""
    def with_probe() -> float:
        with StallProbe([cpu], period_us=period_us, report_us=TRIAL_REPORT_US, speed_steps=SPEED_STEPS):
            return bench_work(work, rounds=BENCH_ROUNDS, cpu=cpu)

    if probe_first:
        probed = with_probe()
        return probed / bench_work(work, rounds=BENCH_ROUNDS, cpu=cpu)
    without = bench_work(work, rounds=BENCH_ROUNDS, cpu=cpu)
    return with_probe() / without


def main(args: argparse.Namespace) -> int:
    periods = _periods(args.periods)
    if periods is None:
        return _refuse("periods", args.periods, "comma-separated periods between 50 and 100000 µs")
    if args.rounds < 1:
        return _refuse("rounds", args.rounds, "an integer >= 1")
    if not 0 < args.work <= CALIB_MAX_WORK:
        return _refuse("work", args.work, f"an integer between 1 and {CALIB_MAX_WORK}")
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[-1] if args.cpu is None else args.cpu
    if cpu not in cpus:
        return _refuse("cpu", args.cpu, f"one of the CPUs this process may use: {cpus}")
    ratios: dict[float, list[float]] = {p: [] for p in periods}
    bench_work(args.work, cpu=cpu)  # warm-up: the object, caches
    for n in tqdm(range(args.rounds), desc="rounds", file=sys.stderr):
        for p in periods:
            ratios[p].append(_pair(args.work, cpu, p, probe_first=n % 2 == 1))
    rows = [{"period_us": p, "ticks_per_s": 1e6 / p, "ratio_median": statistics.median(r),
             "ratio_min": min(r), "ratio_max": max(r), "ratios": r,
             "us_per_tick": (statistics.median(r) - 1) * p} for p, r in ratios.items()]
    figures = {"cpu": cpu, "work_iterations": args.work, "rounds": args.rounds, "trial_period_us": TRIAL_PERIOD_US,
               "periods": rows}
    if not args.no_record:
        summary = "; ".join(f"{r['period_us']:g} µs: {100 * (r['ratio_median'] - 1):+.1f} % "
                            f"[{r['ratio_min']:.3f}, {r['ratio_max']:.3f}], {r['us_per_tick']:.1f} µs per tick"
                            for r in rows)
        benchcli.record(args, "probe_cost", figures, f"calib N = {args.work}, {args.rounds} rounds; {summary}")
    if args.json:
        benchcli.print_json(figures)
        return 0
    print(f"calib N = {args.work} on CPU {cpu}, {args.rounds} rounds; prog-bench net ns per packet with the probe "
          f"/ without (paired, same round); trials use a {TRIAL_PERIOD_US:g} µs period")
    print(f"{'period [µs]':>12s} {'ticks/s':>8s} {'slowdown (median)':>18s} {'[min, max]':>16s} {'CPU µs per tick':>16s}")
    for r in rows:
        print(f"{r['period_us']:12g} {r['ticks_per_s']:8.0f} {100 * (r['ratio_median'] - 1):17.1f}% "
              f"{'[' + format(r['ratio_min'], '.3f') + ', ' + format(r['ratio_max'], '.3f') + ']':>16s} "
              f"{r['us_per_tick']:16.1f}")
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__, record="probe_cost")
    ap.add_argument("--periods", default="200,500,1000,1600",
                    help=f"probe timer periods to compare [µs], comma-separated (trials use {TRIAL_PERIOD_US:g})")
    ap.add_argument("--rounds", type=integer(1, what="a round count"), default=15, help="rounds; each measures every period with and without")
    ap.add_argument("--work", type=integer(0, CALIB_MAX_WORK, "work iterations"), default=400, help="the calibrated DUT's work iterations per packet")
    ap.add_argument("--cpu", type=integer(0, what="a CPU number"), default=None, help="CPU to bench on (default: the last this process may use)")
    benchcli.run(main, ap)
