"""``perfkit host check``: measure each core's stalls and read the host's tuning (see perfkit.host.check).

Exit 0 when the check ran, whatever its verdict (the verdict is in the output); 2 on bad input.
"""
from __future__ import annotations

import argparse
import math
import sys

from perfkit.cli.options import add_json, emit
from perfkit.errors import ConfigError
from perfkit.host.check import MAX_SECONDS, allowed_cpus, check_host
from perfkit.host.gaps import TRIAL_SECONDS
from perfkit.host.verdict import FIT_PPS
from perfkit.rate import Rate


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("host", help="check this host: stalls per core, tuning, fitness for zero-loss measurements",
                       description=__doc__)
    hsub = p.add_subparsers(dest="host_command", required=True, metavar="ACTION")
    c = hsub.add_parser("check", help="measure each core's stalls (gaps, steal) and read SMT, governor, IRQ/NAPI "
                                      "affinity, isolated cores; end with a verdict",
                        description=__doc__)
    c.add_argument("--seconds", default="10", metavar="N",
                   help=f"how long to measure, 0 < N <= {MAX_SECONDS:g} (default 10)")
    c.add_argument("--cpus", default=None, metavar="CPUS", help="CPUs to measure, e.g. 0,1 (default: all)")
    c.add_argument("--trial-seconds", default=f"{TRIAL_SECONDS:g}", metavar="T",
                   help=f"trial length the verdict's rates refer to (default {TRIAL_SECONDS:g})")
    c.add_argument("--fit-rate", default=f"{FIT_PPS / 1e6:g}Mpps", metavar="RATE",
                   help=f"per-core rate a fit host keeps zero loss at, e.g. 500kpps (default {FIT_PPS / 1e6:g}Mpps)")
    add_json(c)
    c.set_defaults(func=cmd_check)


def _seconds(option: str, text: str, upper: float | None) -> float:
    allowed = f"a number of seconds > 0{f' and <= {upper:g}' if upper else ''}"
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(option, text, allowed) from None
    if not math.isfinite(value) or value <= 0 or (upper is not None and value > upper):
        raise ConfigError(option, text, allowed)
    return value


def _cpus(text: str | None) -> list[int] | None:
    if text is None:
        return None
    allowed = allowed_cpus()
    try:
        cpus = [int(c) for c in text.split(",")]
    except ValueError:
        cpus = []
    if not cpus or len(set(cpus)) != len(cpus) or any(c not in allowed for c in cpus):
        raise ConfigError("--cpus", text, "distinct CPU numbers separated by commas, of "
                          + ",".join(map(str, allowed)))
    return cpus


def _fit_rate(text: str) -> float:
    try:
        rate = Rate.parse(text)
    except ConfigError:
        rate = None
    if rate is None or rate.unit != "pps":
        raise ConfigError("--fit-rate", text, "a packet rate, e.g. 1Mpps, 500kpps, 300000")
    return rate.value


def cmd_check(args: argparse.Namespace) -> int:
    seconds = _seconds("--seconds", args.seconds, MAX_SECONDS)
    trial_seconds = _seconds("--trial-seconds", args.trial_seconds, None)
    fit_pps = _fit_rate(args.fit_rate)
    cpus = _cpus(args.cpus)
    hc = check_host(seconds, cpus, progress=sys.stderr.isatty(), trial_seconds=trial_seconds, fit_pps=fit_pps)
    emit(hc.to_dict(), args.json, _human)
    return 0


def _ms(us: float) -> str:
    return f"{us / 1e3:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def _rate(pps: float, bound: bool) -> str:
    return f"{'>=' if bound else '~'}{pps / 1e6:.3g} Mpps"


def _human(d: dict) -> str:
    v = d["verdict"]
    kind = f"{d['hypervisor']} VM" if d["vm"] else "bare metal"
    govs = sorted(set(d["governors"].values()))
    lines = [f"host: {kind}, kernel {d['kernel']}, CPUs online {_cpus_text(d['cpus_online'])}",
             f"  SMT              {d['smt']} ({'active' if d['smt_active'] else 'not active'})"
             + ("; siblings " + "; ".join(f"{c}: {_cpus_text(s)}" for c, s in d["smt_siblings"].items())
                if d["smt_siblings"] else ""),
             f"  frequency        driver {d['cpufreq_driver']}, governor {', '.join(govs)}; idle {d['idle_driver']}",
             f"  isolated cores   {_cpus_text(d['isolated']) or 'none'}; nohz_full {_cpus_text(d['nohz_full']) or 'none'}"
             + (f"; cmdline {' '.join(f'{k}={x}' for k, x in d['cmdline'].items())}" if d["cmdline"] else ""),
             f"  IRQs             default affinity {_cpus_text(d['default_irq_affinity'])}; irqbalance "
             + ("running" if d["irqbalance"] else "not running")]
    by_cpu: dict[int, list[str]] = {}
    for irq in d["irqs"]:
        if sum(irq["counts"].values()):
            for c in irq["effective"]:
                by_cpu.setdefault(c, []).append(irq["name"])
    for c, names in sorted(by_cpu.items()):
        lines.append(f"    CPU {c} takes    {', '.join(names)}")
    if d["packet_threads"]:
        lines.append("  packet threads")
        for t in d["packet_threads"]:
            prio = f" {t['priority']}" if t["policy"] in ("FIFO", "RR") else f" nice {t['nice']}"
            lines.append(f"    {t['name']:<22} pid {t['pid']:<7} CPUs {_cpus_text(t['cpus']):<6} {t['policy']}{prio}")
    else:
        lines.append("  packet threads   none (no threaded NAPI or cpumap threads now)")
    if d["interfaces"]:
        lines.append("  testbed interfaces")
        for i in d["interfaces"]:
            mode = {True: "threaded NAPI", False: "NAPI in softirq", None: "NAPI mode unknown"}[i["threaded"]]
            lines.append(f"    {i['ns']:<18} {i['dev']:<12} {mode}")
    load = ", ".join(f"{x:g}" for x in d["load_average"])
    lines.append(f"stalls over {d['seconds']:.1f} s (a timer every {d['period_us']:g} µs per CPU; a gap is a time "
                 f"the CPU did not run it; load average {load}):")
    lines.append(f"  {'CPU':>3} {'>100µs':>7} {'>1ms':>5} {'>1ms/min':>9} {'longest':>9} {'steal':>8} "
                 f"{'1 stall/trial at':>17} {'clean up to':>12}")
    for c, cc in d["cores"].items():
        lines.append(f"  {c:>3} {cc['gaps_100us']:>7} {cc['gaps_1ms']:>5} {cc['per_min_1ms']:>9.1f} "
                     f"{_ms(cc['longest_us']):>9} {cc['steal_pct']:>6.2f} % "
                     f"{_rate(cc['one_per_trial_pps'], cc['one_per_trial_bound']):>17} "
                     f"{_rate(cc['clean_pps'], cc['clean_bound']):>12}")
    lines.append(f"  (rates per core: {v['ring_frames']}-frame ring, {v['trial_seconds']:g} s trials; "
                 "clean: at most 1 trial in 10 meets an overflowing stall)")
    lines.append(f"verdict: {v['text']}")
    lines.extend(f"  - {n}" for n in v["notes"])
    return "\n".join(lines)


def _cpus_text(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)
