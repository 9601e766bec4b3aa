#!/usr/bin/env python3
"""How reproducible is zero loss on this machine? The PGW-U (or any dataplane: ``--dataplane``) on
the local testbed, many identical trials at a few fixed rates, in shuffled order.

For each rate: the share of trials with any loss, the median and worst loss ratio, where the lost
frames went (DUT receive ring, dataplane drop reasons, tester ring), and how far the generator's
offered rate fell below the intended one. A DUT whose capacity alone decides loss shows no loss
well below its maximum rate and loss in every trial above it; sporadic pauses of the DUT's core
(a VM's host taking the vCPU away) show as loss in some trials at any rate, mostly in
``rx_ring_full``. NDR searches on such a testbed cannot give reproducible results.

    .venv/bin/python bench/testbed_noise.py [--rates 0.1,0.3,0.6,1.0Mpps] [--trials 10] [--duration 1] [--json]
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
from collections import Counter

from tqdm import tqdm

from perfkit import benchcli
from perfkit.cli.options import add_scenario, integer, scenario_from_args, seconds
from perfkit.generators import create
from perfkit.rate import Rate


def main(args: argparse.Namespace) -> int:
    sc = scenario_from_args(args)
    wire = sc.traffic().wire_frame_size
    rates = [Rate.parse(r.strip(), sc.line_rate).pps(wire) for r in args.rates.split(",")]
    order = [r for r in rates for _ in range(args.trials)]
    random.Random(args.seed).shuffle(order)  # drifts of the machine spread over every rate
    trials: dict[float, list] = {r: [] for r in rates}
    with create("xdp", sc) as gen:
        for rate in tqdm(order, desc="trials", file=sys.stderr):
            trials[rate].append(gen.measure(rate, args.duration))
    rows = []
    for rate in rates:
        ts = trials[rate]
        losses = [t.loss_ratio for t in ts]
        where: Counter[str] = Counter()
        for t in ts:
            where.update(t.dut_drops)
            where.update({f"tester {k}": v for k, v in t.tester_drops.items()})
        rows.append({"rate_pps": rate, "trials": len(ts), "lossy": sum(1 for x in losses if x > 0),
                     "median_loss": statistics.median(losses), "max_loss": max(losses),
                     "drops": dict(where), "min_offered_ratio": min(t.tx_pps / rate for t in ts)})
    if args.json:
        benchcli.print_json({"scenario": dataclasses.asdict(sc), "duration": args.duration, "rows": rows})
        return 0
    print(f"{sc.key}, {args.trials} x {args.duration:g} s trials per rate, shuffled")
    print(f"{'rate [Mpps]':>11s}  {'lossy':>7s}  {'median loss':>11s}  {'worst loss':>10s}  "
          f"{'offered >=':>10s}  drops (all trials)")
    for r in rows:
        print(f"{r['rate_pps'] / 1e6:11.3f}  {r['lossy']:3d}/{r['trials']:<3d}  {r['median_loss']:11.2e}  "
              f"{r['max_loss']:10.2e}  {r['min_offered_ratio']:9.1%}  {r['drops'] or '-'}")
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__)
    ap.add_argument("--rates", default="0.1Mpps,0.3Mpps,0.6Mpps,1.0Mpps",
                    help="comma-separated rates (pps, Mpps, Gbps or %% of 10GbE)")
    ap.add_argument("--trials", type=integer(1, what="a trial count"), default=10, help="trials per rate")
    ap.add_argument("--duration", type=seconds, default=1.0, help="trial duration [s]")
    add_scenario(ap, cores=False)
    ap.add_argument("--seed", type=integer(0, what="a seed"), default=1, help="seed of the trial order")
    benchcli.run(main, ap)
