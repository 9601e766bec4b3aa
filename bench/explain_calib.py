#!/usr/bin/env python3
"""Known truth for ``perfkit explain``: the calibrated DUT at N against 2N work iterations. The gap
must lie on the BPF program's own function (>= 90 %), and be what prog-bench's calibration predicts
(slope x N, within 15 %).

Per round, for N and 2N in alternating order: a testbed, a warm-up, then ``--trials`` trials as fast
as the generator sends, each with ``perf record`` of the DUT core, stored as a run (each trial a
unit of its own: a repeat); then one prog-bench pass at N and 2N on the DUT core with the stall
probe armed, as in trials (``tests/test_calib.py``: the calibration spans the trials' time). Then
``perfkit explain --a <N> --b <2N>`` on the run. Figures: the gap and its noise [ns per packet], the
prediction, their ratio, the share of the gap on the program (kind ``program``), the top function.

Every run is recorded (``bench/results/explain_calib.jsonl``, a dated line in ``bench/RESULTS.md``)
unless ``--no-record``. Run it under the testbed lock.

    .venv/bin/python bench/explain_calib.py [--work 400] [--rounds 2] [--trials 2] [--duration 1]
        [--root DIR] [--json] [--no-record]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from perfkit import benchcli
from perfkit.cli.options import integer, seconds
from perfkit.dataplanes.calib import Calibration, bench_work
from perfkit.explain.command import choose_pairs, explain_pairs
from perfkit.generators import create
from perfkit.host.stallprobe import TRIAL_PERIOD_US, TRIAL_REPORT_US, StallProbe
from perfkit.perf.record import PerfRecorder
from perfkit.perf.store import write_folded
from perfkit.scenario import Scenario
from perfkit.store import RunStore


def record_run(root: Path, work: int, rounds: int, trials: int, duration: float,
               speeds: dict[int, list[float]]) -> tuple[RunStore, Calibration, dict[int, str]]:
    """The run of trials at N and 2N (with perf), the calibration taken between them, and N -> key.
    ``speeds`` gets each trial's DUT core speed (the stall probe's step, ns: higher is slower)."""
    store = RunStore.create(None, root)
    works = (work, 2 * work)
    points: dict[int, list[float]] = {w: [] for w in works}
    keys: dict[int, str] = {}
    for r in range(rounds):
        for w in (works if r % 2 == 0 else works[::-1]):
            sc = Scenario("calib", frame_size=64, params={"work_iterations": w})
            keys[w] = sc.key
            with create("xdp", sc) as g:
                g.measure(100_000, 0.2)    # warm-up: caches, page pools, NAPI threads
                for i in range(trials):
                    with PerfRecorder(g.dut_cores) as rec:
                        trial = g.measure(None, duration)
                    store.append(trial, {"unit": f"{sc.key}__maxrate__{r}.{i}"})
                    if trial.dut_speed_ns_per_step:
                        speeds.setdefault(w, []).append(trial.dut_speed_ns_per_step)
                    assert rec.profile is not None
                    write_folded(store.path, trial.trial_id, rec.profile.folded)
                core = g.dut_cores[0]
            with StallProbe([core], TRIAL_PERIOD_US, TRIAL_REPORT_US):
                for n in (works if r % 2 == 0 else works[::-1]):
                    points[n].append(bench_work(n, cpu=core))
    return store, Calibration.fit(points), keys


def _drift(a: list[float] | None, b: list[float] | None) -> float | None:
    """mean(b) / mean(a) - 1: how much slower the core ran during ``b``; None without both."""
    return (sum(b) / len(b)) / (sum(a) / len(a)) - 1 if a and b else None


def main(args: argparse.Namespace) -> int:
    root = Path(args.root or tempfile.mkdtemp(prefix="perfkit-explain-calib-"))
    speeds: dict[int, list[float]] = {}
    store, cal, keys = record_run(root, args.work, args.rounds, args.trials, args.duration, speeds)
    pair = choose_pairs(store.run_id, root, keys[args.work], keys[2 * args.work])
    done = explain_pairs(pair, root / store.run_id / "explain")[0]
    e = done.explanation
    predicted = cal.ns_per_iteration * args.work
    top = e.named[0] if e.named else None
    figures = {"work": args.work, "trials_per_side": [e.a_trials, e.b_trials], "a_ns": e.a_ns, "b_ns": e.b_ns,
               "gap_ns": e.gap_ns, "gap_err_ns": e.gap_err_ns, "predicted_gap_ns": predicted,
               "gap_over_predicted": e.gap_ns / predicted, "program_fraction": e.kind_fraction("program"),
               "program_delta_ns": e.kinds.get("program", {}).get("delta_ns"),
               "top_function": top.name if top else None, "top_delta_ns": top.delta_ns if top else None,
               "ns_per_iteration": cal.ns_per_iteration, "sentence": e.sentence(), "run_id": store.run_id,
               "root": str(root), "flamegraph": done.flamegraph,
               # how much slower the DUT core ran during the 2N trials than during the N ones (the stall
               # probe's speed step; 0.15: 15 % slower): a host that slows between the sides widens the gap
               "speed_drift": _drift(speeds.get(args.work), speeds.get(2 * args.work))}
    summary = (f"calib N = {args.work} vs {2 * args.work}, {e.a_trials}+{e.b_trials} trials: gap "
               f"{e.gap_ns:.0f} ± {e.gap_err_ns or 0:.0f} ns/packet, calibration predicts {predicted:.0f} "
               f"({100 * (e.gap_ns / predicted - 1):+.1f} %); {100 * e.kind_fraction('program'):.1f} % of it on the "
               f"BPF program ({top.name if top else '-'} {top.delta_ns if top else 0:+.0f} ns)")
    benchcli.record(args, "explain_calib", figures, summary)
    if args.json:
        benchcli.print_json(figures)
    else:
        print(done.text())
        print(summary)
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__, record="explain_calib")
    ap.add_argument("--work", type=integer(1, 2000), default=400, metavar="N", help="N (the other side: 2N)")
    ap.add_argument("--rounds", type=integer(1), default=2, help="testbeds per N, alternated (default 2)")
    ap.add_argument("--trials", type=integer(1), default=2, help="trials per testbed (default 2)")
    ap.add_argument("--duration", type=seconds, default=1.0, help="seconds per trial (default 1)")
    ap.add_argument("--root", default=None, help="runs directory (default: a new temporary one)")
    benchcli.run(main, ap)
