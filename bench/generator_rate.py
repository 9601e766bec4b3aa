#!/usr/bin/env python3
"""Generator benchmark: the XDP generator's maximum rate on one core, against a baseline.

Both programs send 64-byte frames (a 60-byte template plus FCS) from the tester core into a DUT
port whose XDP program only drops (the DUT's NAPI thread on its own core):

- full: perfkit's generator with the signature (stream, sequence, timestamp) and one random
  field (the flow number, written into the destination address and source port, checksum fixed);
- baseline: a live-frames redirect with no per-packet work at all (bpf/gen_trivial.bpf.c).

Rounds alternate between the two, unpaced; each adjacent pair gives a ratio, and the figures are
medians (the machine's speed drifts between rounds; a pair shares its moment). The rate is what the
DUT port accepted (its XDP packet counter), so frames the port could not take do not count.
Target: full / baseline >= 0.8.

    .venv/bin/python bench/generator_rate.py [--rounds 21] [--seconds 0.5] [--json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

from tqdm import tqdm

from perfkit import benchcli
from perfkit.cli.options import integer, seconds
from perfkit.dataplanes.pgwu.control import SessionPlan
from perfkit.dataplanes.pgwu.traffic import PgwuTraffic
from perfkit.libbpf import BpfObject, xdp_attach
from perfkit.testbed import netns
from perfkit.testbed.livegen import UNPACED_BATCH, LiveGenerator
from perfkit.testbed.bpfbuild import object_path
from perfkit.testbed.topology import Testbed


def main(args: argparse.Namespace) -> int:
    cpus = sorted(os.sched_getaffinity(0))
    gen_cpu, dut_cpu = cpus[0], cpus[-1]
    profile = PgwuTraffic(direction="dl", frame_size=64, flows=1000, plan=SessionPlan(1000))
    rates: dict[str, list[float]] = {"full": [], "baseline": []}
    with Testbed() as tb, BpfObject(object_path("drop")) as drop:
        with netns.inside(tb.a.ns):
            xdp_attach(tb.a.ifindex, drop.program("xdp_drop").fd)
        tb.pin_napi(tb.a, {dut_cpu}, realtime=True)
        gens = {"full": LiveGenerator(profile, tb.p0, tb.anchor, [gen_cpu], flow_op="random",
                                      batch_size=args.batch_size),
                "baseline": LiveGenerator(profile, tb.p0, tb.anchor, [gen_cpu], trivial=True,
                                          batch_size=args.batch_size)}
        # the anchor holds one program at a time; both stay in the dispatcher through it in turn
        try:
            for r in tqdm(range(args.rounds * 2), desc="generator rounds", file=sys.stderr):
                name = ("full", "baseline")[r % 2] if (r // 2) % 2 == 0 else ("baseline", "full")[r % 2]
                gen = gens[name]
                with netns.inside(tb.anchor.ns):
                    xdp_attach(tb.anchor.ifindex, gen.program.fd)
                gen.reset()
                before = tb.link_stats(tb.a).get("rx_queue_0_xdp_packets", 0)
                rep = gen.send(None, args.seconds)
                accepted = tb.link_stats(tb.a).get("rx_queue_0_xdp_packets", 0) - before
                rates[name].append(accepted / rep.elapsed)
        finally:
            for g in gens.values():
                g.close()
    full, base = statistics.median(rates["full"]), statistics.median(rates["baseline"])
    ratio = statistics.median(f / b for f, b in zip(rates["full"], rates["baseline"]))
    out = {"frame_size": 64, "batch_size": args.batch_size, "generator_cpu": gen_cpu, "dut_cpu": dut_cpu, "rounds": args.rounds,
           "seconds": args.seconds, "full_pps": full, "baseline_pps": base, "ratio": ratio,
           "full_rounds": rates["full"], "baseline_rounds": rates["baseline"], "target": 0.8}
    if args.json:
        benchcli.print_json(out)
    else:
        print(f"64-byte frames, generator on CPU {gen_cpu}, XDP_DROP DUT on CPU {dut_cpu}, batches of "
              f"{args.batch_size or 'automatic size'}, {args.rounds} x {args.seconds:g} s rounds each")
        print(f"  generator (signature + random field) {full / 1e6:7.3f} Mpps  "
              f"(rounds {', '.join(f'{x / 1e6:.2f}' for x in rates['full'])})")
        print(f"  trivial redirect (baseline)          {base / 1e6:7.3f} Mpps  "
              f"(rounds {', '.join(f'{x / 1e6:.2f}' for x in rates['baseline'])})")
        print(f"  ratio {ratio:.3f}, median of the rounds' pairs (target >= 0.8: {'met' if ratio >= 0.8 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__)
    ap.add_argument("--rounds", type=integer(1, what="a round count"), default=21)
    ap.add_argument("--seconds", type=seconds, default=0.5)
    ap.add_argument("--batch-size", type=integer(1, UNPACED_BATCH, "a batch size"), default=None,
                    help="frames per kernel batch (flush) in both (default: the generator's own, 256 unpaced)")
    benchcli.run(main, ap)
