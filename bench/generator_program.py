#!/usr/bin/env python3
"""Generator program cost per frame, without the network: BPF_PROG_TEST_RUN (no live frames) of

- compiled: the generator as perfkit runs it, compiled for the profile (configuration as constants);
- plain: the same source from the Makefile's build, configured through .rodata at load;
- trivial: the baseline that only redirects (bpf/gen_trivial.bpf.c).

Each round runs all three, alternating, ``--runs`` times each; the kernel reports mean ns per run
(its loop included, which the trivial one measures). Net figures are medians of per-round
differences to the trivial one. Profile: 64 bytes, 1000 flows, random flow numbers, signature.

    .venv/bin/python bench/generator_program.py [--rounds 9] [--runs 1000000] [--json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import struct

from perfkit import benchcli
from perfkit.cli.options import integer
from perfkit.dataplanes.pgwu.control import SessionPlan
from perfkit.dataplanes.pgwu.traffic import PgwuTraffic
from perfkit.libbpf import BpfObject, XdpMd
from perfkit.testbed.bpfbuild import load_generator, object_path
from perfkit.testbed.livegen import build_config, compile_generator


def main(args: argparse.Namespace) -> int:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # per-CPU generator state: one CPU
    profile = PgwuTraffic(direction=args.direction, frame_size=64, flows=1000, plan=SessionPlan(1000))
    frame, port = profile.packet(0), struct.pack("=I", 1)  # redirect target lo: test runs do not send
    objs = {
        "compiled": load_generator(compile_generator(profile, "random"), 1),
        "plain": BpfObject(object_path("gen"), rodata=build_config(frame, profile.field_engine("random")),
                           initial_values={".rodata.port": port}),
        "trivial": load_generator(object_path("gen_trivial"), 1),
    }
    progs = {name: obj.program(obj.program_names()[0]) for name, obj in objs.items()}
    ctx = XdpMd(0, len(frame), 0, 1, 0, 0)
    ns: dict[str, list[int]] = {name: [] for name in progs}
    for _ in range(args.rounds):
        for name, prog in progs.items():
            ns[name].append(prog.test_run(frame, args.runs, ctx).duration_ns)
    for obj in objs.values():
        obj.close()
    net = {name: statistics.median(a - b for a, b in zip(ns[name], ns["trivial"])) for name in ("compiled", "plain")}
    out = {"direction": args.direction, "frame_size": 64, "rounds": args.rounds, "runs": args.runs,
           "ns_per_run": {k: statistics.median(v) for k, v in ns.items()}, "net_ns": net, "rounds_ns": ns}
    if args.json:
        benchcli.print_json(out)
    else:
        print(f"{args.direction.upper()} 64-byte frames, random flow of 1000, signature; BPF_PROG_TEST_RUN x {args.runs}, "
              f"{args.rounds} rounds")
        for name in progs:
            extra = f"  net {net[name]:+.0f} ns over trivial" if name in net else ""
            print(f"  {name:9s} {out['ns_per_run'][name]:5.0f} ns/run{extra}")
    return 0


if __name__ == "__main__":
    ap = benchcli.parser(__doc__)
    ap.add_argument("--rounds", type=integer(1, what="a round count"), default=9)
    ap.add_argument("--runs", type=integer(1, what="a run count"), default=1_000_000)
    ap.add_argument("--direction", choices=["ul", "dl"], default="dl")
    benchcli.run(main, ap)
