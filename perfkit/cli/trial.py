"""``perfkit trial``: one trial of a scenario at one rate, with every figure the trial measured."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from perfkit.cli.options import (add_json, add_scenario, add_trial, check_trial, emit, generator_options, integer,
                                 scenario_from_args)
from perfkit.errors import ConfigError
from perfkit.generators import create
from perfkit.perf.record import DEFAULT_FREQUENCY, PerfRecorder
from perfkit.perf.store import save_trial_profile
from perfkit.perf.tools import check_available
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.stl import profile as stlprofile
from perfkit.stl.macs import testbed_macs
from perfkit.stl.profile import StlProfile
from perfkit.testbed import stlgen


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("trial", help="run one trial (offered rate for a duration or packet count)",
                       description=__doc__)
    add_scenario(p)
    add_trial(p)
    add_json(p)
    add_perf(p)
    add_trex_profile(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_trial(args)
    scenario = scenario_from_args(args)
    options = generator_options(args)
    wire = scenario.wire_frame_size
    if args.trex_profile:
        profile = load_trex_profile(args, scenario)
        options["trex_profile"] = profile
        wire = profile.mean_wire_size()
    rate_pps = Rate.parse(args.rate, args.line_rate).pps(wire) if args.rate else None
    perf_dir = check_perf(args)
    with create(args.generator, scenario, **options) as gen:
        if perf_dir is None:
            result = gen.measure(rate_pps, args.duration, args.packets)
            out = result.to_dict()
        else:
            with PerfRecorder(gen.dut_cores, frequency=args.perf_frequency) as rec:
                result = gen.measure(rate_pps, args.duration, args.packets)
            out = result.to_dict()
            out["perf"] = save_trial_profile(rec.profile, perf_dir, result.trial_id, scenario.key)
    emit(out, args.json, _human)
    return 0


# -- --trex-profile (a TRex STL profile as the traffic: perfkit.stl.profile) -------------------------------
def add_trex_profile(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("TRex STL profile (xdp generator)")
    g.add_argument("--trex-profile", default=None, metavar="PATH",
                   help="send this TRex STL profile's streams instead of the dataplane's traffic (loaded by TRex's "
                        "own library; the scenario still configures the DUT; TRex port 0 faces the DUT's first port)")
    g.add_argument("-t", dest="tunables", action="append", default=[], metavar="KEY=VALUE",
                   help="a tunable of the profile, as TRex's console takes it (repeat, or KEY=VALUE,KEY=VALUE)")


def load_trex_profile(args: argparse.Namespace, scenario: Scenario) -> StlProfile:
    """The profile of ``--trex-profile``, refused before any testbed comes up if it cannot be sent."""
    if args.generator != "xdp":
        raise ConfigError("--trex-profile", args.trex_profile, "only with --generator xdp (a lab TRex takes the "
                          "profile on its own console)")
    port = stlprofile.port_of(scenario.traffic().ingress)
    profile = stlprofile.load(args.trex_profile, args.tunables, port, macs=testbed_macs(port))
    stlgen.for_testbed(profile)  # refusals (modes, instructions, sizes) before the testbed
    return profile


# -- --perf (perf attribution of the DUT cores: perfkit.perf) ---------------------------------------------
def add_perf(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("perf attribution (xdp generator)")
    g.add_argument("--perf", nargs="?", const=".", default=None, metavar="DIR",
                   help="record the DUT cores with perf during the trial (call graphs); write DIR/<trial_id>.folded "
                        "(folded stacks) and DIR/<trial_id>.svg (flame graph); DIR defaults to the current directory")
    g.add_argument("--perf-frequency", type=integer(1, 100_000, "samples per second"), default=DEFAULT_FREQUENCY,
                   help=f"perf's sampling frequency per DUT core [Hz] (default {DEFAULT_FREQUENCY})")


def check_perf(args: argparse.Namespace) -> Path | None:
    """The --perf directory, refused before any testbed comes up if perf cannot record there."""
    if args.perf is None:
        return None
    if args.generator != "xdp":
        raise ConfigError("--perf", args.perf, "only with --generator xdp (perf records the DUT cores of this machine)")
    d = Path(args.perf)
    if not d.is_dir() or not os.access(d, os.W_OK):
        raise ConfigError("--perf", args.perf, "a writable directory that exists")
    check_available()
    return d


def _human(d: dict) -> str:
    lat = d["latency_ns"]
    lines = [
        f"{d['dataplane']} {' '.join(f'{k}={v}' for k, v in d['params'].items())} "
        f"{d['frame_mix'] + ' (mean ' if d.get('frame_mix') else ''}{d['frame_size']}B{')' if d.get('frame_mix') else ''} "
        f"(wire {d['wire_frame_size']}B) flows={d['flows']} "
        f"dut_cores={d['dut_cores']} generator={d['generator']}",
        f"  offered  {d['tx_packets']:>12} packets  {d['tx_pps'] / 1e6:9.3f} Mpps   (intended {d['intended_packets']})",
        f"  received {d['rx_packets']:>12} packets  {d['rx_pps'] / 1e6:9.3f} Mpps  {d['rx_bps_l1'] / 1e9:7.3f} Gbps L1",
        f"  loss     {d['loss_ratio'] * 100:11.4f} %   (DUT's own: {d['dut_loss_ratio'] * 100:.4f} %)"
        f"   drops: DUT {d['dut_drops'] or '-'}, tester {d['tester_drops'] or '-'}",
    ]
    if d.get("knobs"):
        lines.insert(1, "  knobs    " + " ".join(f"{k}={v}" for k, v in d["knobs"].items()))
    if d.get("socket_datagrams_per_skb") is not None:
        lines.append(f"  received at a socket on the DUT: {d['socket_datagrams_per_skb']:.1f} datagrams per packet "
                     "it got (above 1: GRO aggregated)")
    if lat:
        lines.append("  latency  " + "  ".join(f"{k} {v / 1e3:.1f}us" for k, v in lat.items() if k != "mean"))
    lines.append(f"  DUT CPU busy {d['dut_cpu']}, kthreads {d['dut_kthread_cpu']}, "
                 f"BPF {d['bpf_ns_per_packet'] or 0:.1f} ns/packet")
    if d.get("dut_perf_counts"):
        lines.append("  " + _human_counts(d["dut_perf_counts"], d.get("dut_cycles_per_packet")))
    lines.append(f"  sequence: reordered {d['reordered']}, duplicates {d['duplicates']}; "
                 f"mismatched packets {d['mismatched_packets']}")
    lines += [f"  note: {n}" for n in d["notes"]]
    if "perf" in d:
        lines += _human_perf(d["perf"])
    return "\n".join(lines)


def _human_counts(counts: dict, cycles_per_packet: float | None) -> str:
    """perf stat's counts on the DUT cores, summed: software events, then cycles per packet or why not."""
    def total(event: str) -> str:
        values = [c.get(event) for c in counts.values()]
        return "not available" if any(not isinstance(v, (int, float)) for v in values) else f"{sum(values):.0f}"
    cycles = f"{cycles_per_packet:.0f}" if cycles_per_packet is not None else f"{total('cycles')} (no PMU)"
    return (f"counted  context switches {total('context-switches')}, CPU migrations {total('cpu-migrations')}, "
            f"cycles per packet {cycles}")


def _human_perf(p: dict) -> list[str]:
    own = f", perf itself {p['perf_cpu'] * 100:.2f} % of a core" if p["perf_cpu"] is not None else ""
    lines = [f"  perf     {p['samples']} samples of {p['event']} at {p['frequency']} Hz on CPUs {p['cpus']}"
             f" (idle {p['idle_share'] * 100:.1f} %, lost events {p['lost_events']}{own})",
             f"           folded stacks {p['folded_file']}, "
             f"flame graph {p['flamegraph_file'] or '- (no samples)'}",
             "           processes: " + ", ".join(f"{q['process']} {q['share'] * 100:.1f} %" for q in p["processes"][:5]),
             "           self %  incl %  symbol"]
    lines += [f"           {s['self_share'] * 100:6.1f}  {s['inclusive_share'] * 100:6.1f}  {s['symbol']} ({s['kind']})"
              for s in p["top"][:10]]
    return lines
