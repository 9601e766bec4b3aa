#!/usr/bin/env python3
"""What does ``perf record`` of the DUT cores cost a trial? The same PGW-U trial (or any scenario:
``--dataplane`` ...) with and without ``perfkit.perf.record.PerfRecorder``, alternated (the order shuffled
in every round), on one testbed.

Per arm (without perf, then each sampling frequency): the median received rate, the DUT's busy
cores (/proc/stat) and its per-packet cost (``dut_ns_per_packet``: CPU time of its packet threads per
packet; ``bpf_ns_per_packet``), and perf's own CPU (its process, on the tester cores). Then, per
round, the ratio of each arm to that round's trial without perf, and the median and quartiles of
those paired ratios (other load on the machine drifts between rounds; a round's trials are seconds
apart; the quartiles show how much of a ratio is noise).

Where perf's cost lands: the sampling interrupt (and the kernel's stack walk) runs on the DUT core,
in the time of the thread it interrupts (without ``CONFIG_IRQ_TIME_ACCOUNTING``), so it shows in
``dut_ns_per_packet``; at the maximum rate (the default) also as fewer packets when the DUT is the
bottleneck. The perf process itself (reading the ring buffer) runs on the tester cores.

Every run is recorded (``perfkit.benchresults``: ``bench/results/perf_overhead.jsonl`` with the date
and host, a dated line in ``bench/RESULTS.md``) unless ``--no-record``: the report's perf page
quotes the latest. Run it under the testbed lock.

    .venv/bin/python bench/perf_overhead.py [--rate 0.3Mpps] [--frequencies 999,4999] [--rounds 6]
        [--duration 2] [--direction ul] [--frame-size 64] [--json] [--no-record]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys

from tqdm import tqdm

from perfkit import benchcli
from perfkit.cli.options import add_scenario, integer, scenario_from_args, seconds
from perfkit.generators import create
from perfkit.perf.record import PerfRecorder
from perfkit.rate import Rate

#: Figures per trial: name -> (unit, how to read it off a trial and its profile).
FIGURES = {
    "rx_mpps": ("Mpps", lambda t, p: t.rx_pps / 1e6),
    "dut_cpu": ("cores", lambda t, p: sum(t.dut_cpu.values())),
    "dut_ns_per_packet": ("ns", lambda t, p: getattr(t, "dut_ns_per_packet", None)),
    "bpf_ns_per_packet": ("ns", lambda t, p: t.bpf_ns_per_packet),
    "perf_cpu": ("cores", lambda t, p: p.perf_cpu if p else None),
    "samples": ("", lambda t, p: p.samples if p else None),
}


#: Figures compared as paired ratios (with perf / without, same round).
RATIOS = ("rx_mpps", "dut_cpu", "dut_ns_per_packet", "bpf_ns_per_packet")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def quartiles(values: list) -> list[float] | None:
    """[q1, median, q3] of the values that are not None (None if there are none)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    if len(values) == 1:
        return values * 3
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return [q1, q2, q3]


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _summary(scenario: str, rate: float | None, args: argparse.Namespace,
             ratios: dict[str, dict[str, list[float] | None]]) -> str:
    """The headline of a run, for bench/RESULTS.md: per arm, the paired ratios' median [quartiles]."""
    def q(x: list[float] | None) -> str:
        return "-" if x is None else f"{x[1]:.3f} [{x[0]:.3f}, {x[2]:.3f}]"

    what = f"{rate / 1e6:.3f} Mpps" if rate else "max rate"
    arms = "; ".join(f"{arm}: DUT ns/packet {q(r['dut_ns_per_packet'])}, rx {q(r['rx_mpps'])}"
                     for arm, r in ratios.items())
    return f"{scenario} at {what}, {args.rounds} rounds of {args.duration:g} s, with perf / without: {arms}"


def main(args: argparse.Namespace) -> int:
    sc = scenario_from_args(args)
    rate = Rate.parse(args.rate, sc.line_rate).pps(sc.traffic().wire_frame_size) if args.rate else None
    arms: list[int | None] = [None, *(int(f) for f in args.frequencies.split(","))]
    rows: dict[int | None, list[dict]] = {a: [] for a in arms}
    rng = random.Random(args.seed)
    with create("xdp", sc) as gen:
        gen.measure(rate, min(args.duration, 1.0))   # warm-up: caches, page pools, CPU frequency
        for _ in tqdm(range(args.rounds), desc="rounds", file=sys.stderr):
            order = arms[:]
            rng.shuffle(order)
            for freq in order:
                if freq is None:
                    trial, profile = gen.measure(rate, args.duration), None
                else:
                    with PerfRecorder(gen.dut_cores, frequency=freq) as rec:
                        trial = gen.measure(rate, args.duration)
                    profile = rec.profile
                rows[freq].append({k: f(trial, profile) for k, (_, f) in FIGURES.items()})
        dut, tester = gen.dut_cores, gen.tester_cores
    summary = {("without" if a is None else f"{a} Hz"): {k: median([r[k] for r in rows[a]]) for k in FIGURES}
               for a in arms}
    ratios = {f"{a} Hz": {k: quartiles([_ratio(w[k], b[k]) for w, b in zip(rows[a], rows[None])]) for k in RATIOS}
              for a in arms if a is not None}
    figures = {"scenario": sc.key, "rate_pps": rate, "duration": args.duration, "rounds": args.rounds,
               "dut_cores": dut, "tester_cores": tester, "median": summary, "paired_ratio_quartiles": ratios,
               "trials": {("without" if a is None else f"{a} Hz"): rows[a] for a in arms}}
    benchcli.record(args, "perf_overhead", figures, _summary(sc.key, rate, args, ratios))
    if args.json:
        benchcli.print_json(figures)
        return 0
    what = f"at {rate / 1e6:.3f} Mpps" if rate else "as fast as the generator sends"
    print(f"{sc.key} {what}, {args.rounds} rounds of {args.duration:g} s trials; DUT CPUs {dut}, tester CPUs {tester} "
          "(perf runs there)")
    print(f"{'arm':>10s}  " + "  ".join(f"{k + (' [' + u + ']' if u else ''):>24s}" for k, (u, _) in FIGURES.items()))
    for name, s in summary.items():
        cells = [("-" if v is None else f"{v:.4g}") for v in s.values()]
        print(f"{name:>10s}  " + "  ".join(f"{c:>24s}" for c in cells))
    print("per-round ratios with perf / without: median [quartiles]")
    for name, r in ratios.items():
        print(f"{name:>10s}  " + ", ".join(f"{k} " + ("-" if q is None else f"{q[1]:.3f} [{q[0]:.3f}, {q[2]:.3f}]")
                                           for k, q in r.items()))
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__, record="perf_overhead")
    ap.add_argument("--rate", default=None,
                    help="fixed offered rate (2Mpps, 300kpps ...); default: as fast as possible")
    ap.add_argument("--frequencies", default="999", help="perf sampling frequencies to compare [Hz], comma-separated")
    ap.add_argument("--rounds", type=integer(1, what="a round count"), default=6, help="rounds; each runs every arm once, in shuffled order")
    ap.add_argument("--duration", type=seconds, default=2.0, help="trial duration [s]")
    add_scenario(ap, cores=False)
    ap.add_argument("--seed", type=integer(0, what="a seed"), default=1, help="seed of the order within rounds")
    benchcli.run(main, ap)
