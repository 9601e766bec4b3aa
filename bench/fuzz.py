#!/usr/bin/env python3
"""Fuzz every dataplane's XDP program against its reference model: a million frames each.

Frames go through BPF_PROG_TEST_RUN one by one (random bytes, mutations of valid frames, every
truncation, broken length fields: see ``perfkit.fuzz``). For each dataplane it prints the frames
per second, the kernel's verdicts per frame kind, and the failures: XDP_ABORTED, a verdict or a
forwarded frame that is not the model's, counters that do not rise as the model says. The baseline,
measured in the same run, is the same per-frame loop on an XDP_DROP program without a model (the
harness's ceiling here); each dataplane's rate is also given as a ratio of it. Exit status 1 on any
failure. Run as root after `make bpf`:

    .venv/bin/python bench/fuzz.py [--frames 1000000] [--dataplane NAME ...] [--workers N] [--seed 1] [--json]
"""
from __future__ import annotations

import argparse
import os

from perfkit import benchcli, dataplanes
from perfkit.cli.options import integer
from perfkit.fuzz import FAILURE_KINDS, KINDS, fuzz, harness_rate

VERDICTS = ("XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT")


def main(args: argparse.Namespace) -> int:
    names = args.dataplane or list(dataplanes.names())

    ceiling = harness_rate()
    results = []
    for name in names:
        res = fuzz(name, args.frames, seed=args.seed, workers=args.workers)
        results.append(res)
        if not args.json:
            _print(res, ceiling, args.workers)
    ok = all(r.ok for r in results)
    if args.json:
        benchcli.print_json({"harness_frames_per_second": ceiling,
                             "results": [r.to_dict() | {"ratio_to_harness": r.frames / r.busy_seconds / ceiling
                                                        if r.busy_seconds else None} for r in results],
                             "ok": ok})
    else:
        print(f"harness baseline (XDP_DROP, no model, one process): {ceiling:,.0f} frames/s")
        print("all dataplanes agree with their models" if ok else "FAILURES: see above")
    return 0 if ok else 1


def _print(res, ceiling: float, workers: int) -> None:
    per_worker = res.frames / res.busy_seconds if res.busy_seconds else 0.0
    print(f"== {res.dataplane}: {res.frames:,} frames in {res.seconds:.1f} s = {res.frames_per_second:,.0f} frames/s "
          f"({workers} workers; per worker {per_worker:,.0f} frames/s while running frames, "
          f"{per_worker / ceiling:.2f} x the harness baseline)")
    print(f"   parameter sets: {'; '.join(res.configs)}")
    print(f"   {'kind':<13}{'frames':>10}" + "".join(f"{v[4:]:>10}" for v in VERDICTS))
    for kind in KINDS:
        row = res.kind_verdicts.get(kind, {})
        print(f"   {kind:<13}{res.kinds.get(kind, 0):>10,}" + "".join(f"{row.get(v, 0):>10,}" for v in VERDICTS))
    print(f"   {'all':<13}{res.frames:>10,}" + "".join(f"{res.verdicts.get(v, 0):>10,}" for v in VERDICTS))
    print("   model counters: " + ", ".join(f"{k} {v:,}" for k, v in sorted(res.stats.items())))
    print("   failures: " + ", ".join(f"{k} {res.failures.get(k, 0)}" for k in FAILURE_KINDS)
          + ("" if res.ok else " <-- FAILED"))
    for ex in res.examples[:10]:
        print(f"     {ex}")


if __name__ == "__main__":
    ap = benchcli.parser(__doc__)
    ap.add_argument("--frames", type=integer(1, what="a frame count"), default=1_000_000,
                    help="frames per dataplane (default 1000000)")
    ap.add_argument("--dataplane", action="append", choices=dataplanes.names(), default=None,
                    help="only this dataplane (repeatable; default: every registered one)")
    ap.add_argument("--workers", type=integer(1, what="a process count"), default=len(os.sched_getaffinity(0)),
                    help="processes, each with its own copy of the program (default: the CPUs here)")
    ap.add_argument("--seed", type=integer(0, what="a seed"), default=1)
    benchcli.run(main, ap)
