#!/usr/bin/env python3
"""Performance CI of a user's own dataplane: ``ab``, ``bisect`` and ``history`` on a scaffolded repository.

Makes the repository of ``perfkit/perfci/demorepo.py`` (``perfkit dataplane new demo``, then eight
commits, the fifth adding map lookups per frame), then, each under ``flock`` of the testbed lock:

- ``perfkit ab --dataplane demo.dataplane.yaml`` of the scaffold's commit against the planted one;
- ``--self`` times the same revision against itself (the 4th commit);
- ``--bisect`` times ``perfkit bisect`` from the scaffold's commit (good) to the 8th (bad);
- ``--each-commit``: ``perfkit run ab.yaml`` in a worktree of every commit (one run each);
- ``perfkit history`` of the runs over the eight commits.

``--dir DIR`` of an earlier run takes its repository and runs again (``--ab 0 --self 0 --bisect 0
--each-commit`` adds a run of every commit to the same history).

Prints one line per command (exit status, verdict, figures) and the JSON of all of them with
``--json``. Figures go into bench/RESULTS.md by hand.

    .venv/bin/python bench/user_dataplane_ci.py [--self 5] [--bisect 5] [--repeats 2] [--dir DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfkit import benchcli
from perfkit.cli.options import integer, number
from perfkit.perfci.demorepo import DESCRIPTION, PLANTED, demo_repo

LOCK = "/tmp/perfkit-testbed.lock"
#: What ``perfkit`` takes (``--lock``).
SETTINGS = {"lock": LOCK}


def perfkit(repo: Path, *args: str) -> tuple[int, dict, float]:
    lock = SETTINGS["lock"]
    env = dict(os.environ)
    t0 = time.monotonic()
    out = subprocess.run((["flock", lock] if lock else []) + [sys.executable, "-P", "-m", "perfkit", *args], cwd=repo, env=env,
                         capture_output=True, text=True)
    try:
        data = json.loads(out.stdout)
    except ValueError:
        data = {"stderr": out.stderr.strip().splitlines()[-3:]}
    return out.returncode, data, time.monotonic() - t0


def ab_line(code: int, d: dict, wall: float) -> str:
    rows = (d.get("comparison") or {}).get("rows") or []
    figs = ", ".join(f"{r['baseline_mpps']:.4g} -> {r['current_mpps']:.4g} Mpps {r['change_pct']:+.1f} % "
                     f"(band ±{r['band_pct']:.1f} %)" for r in rows)
    same = (d.get("perfkit") or {}).get("same_on_both_sides")
    return f"exit {code}: {d.get('headline', d)}; {figs}; perfkit same on both sides: {same}; {wall:.0f} s"


def main(args: argparse.Namespace) -> int:
    SETTINGS["lock"] = args.lock
    work = Path(args.dir or tempfile.mkdtemp(prefix="perfkit-userci-"))
    repo, runs = work / "repo", work / "runs"
    if repo.is_dir():
        ids = subprocess.run(["git", "-C", str(repo), "rev-list", "--reverse", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.split()
    else:
        ids = demo_repo(repo)
    common = ["--repo", ".", "--dataplane", DESCRIPTION, "--root", str(runs), "--json"]
    out: dict = {"commits": ids, "planted": ids[PLANTED], "ab": [], "self": [], "bisect": []}
    for i in range(args.ab):
        code, d, wall = perfkit(repo, "ab", *common, "--base", ids[0], "--head", ids[PLANTED], "--repeats",
                                str(args.repeats), "--out", str(work / f"ab-slow{i}"), "ab.yaml")
        out["ab"].append({"exit": code, "summary": d, "wall_s": wall})
        print(f"ab scaffold vs planted {i + 1}: " + ab_line(code, d, wall), flush=True)
    for i in range(args.self_runs):
        code, d, wall = perfkit(repo, "ab", *common, "--base", ids[4], "--head", ids[4], "--repeats",
                                str(args.repeats), "--out", str(work / f"ab-self{i}"), "ab.yaml")
        out["self"].append({"exit": code, "summary": d, "wall_s": wall})
        print(f"ab self {i + 1}: " + ab_line(code, d, wall), flush=True)
    for i in range(args.bisect):
        code, d, wall = perfkit(repo, "bisect", *common, "--good", ids[0], "--bad", ids[-1], "--threshold",
                                str(args.threshold), "ab.yaml")
        out["bisect"].append({"exit": code, "result": d, "wall_s": wall})
        steps = "; ".join(f"{s['commit'][:7]} {s['verdict']} {s['change_pct']:+.1f} % ({len(s['rounds'])} rounds)"
                          for s in d.get("steps", []) if s.get("change_pct") is not None)
        print(f"bisect {i + 1}: exit {code}, first bad {str(d.get('first_bad'))[:7]} "
              f"(planted {ids[PLANTED][:7]}: {d.get('first_bad') == ids[PLANTED]}), "
              f"{d.get('measured_steps')} measured step(s): {steps}; {wall:.0f} s", flush=True)
    if args.each_commit:
        for i, commit in enumerate(ids):
            tree = work / "trees" / commit[:10]
            subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), commit], check=True,
                           capture_output=True)
            try:
                code, d, wall = perfkit(tree, "run", "ab.yaml", "--root", str(runs), "--no-metrics", "--no-progress",
                                        "--json")
                print(f"run of commit {i} {commit[:7]}: exit {code}, run {d.get('run_id')}; {wall:.0f} s", flush=True)
            finally:
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
    code, d, wall = perfkit(repo, "history", "demo-ab", "--repo", ".", "--root", str(runs), "--out",
                            str(work / "history"), "--json")
    out["history"] = {"exit": code, "steps": d.get("steps"), "commits": d.get("commits")}
    at = [s["commit"][:7] for s in d.get("steps") or []]
    print(f"history: exit {code}, {len(d.get('commits') or [])} commit(s), steps at {at} "
          f"(planted {ids[PLANTED][:7]}); page {work / 'history' / 'history.html'}", flush=True)
    if args.json:
        benchcli.print_json(out)
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__)
    ap.add_argument("--ab", type=integer(0), default=1, help="ab runs of the scaffold's commit against the planted one")
    ap.add_argument("--each-commit", action="store_true", help="one perfkit run of every commit, for the history")
    ap.add_argument("--self", type=integer(0), default=5, dest="self_runs", help="ab runs of a revision against itself")
    ap.add_argument("--bisect", type=integer(0), default=5, help="bisect runs")
    ap.add_argument("--repeats", type=integer(1), default=2, help="repeats of each unit per side (default 2)")
    ap.add_argument("--threshold", type=number(0), default=10.0, help="bisect's threshold [%%] (default 10)")
    ap.add_argument("--dir", default=None, help="where the repository and runs go (default: a temporary directory)")
    ap.add_argument("--lock", default=LOCK, help=f"the testbed lock each command takes (default {LOCK}; \"\": none)")
    benchcli.run(main, ap)
