"""Gaps in a CPU's timer ticks and the rate from which they overflow a receive ring (pure arithmetic).

The host check (``perfkit.host.check``) counts the gaps of every CPU; this module turns them into
per-core figures (``CoreCheck``) and the rate formula below. The verdict on them is
``perfkit.host.verdict``.

Gaps
----
A *gap* is a time a CPU did not run its timer: the vCPU was away (the hypervisor ran something
else), or interrupts or softirqs were off. A tick that comes ``g`` µs after the previous one covers
a gap of ``g - period`` .. ``g`` µs (the gap began somewhere in the last period); the check takes
the middle, ``g - period / 2`` (± 25 µs), and counts gaps longer than ``THRESHOLD_US`` = 100 µs.
A busy loop on the same CPU sees the same gaps (``tests/test_host.py`` compares them); unlike it,
the timer is not delayed by other threads taking the CPU, so only the CPU's own unavailability is
counted. That is what a packet thread in softirq (NAPI) or a real-time NAPI thread suffers too.
The timer costs 15-20 % of a vCPU on a KVM guest (about 17,000 ticks a second, each a timer
interrupt of ~10 µs with its VM exit) while the check runs, and nothing afterwards. Trials tick
every ``perfkit.host.stallprobe.TRIAL_PERIOD_US`` (500 µs: ~20 µs a tick with the speed probe's share, ~4 % of a
core here, ``bench/probe_cost.py``), and know a gap to ± 250 µs.

Steal is the hypervisor's steal clock (KVM ``steal_time``) as the scheduler reads it, in µs per
second of the window (and %): time the host ran something else on this vCPU's physical CPU.

Stalls and the ring: the rate formula
-------------------------------------
A DUT core that does not run for longer than its receive ring takes to fill overflows it: with a
ring of ``R`` frames (``RING_FRAMES`` = 256 on the veth testbed) at ``r`` packets/s per core, a gap
longer than ``R / r`` loses frames. With ``N(x)`` the number of gaps longer than ``x`` counted on a
core in ``S`` seconds, a trial of ``T`` seconds at per-core rate ``r`` expects::

    E(r) = (T / S) * N(R / r)            overflowing gaps per trial

``E`` grows with ``r``. The highest rate at which fewer than ``e`` overflowing gaps per trial are
expected (``stall_limited_rate``) is, with the gaps sorted longest first ``g1 >= g2 >= ...`` and
``k = ceil(e * S / T)``::

    r_e = R / g_k

(at ``r_e`` exactly ``N = k - 1 < e * S / T`` gaps are longer than ``R / r_e``; any faster and the
k-th gap overflows the ring too). When fewer than ``k`` gaps were counted, stalls do not limit
anything the timer resolves and ``r_e >= R / THRESHOLD_US`` (2.56 Mpps for 256 frames): a bound,
flagged ``*_bound`` (``one_per_trial_pps`` is ``r_1``, ``clean_pps`` ``r_0.1``: ``perfkit.host.verdict``).

``T`` defaults to ``TRIAL_SECONDS`` = 2 s, the default trial of ``perfkit trial`` and of the
binary and linear searches; for ndrpdr's 10 s final trials pass ``trial_seconds=10`` (``E`` scales
with ``T``). A DUT of ``n`` cores at a total rate ``r`` runs each core at ``r / n``. ``E`` is an
empirical rate: ``N`` counted gaps carry a Poisson uncertainty of about ``sqrt(N)``, so measure for
several trial lengths (``S >= 5 T``) before trusting the figures; rare long stalls (a few a minute
on a cloud VM) make short checks optimistic. Rates above ``R / THRESHOLD_US`` need gaps shorter
than the threshold and are not resolved: there ``E`` is a lower bound.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Iterable, Sequence

import numpy as np

from perfkit.generators.xdpcores import RING_FRAMES

#: Timer period of the check [µs]: a gap estimate is ± half of it.
PERIOD_US = 50.0
#: Gaps longer than this are counted [µs].
THRESHOLD_US = 100.0
#: A "long" gap [µs]: it overflows a 256-frame ring at 256 kpps.
LONG_US = 1000.0
#: Default trial length of the rate formula [s] (perfkit's default trial duration).
TRIAL_SECONDS = 2.0
#: Expected overflowing stalls per trial of ``clean_pps`` (one trial in ten).
CLEAN_PER_TRIAL = 0.1
#: Windows in which the check measures each CPU's speed (``CoreCheck.speed_spread``) [s].
SPEED_WINDOW_S = 0.25
#: Thresholds [µs] of the ``gaps_over`` counts.
GAP_STEPS = (100, 250, 500, 1000, 2000, 5000, 10000)
#: Per-core rates [pps] of the ``expected_per_trial`` table.
RATE_STEPS = (100e3, 300e3, 600e3, 1e6, 2e6)


# -- the rate formula (pure) ---------------------------------------------------------------------
def expected_overflows(gaps_us: Iterable[float], seconds: float, rate_pps: float, *,
                       ring_frames: int = RING_FRAMES, trial_seconds: float = TRIAL_SECONDS) -> float:
    """``E(r)``: ring-overflowing gaps expected per trial at ``rate_pps`` per core (module doc)."""
    if seconds <= 0 or rate_pps <= 0:
        return 0.0
    fill_us = ring_frames / rate_pps * 1e6
    return trial_seconds / seconds * sum(1 for g in gaps_us if g > fill_us)


def stall_limited_rate(gaps_us: Iterable[float], seconds: float, *, per_trial: float = 1.0,
                       ring_frames: int = RING_FRAMES, trial_seconds: float = TRIAL_SECONDS,
                       threshold_us: float = THRESHOLD_US) -> tuple[float, bool]:
    """``(r_e [pps per core], bound)``: the highest per-core rate at which fewer than ``per_trial``
    ring-overflowing gaps per trial are expected (module doc); ``bound``: no counted gap limits it
    and the rate is at least the one given."""
    k = max(1, math.ceil(per_trial * seconds / trial_seconds - 1e-9))
    ordered = sorted(gaps_us, reverse=True)
    if len(ordered) < k or ordered[k - 1] <= threshold_us:
        return ring_frames / threshold_us * 1e6, True
    # a hair below R / g_k, so that the k-th gap is not counted by float rounding at the boundary
    return ring_frames / ordered[k - 1] * 1e6 * (1 - 1e-12), False


# -- one core's figures -------------------------------------------------------------------------------------
@dataclass
class CoreCheck:
    """What one CPU went through during the check."""

    cpu: int
    seconds: float
    """Length of the measured window [s]."""
    ticks: int
    """Timer ticks in the window (about 16,000 a second at a 50 µs period; few: the timer did not run)."""
    gaps_100us: int
    """Gaps longer than ``THRESHOLD_US`` (100 µs)."""
    gaps_1ms: int
    """Gaps longer than ``LONG_US`` (1 ms)."""
    longest_us: float
    """The longest gap [µs] (0: none longer than the threshold)."""
    stalled_us: float
    """Sum of the counted gaps [µs]."""
    steal_us: float
    """Steal time in the window [µs] (KVM steal clock; 0 when not a KVM guest)."""
    proc_steal_us: float
    """The same from ``/proc/stat`` [µs], which counts whole 10 ms ticks: a coarse cross-check."""
    gaps_over: dict[int, int]
    """{threshold [µs]: gaps longer than it} for ``GAP_STEPS``."""
    longest_gaps_us: list[float]
    """The 50 longest gaps, longest first [µs]."""
    lost_events: int
    """Gap reports the probe's ring buffer had no room for (0: the counts are complete)."""
    one_per_trial_pps: float
    """From this per-core rate on, one ring-overflowing gap per trial is expected [packets/s]."""
    one_per_trial_bound: bool
    """True: no counted gap limits the rate; it is at least ``one_per_trial_pps``."""
    clean_pps: float
    """Up to this per-core rate, fewer than 0.1 overflowing gaps per trial are expected [packets/s]."""
    clean_bound: bool
    """True: ``clean_pps`` is a lower bound."""
    expected_per_trial: dict[str, float]
    """{per-core rate: overflowing gaps expected per trial} at ``RATE_STEPS`` (keys like ``0.3Mpps``)."""
    irq_per_s: dict[str, float] = field(default_factory=dict)
    """{device interrupt: interrupts per second on this CPU during the window}."""
    speed_ns_per_step: float | None = None
    """The CPU's speed: the median over ``SPEED_WINDOW_S`` windows of the speed probe's time per
    step [ns] (``perfkit.host.stallprobe``; higher is slower; None: not measured)."""
    speed_spread: float | None = None
    """How much the host varied the CPU's speed: (90th - 10th percentile) / median of the windows'
    times per step [1]. A CPU-bound DUT's throughput varies as much from one trial to the next."""
    gaps_us: list[float] = field(default_factory=list, repr=False)
    """Every counted gap [µs], longest first (not in ``to_dict``: ``longest_gaps_us`` and ``gaps_over``)."""
    gap_ends_ns: list[int] = field(default_factory=list, repr=False)
    """When each of ``gaps_us`` ended (``time.monotonic_ns()``'s clock; not in ``to_dict``)."""

    @classmethod
    def from_gaps(cls, cpu: int, seconds: float, gaps_us: Sequence[float], gap_ends_ns: Sequence[int] = (), *,
                  ticks: int = 0, steal_us: float = 0.0, proc_steal_us: float = 0.0, lost_events: int = 0,
                  trial_seconds: float = TRIAL_SECONDS, ring_frames: int = RING_FRAMES,
                  threshold_us: float = THRESHOLD_US) -> CoreCheck:
        """The figures of a core from its gaps [µs] (those not longer than ``threshold_us`` are dropped)."""
        ends = list(gap_ends_ns) or [0] * len(gaps_us)
        pairs = sorted(((g, e) for g, e in zip(gaps_us, ends) if g > threshold_us), key=lambda p: -p[0])
        gaps = [g for g, _ in pairs]
        kw = dict(ring_frames=ring_frames, trial_seconds=trial_seconds, threshold_us=threshold_us)
        one, one_bound = stall_limited_rate(gaps, seconds, per_trial=1.0, **kw)
        clean, clean_bound = stall_limited_rate(gaps, seconds, per_trial=CLEAN_PER_TRIAL, **kw)
        return cls(cpu=cpu, seconds=seconds, ticks=ticks, gaps_100us=len(gaps), gaps_1ms=sum(g > LONG_US for g in gaps),
                   longest_us=gaps[0] if gaps else 0.0, stalled_us=sum(gaps), steal_us=steal_us,
                   proc_steal_us=proc_steal_us, gaps_over={t: sum(g > t for g in gaps) for t in GAP_STEPS},
                   longest_gaps_us=gaps[:50], lost_events=lost_events, one_per_trial_pps=one,
                   one_per_trial_bound=one_bound, clean_pps=clean, clean_bound=clean_bound,
                   expected_per_trial={f"{r / 1e6:g}Mpps": round(expected_overflows(
                       gaps, seconds, r, ring_frames=ring_frames, trial_seconds=trial_seconds), 3)
                       for r in RATE_STEPS},
                   gaps_us=gaps, gap_ends_ns=[e for _, e in pairs])

    @property
    def per_min_100us(self) -> float:
        """Gaps longer than 100 µs per minute."""
        return self.gaps_100us * 60.0 / self.seconds if self.seconds > 0 else 0.0

    @property
    def per_min_1ms(self) -> float:
        """Gaps longer than 1 ms per minute."""
        return self.gaps_1ms * 60.0 / self.seconds if self.seconds > 0 else 0.0

    @property
    def steal_us_per_s(self) -> float:
        """Steal [µs per second]."""
        return self.steal_us / self.seconds if self.seconds > 0 else 0.0

    @property
    def steal_pct(self) -> float:
        """Steal [% of the window]."""
        return self.steal_us_per_s / 1e4

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("gaps_us")
        d.pop("gap_ends_ns")
        d["gaps_over"] = {str(k): v for k, v in self.gaps_over.items()}
        for k in ("longest_us", "stalled_us", "steal_us", "proc_steal_us"):
            d[k] = round(d[k], 1)
        for k in ("speed_ns_per_step", "speed_spread"):
            d[k] = None if d[k] is None else round(d[k], 4)
        d["longest_gaps_us"] = [round(g, 1) for g in self.longest_gaps_us]
        d.update(per_min_100us=round(self.per_min_100us, 2), per_min_1ms=round(self.per_min_1ms, 2),
                 steal_us_per_s=round(self.steal_us_per_s, 1), steal_pct=round(self.steal_pct, 3))
        return d


def speed_figures(window_ns_per_step: Sequence[float]) -> tuple[float | None, float | None]:
    """(median, (p90 - p10) / median) of a CPU's speed over windows [ns per step, 1]; None without
    at least three windows."""
    if len(window_ns_per_step) < 3:
        return None, None
    q10, q50, q90 = np.quantile(np.asarray(window_ns_per_step), [0.1, 0.5, 0.9])
    return float(q50), float((q90 - q10) / q50)
