"""The verdict on a host check: fit for zero-loss measurements at a per-core rate, and what deviates
from seed 001's tuning.

- ``one_per_trial_pps`` = ``r_1``: from this per-core rate on, one or more ring-overflowing stalls
  per trial are expected (as a Poisson process, ``1 - exp(-E)`` of trials meet one: 63 % at ``E = 1``).
- ``clean_pps`` = ``r_0.1``: up to this rate at most one trial in ten is expected to meet one:
  zero-loss results are reproducible.
- **fit** (the verdict): ``clean_pps >= fit_pps`` on every core, i.e. at ``fit_pps`` per core
  (default ``FIT_PPS`` = 1 Mpps, a round figure: pass the per-core rate the DUT is expected to
  reach) fewer than 0.1 overflowing stalls per trial are expected. With ``S = 10`` s and ``T = 2`` s this means no
  gap longer than ``R / fit_pps`` = 256 µs was measured.

The rates and the formula behind them are in ``perfkit.host.gaps``.
"""
from __future__ import annotations

from typing import Sequence

from perfkit.generators.xdpcores import RING_FRAMES
from perfkit.host.gaps import SPEED_WINDOW_S, THRESHOLD_US, TRIAL_SECONDS, CoreCheck
from perfkit.host.result import HostCheck, Verdict, mpps_text, ms_text

#: Default per-core rate a fit host must keep zero loss at [packets/s].
FIT_PPS = 1e6
#: A speed spread from which the check notes it (a CPU-bound DUT's NDR moves as much) [1].
SPEED_SPREAD_NOTE = 0.05


def verdict(cores: dict[int, CoreCheck], *, fit_pps: float = FIT_PPS, trial_seconds: float = TRIAL_SECONDS,
            ring_frames: int = RING_FRAMES, threshold_us: float = THRESHOLD_US,
            notes: Sequence[str] = ()) -> Verdict:
    """The verdict on measured cores (made with the same ``trial_seconds`` and ``ring_frames``; the
    module doc has the rule)."""
    worst = min(cores.values(), key=lambda c: (c.one_per_trial_pps, c.clean_pps, -c.gaps_100us, c.cpu))
    clean = min(c.clean_pps for c in cores.values())
    bound = all(c.one_per_trial_bound for c in cores.values())
    clean_bound = all(c.clean_bound for c in cores.values())
    fit = clean >= fit_pps
    one = f"{'>=' if bound else '~'}{mpps_text(worst.one_per_trial_pps)}"
    at = f"{mpps_text(fit_pps)} per core"
    ring = f"a {ring_frames}-frame ring"
    if fit and bound:
        text = (f"fit for zero-loss measurements at {at}: fewer than one gap longer than {threshold_us:g} µs per "
                f"{trial_seconds:g} s trial on every core, so host stalls do not overflow {ring} below {one} per core")
    elif not fit and clean_bound:
        text = (f"cannot tell at {at}: no gap longer than {threshold_us:g} µs limits zero loss below "
                f"{mpps_text(clean)} per core, and faster rates need shorter gaps than the timer resolves")
    else:
        text = (f"{'fit' if fit else 'NOT fit'} for zero-loss measurements at {at}: zero loss is reproducible "
                f"(at most 1 trial in 10 meets a stall that overflows {ring}) up to {'>=' if clean_bound else '~'}"
                f"{mpps_text(clean)} per core; one such stall per {trial_seconds:g} s trial is expected from {one} per "
                f"core (CPU {worst.cpu}: {worst.per_min_1ms:.1f} gaps > 1 ms a minute, longest {ms_text(worst.longest_us)})")
        if not fit:
            text += "; loss above that rate is the host's: count it as disturbed (perfkit retries disturbed trials)"
    return Verdict(fit=fit, cpu=worst.cpu, one_per_trial_pps=worst.one_per_trial_pps, clean_pps=clean,
                   bound=bound, fit_pps=fit_pps, trial_seconds=trial_seconds, ring_frames=ring_frames,
                   text=text, notes=list(notes))


def host_notes(hc: HostCheck, trial_seconds: float = TRIAL_SECONDS) -> list[str]:
    """What deviates from seed 001's tuning (SMT off, performance governor, IRQ affinity, RSS), and findings."""
    notes = []
    if hc.vm:
        notes.append(f"a {hc.hypervisor} VM: the host can take a vCPU away at any time (steal, gaps); "
                     "SMT, frequency and physical placement are the host's")
    if hc.smt_active:
        notes.append("SMT is on: sibling threads share a core (seed 001 turned it off): "
                     + "; ".join(f"CPU {c}: {s}" for c, s in sorted(hc.smt_siblings.items())))
    slow = sorted(c for c, g in hc.governors.items() if g not in ("performance", "none"))
    if slow:
        notes.append(f"frequency governor is not 'performance' on CPUs {slow}: "
                     f"{sorted(set(hc.governors[c] for c in slow))}")
    if not hc.isolated and not hc.nohz_full:
        notes.append("no isolated cores (isolcpus=, nohz_full=): other work shares the DUT's cores")
    if hc.load_average and hc.load_average[0] > len(hc.cpus_online):
        notes.append(f"load average {hc.load_average[0]:.1f} on {len(hc.cpus_online)} CPUs: other work ran during "
                     "the check, and what it did with interrupts or softirqs off is counted as gaps")
    if hc.irqbalance:
        notes.append("irqbalance is running: it moves interrupts while trials run")
    for cc in sorted(hc.cores.values(), key=lambda c: c.cpu):
        busy = [f"{n} ({r:g}/s)" for n, r in cc.irq_per_s.items() if r >= 1]
        if busy:
            notes.append(f"CPU {cc.cpu} takes device interrupts: {', '.join(busy[:5])}")
        if cc.steal_pct >= 1:
            notes.append(f"CPU {cc.cpu}: steal {cc.steal_pct:.1f} % (the host runs other work on its CPU)")
        if cc.stalled_us > 2 * cc.steal_us and cc.stalled_us > 1e-3 * cc.seconds * 1e6:
            notes.append(f"CPU {cc.cpu}: gaps total {cc.stalled_us / 1e3:.1f} ms but steal only {cc.steal_us / 1e3:.1f} ms: "
                         "most of the gap time was the guest's own (interrupts or softirqs off: other work on the "
                         "core, e.g. traffic), not the hypervisor's")
        if cc.lost_events:
            notes.append(f"CPU {cc.cpu}: {cc.lost_events} gap reports lost: its counts are too low")
        if cc.speed_spread is not None and cc.speed_spread >= SPEED_SPREAD_NOTE:
            notes.append(f"CPU {cc.cpu}: its speed varied by {cc.speed_spread * 100:.0f} % between "
                         f"{SPEED_WINDOW_S:g} s windows (10th to 90th percentile of the speed probe, median "
                         f"{cc.speed_ns_per_step:.2f} ns per step): the host shares its physical core; a "
                         "CPU-bound DUT's throughput, and so its NDR, moves as much from one trial to the next")
        if cc.ticks < 0.1 * cc.seconds * 1e6 / hc.period_us:
            notes.append(f"CPU {cc.cpu}: only {cc.ticks} timer ticks in {cc.seconds:.1f} s: the measurement is unreliable")
    normal = [t.name for t in hc.packet_threads if t.policy not in ("FIFO", "RR")]
    if normal:
        notes.append(f"packet threads not real-time (other threads on their CPUs delay them): {', '.join(normal)}")
    if hc.seconds < 5 * trial_seconds:
        notes.append(f"measured {hc.seconds:.1f} s, less than 5 trials of {trial_seconds:g} s: "
                     "the rates of rare stalls are uncertain")
    return notes
