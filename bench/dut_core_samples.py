#!/usr/bin/env python3
"""Who held the DUT cores in a run: its perf samples of the DUT cores by process, per trial.

Every trial that ``perf record``ed the DUT cores (campaign ``perf: [maxrate]``, as in
``campaigns/default.yaml``) keeps its folded stacks (``data/runs/<run_id>/perf/<trial>.folded``);
the first frame of each stack is the process. This sums each trial's samples into:

- ``packet``: the DUT's packet threads (``napi/...``, ``cpumap/...``);
- ``metrics``: the metrics servers perfkit starts (Prometheus, Pushgateway, node-exporter) and
  ``perf`` itself: perfkit's by name alone;
- ``other``: anything else but idle (a ``python`` may be perfkit's CLI or kernel, or anyone's:
  perf's samples carry no process tree); ``idle``: the idle task;

and prints the median and maximum share of each over the trials, the processes that took the most,
and the trials' own ``dut_perfkit_share`` / ``dut_others_share`` where recorded (from the
scheduler's switches, which know perfkit's processes by pid). Before
perfkit kept its processes off the DUT cores the Pushgateway alone took a median 29 % of the
samples in ``make run`` (issue 22).

    .venv/bin/python bench/dut_core_samples.py RUN_ID [--root data/runs] [--json] [--no-record]
"""
from __future__ import annotations

import argparse
import statistics
import sys

from perfkit import benchcli
from perfkit.perf.folded import PACKET_THREADS, is_idle, process_table
from perfkit.perf.store import perf_trial_ids, read_folded
from perfkit.store import RunStore

#: Process names (perf's comm: 15 characters at most) of the servers perfkit starts, and perf.
METRICS_COMMS = ("prometheus", "pushgateway", "node_exporter", "perf")
CLASSES = ("packet", "metrics", "other", "idle")


def classify(process: str) -> str:
    if process.startswith(PACKET_THREADS):
        return "packet"
    if is_idle(process):
        return "idle"
    return "metrics" if process.startswith(METRICS_COMMS) else "other"


def trial_shares(folded: str) -> dict[str, float]:
    table = process_table(folded)
    out = dict.fromkeys(CLASSES, 0.0)
    for rec in table.to_dict("records"):
        out[classify(rec["process"])] += rec["share"]
    return out


def summarize(run_id: str, root: str) -> dict:
    store = RunStore.open(run_id, root)
    run_dir = store.path
    shares = {tid: trial_shares(read_folded(run_dir, tid)) for tid in perf_trial_ids(run_dir)}
    trials = store.trials()
    sched = {}
    if not trials.empty and "dut_perfkit_share" in trials:
        t = trials.dropna(subset=["dut_perfkit_share"])
        sched = {"trials": len(t),
                 "perfkit_median": float(t["dut_perfkit_share"].median()) if len(t) else None,
                 "perfkit_max": float(t["dut_perfkit_share"].max()) if len(t) else None,
                 "others_median": float(t["dut_others_share"].median()) if len(t) else None,
                 "others_max": float(t["dut_others_share"].max()) if len(t) else None}
    per_class = {c: [s[c] for s in shares.values()] for c in CLASSES}
    top: dict[str, float] = {}
    for tid in shares:
        for rec in process_table(read_folded(run_dir, tid)).to_dict("records"):
            if classify(rec["process"]) in ("metrics", "other"):
                top[rec["process"]] = max(top.get(rec["process"], 0.0), rec["share"])
    perfkit = store.metadata().get("perfkit", {})
    return {"run_id": run_id, "run_git_sha": perfkit.get("git_sha"), "run_git_dirty": perfkit.get("git_dirty"),
            "perf_trials": len(shares),
            "perf_samples": {c: {"median": statistics.median(v), "max": max(v)} if v else None
                             for c, v in per_class.items()},
            "scheduler": sched,
            "top_max_share": dict(sorted(top.items(), key=lambda kv: -kv[1])[:6])}


def main(args: argparse.Namespace) -> int:
    s = summarize(args.run_id, args.root)
    if not s["perf_trials"]:
        print(f"run {args.run_id}: no trial recorded perf (campaign perf: [maxrate])", file=sys.stderr)
        return 2
    lines = [f"run {s['run_id']} (perfkit {s['run_git_sha']}): perf samples of the DUT cores in {s['perf_trials']} trials, share by process"]
    for c in CLASSES:
        v = s["perf_samples"][c]
        lines.append(f"  {c:8s} median {v['median'] * 100:6.2f} %  max {v['max'] * 100:6.2f} %")
    lines.append("  most in one trial: " + ", ".join(f"{p} {v * 100:.1f} %" for p, v in s["top_max_share"].items()))
    if s["scheduler"].get("trials"):
        sc = s["scheduler"]
        lines.append(f"  scheduler (all {sc['trials']} trials): perfkit median {sc['perfkit_median'] * 100:.2f} % "
                     f"max {sc['perfkit_max'] * 100:.2f} %; others median {sc['others_median'] * 100:.2f} % "
                     f"max {sc['others_max'] * 100:.2f} %")
    if args.json:
        benchcli.print_json(s)
    else:
        print("\n".join(lines))
    p = s["perf_samples"]["metrics"]
    benchcli.record(args, "dut_core_samples", s, f"run {args.run_id} (perfkit {s['run_git_sha']}"
                    f"{', dirty' if s['run_git_dirty'] else ''}): the metrics servers' share of the DUT cores' perf samples "
                    f"median {p['median'] * 100:.2f} %, max {p['max'] * 100:.2f} % over {s['perf_trials']} trials")
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__, record="dut_core_samples")
    ap.add_argument("run_id")
    ap.add_argument("--root", default="data/runs")
    benchcli.run(main, ap)
