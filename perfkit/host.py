"""Host check: is this machine fit for zero-loss measurements? (``perfkit host check``)

``check_host(seconds, cpus)`` measures every CPU for ``seconds`` with the stall probe
(``perfkit.stalls``: a BPF timer pinned to each CPU, here every ``PERIOD_US`` = 50 µs), reads what
seed 001 tuned by hand (SMT, frequency governor, IRQ and NAPI affinity, isolated cores, the packet
threads' scheduling class) and ends with a verdict. ``HostCheck.to_dict()`` is JSON-ready (run
metadata), ``HostCheck.summary()`` one line (a report's index page)::

    from perfkit.host import check_host

    hc = check_host(10.0)
    hc.verdict.fit, hc.verdict.one_per_trial_pps, hc.cores[1].gaps_1ms
    hc.summary()   # 'host: KVM VM, 2 CPUs, kernel 6.18.44; CPU 1: 3.1 stalls/min > 1 ms, ...'

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
every ``stalls.TRIAL_PERIOD_US`` (500 µs: ~20 µs a tick with the speed probe's share, ~4 % of a
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
flagged ``*_bound``.

- ``one_per_trial_pps`` = ``r_1``: from this per-core rate on, one or more ring-overflowing stalls
  per trial are expected (as a Poisson process, ``1 - exp(-E)`` of trials meet one: 63 % at ``E = 1``).
- ``clean_pps`` = ``r_0.1``: up to this rate at most one trial in ten is expected to meet one:
  zero-loss results are reproducible.
- **fit** (the verdict): ``clean_pps >= fit_pps`` on every core, i.e. at ``fit_pps`` per core
  (default ``FIT_PPS`` = 1 Mpps, a round figure: pass the per-core rate the DUT is expected to
  reach) fewer than 0.1 overflowing stalls per trial are expected. With ``S = 10`` s and ``T = 2`` s this means no
  gap longer than ``R / fit_pps`` = 256 µs was measured.

``T`` defaults to ``TRIAL_SECONDS`` = 2 s, the default trial of ``perfkit trial`` and of the
binary and linear searches; for ndrpdr's 10 s final trials pass ``trial_seconds=10`` (``E`` scales
with ``T``). A DUT of ``n`` cores at a total rate ``r`` runs each core at ``r / n``. ``E`` is an
empirical rate: ``N`` counted gaps carry a Poisson uncertainty of about ``sqrt(N)``, so measure for
several trial lengths (``S >= 5 T``) before trusting the figures; rare long stalls (a few a minute
on a cloud VM) make short checks optimistic. Rates above ``R / THRESHOLD_US`` need gaps shorter
than the threshold and are not resolved: there ``E`` is a lower bound.

Fields of ``to_dict()``: every dataclass field below, with ``cores`` keyed by CPU number as a
string (as ``TrialResult.stalls`` is) and each core's derived figures (``per_min_*``,
``steal_pct``, ``expected_per_trial``) included.
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from perfkit import cpustat
from perfkit.errors import ConfigError
from perfkit.generators.xdpcores import RING_FRAMES
from perfkit.layouts import STALL_MAX_CPUS
from perfkit.stalls import StallProbe
from perfkit.testbed import netns, topology

#: Timer period of the check [µs]: a gap estimate is ± half of it.
PERIOD_US = 50.0
#: Gaps longer than this are counted [µs].
THRESHOLD_US = 100.0
#: A "long" gap [µs]: it overflows a 256-frame ring at 256 kpps.
LONG_US = 1000.0
#: Default trial length of the rate formula [s] (perfkit's default trial duration).
TRIAL_SECONDS = 2.0
#: Default per-core rate a fit host must keep zero loss at [packets/s].
FIT_PPS = 1e6
#: Expected overflowing stalls per trial of ``clean_pps`` (one trial in ten).
CLEAN_PER_TRIAL = 0.1
#: Windows in which the check measures each CPU's speed (``CoreCheck.speed_spread``) [s].
SPEED_WINDOW_S = 0.25
#: A speed spread from which the check notes it (a CPU-bound DUT's NDR moves as much) [1].
SPEED_SPREAD_NOTE = 0.05
#: The longest measurement: the probe keeps events for 10 minutes.
MAX_SECONDS = 600.0
#: Thresholds [µs] of the ``gaps_over`` counts.
GAP_STEPS = (100, 250, 500, 1000, 2000, 5000, 10000)
#: Per-core rates [pps] of the ``expected_per_trial`` table.
RATE_STEPS = (100e3, 300e3, 600e3, 1e6, 2e6)
#: Kernel threads that carry packets: threaded NAPI and cpumap.
PACKET_THREADS = ("napi/*", "cpumap/*")

SYS_CPU = Path("/sys/devices/system/cpu")
PROC = Path("/proc")
_POLICIES = {os.SCHED_OTHER: "OTHER", os.SCHED_FIFO: "FIFO", os.SCHED_RR: "RR",
             getattr(os, "SCHED_BATCH", 3): "BATCH", getattr(os, "SCHED_IDLE", 5): "IDLE", 6: "DEADLINE"}


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


# -- results -------------------------------------------------------------------------------------
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
    step [ns] (``perfkit.stalls``; higher is slower; None: not measured)."""
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


@dataclass
class Irq:
    """One device interrupt line (``/proc/irq/<n>``, ``/proc/interrupts``)."""

    irq: int
    name: str
    """Its handlers (``virtio1-req.0``, ``eth0-TxRx-3`` ...)."""
    affinity: list[int]
    """CPUs it may be delivered to (``smp_affinity_list``)."""
    effective: list[int]
    """CPUs it is delivered to (``effective_affinity_list``; ``affinity`` when the kernel has none)."""
    counts: dict[int, int]
    """{cpu: interrupts since boot}."""


@dataclass
class PacketThread:
    """A kernel thread that carries packets (threaded NAPI ``napi/<dev>-<id>``, ``cpumap/<cpu>/map:<id>``)."""

    pid: int
    name: str
    cpus: list[int]
    """CPUs it may run on (its affinity)."""
    policy: str
    """Scheduling class: OTHER, FIFO, RR, BATCH, IDLE or DEADLINE."""
    priority: int
    """Real-time priority (FIFO, RR; 0 otherwise)."""
    nice: int


@dataclass
class Interface:
    """A network interface of a perfkit testbed and how its receive processing (NAPI) runs."""

    ns: str
    dev: str
    threaded: bool | None
    """Threaded NAPI (a kernel thread per queue) or softirq (False: on the CPU that raised it); None: unknown."""
    napi_threads: list[int]
    """Pids of its NAPI threads (see ``HostCheck.packet_threads``)."""


@dataclass
class Verdict:
    fit: bool
    """Zero-loss results at ``fit_pps`` per core are reproducible: fewer than 0.1 ring-overflowing
    gaps per trial expected on every measured core."""
    cpu: int
    """The worst core: the one with the lowest ``one_per_trial_pps``."""
    one_per_trial_pps: float
    """The worst core's ``one_per_trial_pps`` [packets/s per core]."""
    clean_pps: float
    """The worst core's ``clean_pps`` [packets/s per core]."""
    bound: bool
    """True: no counted gap limits the rates (they are lower bounds)."""
    fit_pps: float
    trial_seconds: float
    ring_frames: int
    text: str
    """The verdict in one sentence."""
    notes: list[str]
    """What deviates from seed 001's tuning, and other findings."""


@dataclass
class HostCheck:
    """The result of ``check_host``."""

    kernel: str
    """``uname -r``."""
    kernel_version: str
    """``uname -v``."""
    vm: bool
    """Runs under a hypervisor (the CPU's ``hypervisor`` flag, or /sys/hypervisor)."""
    hypervisor: str
    """``KVM``, ``Xen``, ``Hyper-V``, ``VMware``, ``unknown`` (a VM of unknown kind) or ``none``."""
    cpus_online: list[int]
    smt: str
    """``/sys/devices/system/cpu/smt/control``: on, off, forceoff, notsupported, notimplemented (or unknown)."""
    smt_active: bool
    smt_siblings: dict[int, list[int]]
    """{cpu: its sibling threads} of CPUs that have any."""
    cpufreq_driver: str
    """The frequency scaling driver, or ``none`` (no cpufreq: e.g. a VM, whose host sets frequencies)."""
    governors: dict[int, str]
    """{cpu: frequency governor} (``none`` without cpufreq)."""
    idle_driver: str
    """cpuidle driver (``none``: the default idle loop, HLT on x86) and governor, ``driver/governor``."""
    isolated: list[int]
    """``/sys/devices/system/cpu/isolated`` (isolcpus=)."""
    nohz_full: list[int]
    """Tickless CPUs (nohz_full=)."""
    cmdline: dict[str, str]
    """Kernel parameters that place work on CPUs: isolcpus, nohz_full, rcu_nocbs, irqaffinity, idle ..."""
    irqbalance: bool
    """An irqbalance daemon is running (it moves interrupts during a run)."""
    default_irq_affinity: list[int]
    irqs: list[Irq]
    packet_threads: list[PacketThread]
    interfaces: list[Interface]
    """Interfaces of the perfkit testbeds up now (none: no testbed is up)."""
    period_us: float
    """Timer period of the measurement [µs]."""
    threshold_us: float
    """Gaps longer than this were counted [µs]."""
    seconds: float
    """Measured window [s]."""
    load_average: list[float]
    """``/proc/loadavg`` at the end of the check (1, 5, 15 minutes): other work running meanwhile."""
    time: float
    """Unix time [s] the check started."""
    window_ns: tuple[int, int]
    """The measured window, ``time.monotonic_ns()`` at its start and end."""
    cores: dict[int, CoreCheck]
    verdict: Verdict

    def to_dict(self) -> dict:
        """Everything, JSON-ready (CPU numbers as string keys)."""
        d = {k: v for k, v in asdict(self).items() if k not in ("cores", "smt_siblings", "governors")}
        d["smt_siblings"] = {str(c): s for c, s in self.smt_siblings.items()}
        d["governors"] = {str(c): g for c, g in self.governors.items()}
        d["irqs"] = [{**asdict(i), "counts": {str(c): n for c, n in i.counts.items()}} for i in self.irqs]
        d["cores"] = {str(c): cc.to_dict() for c, cc in sorted(self.cores.items())}
        d["summary"] = self.summary()
        return d

    def summary(self) -> str:
        """One line for a report's index page."""
        v = self.verdict
        kind = f"{self.hypervisor} VM" if self.vm else "bare metal"
        w = self.cores[v.cpu]
        head = (f"host: {kind}, {len(self.cpus_online)} CPUs, kernel {self.kernel}; CPU {v.cpu}: "
                f"{w.per_min_1ms:.1f} stalls/min > 1 ms, longest {_ms(w.longest_us)}, steal {w.steal_pct:.2f} %")
        if v.fit and v.bound:
            return (f"{head}; fit for zero-loss: no stall overflows a {v.ring_frames}-frame ring below "
                    f"{_mpps(v.one_per_trial_pps)} per core")
        clean_bound = all(c.clean_bound for c in self.cores.values())
        return (f"{head}; zero loss reproducible up to {'>=' if clean_bound else '~'}{_mpps(v.clean_pps)} per core, "
                f"one overflowing stall per {v.trial_seconds:g} s trial from {'>=' if v.bound else '~'}"
                f"{_mpps(v.one_per_trial_pps)} ({v.ring_frames}-frame ring): "
                + ("fit" if v.fit else "NOT fit") + f" at {_mpps(v.fit_pps)}")


def _ms(us: float) -> str:
    return f"{us / 1e3:.1f} ms" if us >= 1000 else f"{us:.0f} µs"


def _mpps(pps: float) -> str:
    return f"{pps / 1e6:.2g} Mpps" if pps < 1e6 else f"{pps / 1e6:.3g} Mpps"


# -- reading the host ----------------------------------------------------------------------------
def _read(path: Path | str, default: str = "") -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def cpu_list(text: str) -> list[int]:
    """``0-3,5`` -> [0, 1, 2, 3, 5] (the kernel's cpulist format; empty -> [])."""
    out: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return sorted(set(out))


def mask_list(text: str) -> list[int]:
    """``3`` or ``00000000,00000003`` (a hex CPU mask) -> [0, 1]; empty -> []."""
    digits = text.strip().replace(",", "")
    if not digits:
        return []
    value = int(digits, 16)
    return [c for c in range(value.bit_length()) if value >> c & 1]


def online_cpus() -> list[int]:
    text = _read(SYS_CPU / "online")
    return cpu_list(text) if text else sorted(os.sched_getaffinity(0))


def _hypervisor() -> tuple[bool, str]:
    flags = ""
    for line in _read(PROC / "cpuinfo").splitlines():
        if line.startswith(("flags", "Features")):
            flags = line
            break
    xen = _read("/sys/hypervisor/type")
    vm = " hypervisor" in flags or bool(xen) or Path("/proc/device-tree/hypervisor").exists()
    if not vm:
        return False, "none"
    clocks = _read(SYS_CPU.parent / "clocksource/clocksource0/available_clocksource")
    for word, name in (("kvm-clock", "KVM"), ("hyperv", "Hyper-V"), ("xen", "Xen"), ("vmware", "VMware")):
        if word in clocks:
            return True, name
    return True, {"xen": "Xen"}.get(xen, "unknown")


def _smt(cpus: list[int]) -> tuple[str, bool, dict[int, list[int]]]:
    siblings = {}
    for c in cpus:
        sib = cpu_list(_read(SYS_CPU / f"cpu{c}/topology/thread_siblings_list") or str(c))
        if len(sib) > 1:
            siblings[c] = sib
    control = _read(SYS_CPU / "smt/control", "unknown")
    active = _read(SYS_CPU / "smt/active", "1" if siblings else "0") == "1"
    return control, active, siblings


def _cpufreq(cpus: list[int]) -> tuple[str, dict[int, str]]:
    governors, driver = {}, "none"
    for c in cpus:
        base = SYS_CPU / f"cpu{c}/cpufreq"
        governors[c] = _read(base / "scaling_governor", "none")
        driver = _read(base / "scaling_driver", driver) or driver
    return driver, governors


def _cmdline() -> dict[str, str]:
    keys = ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity", "idle", "intel_idle.max_cstate",
            "processor.max_cstate", "nosmt", "threadirqs", "preempt")
    out = {}
    for word in _read(PROC / "cmdline").split():
        key, _, value = word.partition("=")
        if key in keys:
            out[key] = value
    return out


def _irq_counts() -> dict[int, tuple[str, dict[int, int]]]:
    """{irq: (name, {cpu: count})} of the numbered (device) lines of /proc/interrupts."""
    lines = _read(PROC / "interrupts").splitlines()
    if not lines:
        return {}
    cols = [int(c[3:]) for c in lines[0].split() if c.startswith("CPU")]
    out = {}
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if not head.strip().isdigit():
            continue
        parts = rest.split()
        counts = {cpu: int(n) for cpu, n in zip(cols, parts) if n.isdigit()}
        tail = parts[len(cols):]
        name = " ".join(tail[2:]) if len(tail) > 2 else (tail[-1] if tail else "")
        out[int(head)] = (name, counts)
    return out


def _irqs(counts: dict[int, tuple[str, dict[int, int]]]) -> list[Irq]:
    out = []
    for irq, (name, n) in sorted(counts.items()):
        if not name:
            continue
        base = PROC / "irq" / str(irq)
        affinity = cpu_list(_read(base / "smp_affinity_list"))
        effective = _read(base / "effective_affinity_list")
        out.append(Irq(irq, name, affinity, cpu_list(effective) if effective else affinity, n))
    return out


def _policy(pid: int) -> tuple[str, int, int]:
    policy = os.sched_getscheduler(pid) & ~getattr(os, "SCHED_RESET_ON_FORK", 0x40000000)
    return (_POLICIES.get(policy, str(policy)), os.sched_getparam(pid).sched_priority,
            os.getpriority(os.PRIO_PROCESS, pid))


def packet_threads() -> list[PacketThread]:
    """The threaded-NAPI and cpumap kernel threads now, with their CPUs and scheduling."""
    out = []
    for t in cpustat.find_kthreads(PACKET_THREADS):
        try:
            policy, prio, nice = _policy(t.pid)
            out.append(PacketThread(t.pid, t.name, sorted(os.sched_getaffinity(t.pid)), policy, prio, nice))
        except OSError:  # gone meanwhile
            continue
    return out


def perfkit_interfaces(threads: Sequence[PacketThread]) -> list[Interface]:
    """The interfaces of the perfkit testbeds up now and their NAPI mode."""
    out = []
    script = 'cd /sys/class/net && for d in *; do printf "%s %s\\n" "$d" "$(cat "$d/threaded" 2>/dev/null)"; done'
    for rid in topology.running():
        for role in ("tester", "dut"):
            ns = f"{topology.PREFIX}{rid}-{role}"
            try:
                text = netns.run(ns, "sh", "-c", script)
            except Exception:  # noqa: BLE001 - a testbed going down meanwhile: skip it
                continue
            for line in text.splitlines():
                dev, _, threaded = line.partition(" ")
                if dev == "lo" or not dev:
                    continue
                state = {"1": True, "0": False}.get(threaded.strip())
                pids = [t.pid for t in threads if t.name.startswith(f"napi/{dev}-")]
                out.append(Interface(ns, dev, True if pids else state, pids))
    return out


def _loadavg() -> list[float]:
    try:
        return [float(x) for x in _read(PROC / "loadavg").split()[:3]]
    except ValueError:
        return []


def _irqbalance() -> bool:
    for entry in os.scandir(PROC):
        if entry.name.isdigit() and _read(Path(entry.path) / "comm") == "irqbalance":
            return True
    return False


# -- the check -----------------------------------------------------------------------------------
def allowed_cpus() -> list[int]:
    """CPUs the check can measure: online and below the probe's limit (this process's own affinity
    does not matter: the probe arms each CPU from a thread pinned to it)."""
    return [c for c in online_cpus() if c < STALL_MAX_CPUS]


def _validate(seconds: float, cpus: list[int] | None, trial_seconds: float, ring_frames: int,
              fit_pps: float) -> list[int]:
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or not 0 < seconds <= MAX_SECONDS:
        raise ConfigError("seconds", seconds, f"a number of seconds, 0 < seconds <= {MAX_SECONDS:g}")
    if not isinstance(trial_seconds, (int, float)) or not math.isfinite(trial_seconds) or trial_seconds <= 0:
        raise ConfigError("trial_seconds", trial_seconds, "a number of seconds > 0")
    if not isinstance(ring_frames, int) or ring_frames < 1:
        raise ConfigError("ring_frames", ring_frames, "a number of frames >= 1")
    if not isinstance(fit_pps, (int, float)) or not math.isfinite(fit_pps) or fit_pps <= 0:
        raise ConfigError("fit_pps", fit_pps, "a rate in packets/s > 0")
    allowed = allowed_cpus()
    if cpus is None:
        return allowed
    shown = ",".join(str(c) for c in cpus) if isinstance(cpus, (list, tuple)) else cpus
    if (not isinstance(cpus, (list, tuple)) or not cpus or len(set(cpus)) != len(cpus)
            or any(not isinstance(c, int) or c not in allowed for c in cpus)):
        raise ConfigError("cpus", shown, "distinct CPU numbers of " + ",".join(map(str, allowed)))
    return sorted(cpus)


def check_host(seconds: float = 10.0, cpus: list[int] | None = None, progress: bool = False, *,
               trial_seconds: float = TRIAL_SECONDS, ring_frames: int = RING_FRAMES,
               fit_pps: float = FIT_PPS) -> HostCheck:
    """Measure ``cpus`` (default: every CPU this process may use) for ``seconds`` and read the
    host's tuning; see the module doc for the figures and the verdict. ``progress`` writes what it
    is doing to stderr. Needs root (a BPF program). Raises ``ConfigError`` on bad arguments.
    """
    cpus = _validate(seconds, cpus, trial_seconds, ring_frames, fit_pps)
    online = online_cpus()
    vm, hypervisor = _hypervisor()
    smt, smt_active, siblings = _smt(online)
    driver, governors = _cpufreq(online)
    idle = f"{_read(SYS_CPU / 'cpuidle/current_driver', 'none')}/{_read(SYS_CPU / 'cpuidle/current_governor', 'none')}"
    threads = packet_threads()
    interfaces = perfkit_interfaces(threads)

    started = time.time()
    cores, irq_before, irq_after, window = _measure(cpus, seconds, progress, trial_seconds, ring_frames)
    elapsed = (window[1] - window[0]) / 1e9
    irqs = _irqs(irq_after)
    for cc in cores.values():
        cc.irq_per_s = _irq_rates(irq_before, irq_after, cc.cpu, elapsed)
    hc = HostCheck(
        kernel=os.uname().release, kernel_version=os.uname().version, vm=vm, hypervisor=hypervisor,
        cpus_online=online, smt=smt, smt_active=smt_active, smt_siblings=siblings, cpufreq_driver=driver,
        governors=governors, idle_driver=idle, isolated=cpu_list(_read(SYS_CPU / "isolated")),
        nohz_full=cpu_list(_read(SYS_CPU / "nohz_full")), cmdline=_cmdline(), irqbalance=_irqbalance(),
        default_irq_affinity=mask_list(_read(PROC / "irq/default_smp_affinity")) or online,
        irqs=irqs, packet_threads=threads, interfaces=interfaces, period_us=PERIOD_US,
        threshold_us=THRESHOLD_US, seconds=elapsed, load_average=_loadavg(), time=started, window_ns=window,
        cores=cores,
        verdict=verdict(cores, fit_pps=fit_pps, trial_seconds=trial_seconds, ring_frames=ring_frames))
    hc.verdict.notes = host_notes(hc, trial_seconds)
    return hc


def _measure(cpus: list[int], seconds: float, progress: bool, trial_seconds: float, ring_frames: int):
    say = (lambda s: (sys.stderr.write(s), sys.stderr.flush())) if progress else (lambda s: None)
    say(f"host check: CPUs {','.join(map(str, cpus))} for {seconds:g} s (a timer every {PERIOD_US:g} µs) ...")
    with StallProbe(cpus, PERIOD_US, THRESHOLD_US - PERIOD_US / 2) as probe:
        time.sleep(0.05)  # the first tick of every timer
        stats0 = probe.per_cpu()
        proc0 = cpustat.read_proc_stat()
        irq0 = _irq_counts()
        mark = probe.mark()
        end = mark.t_ns + int(seconds * 1e9)
        speeds: dict[int, list[float]] = {c: [] for c in cpus}
        last = probe.per_cpu()
        while (left := end - time.monotonic_ns()) > 0:
            time.sleep(min(left / 1e9, SPEED_WINDOW_S))
            window = probe.since(mark)  # drains the probe's ring buffer as it goes
            now = probe.per_cpu()
            for c in cpus:
                if c in now and c in last and now[c].speed_probes > last[c].speed_probes:
                    speeds[c].append((now[c].speed_ns - last[c].speed_ns)
                                     / (now[c].speed_probes - last[c].speed_probes) / probe.speed_steps)
            last = now
            if progress:
                n = sum(1 for s in window.values() for e in s.events if e.kind == "tick")
                say(f"\rhost check: {(time.monotonic_ns() - mark.t_ns) / 1e9:4.1f} / {seconds:g} s, "
                    f"{n} gaps > {THRESHOLD_US:g} µs so far ")
        window = probe.since(mark)
        end_ns = time.monotonic_ns()
        elapsed = (end_ns - mark.t_ns) / 1e9
        stats1, proc1, irq1 = probe.per_cpu(), cpustat.read_proc_stat(), _irq_counts()
    say("\n")
    cores = {}
    for c in cpus:
        ticks = [e for e in window[c].events if e.kind == "tick"]
        a, b = stats0.get(c), stats1.get(c)
        cores[c] = CoreCheck.from_gaps(
            c, elapsed, [e.length_us(PERIOD_US) for e in ticks], [e.end_ns for e in ticks],
            ticks=int(b.ticks - a.ticks) if a and b else 0, steal_us=window[c].steal_us,
            proc_steal_us=(proc1.get(c, {}).get("steal", 0) - proc0.get(c, {}).get("steal", 0)) * 1e6 / cpustat.CLK_TCK,
            lost_events=int(b.lost_events - a.lost_events) if a and b else 0, trial_seconds=trial_seconds,
            ring_frames=ring_frames)
        cores[c].speed_ns_per_step, cores[c].speed_spread = speed_figures(speeds[c])
    return cores, irq0, irq1, (mark.t_ns, end_ns)


def speed_figures(window_ns_per_step: Sequence[float]) -> tuple[float | None, float | None]:
    """(median, (p90 - p10) / median) of a CPU's speed over windows [ns per step, 1]; None without
    at least three windows."""
    if len(window_ns_per_step) < 3:
        return None, None
    q10, q50, q90 = np.quantile(np.asarray(window_ns_per_step), [0.1, 0.5, 0.9])
    return float(q50), float((q90 - q10) / q50)


def _irq_rates(before: dict, after: dict, cpu: int, seconds: float) -> dict[str, float]:
    out = {}
    for irq, (name, counts) in after.items():
        n = counts.get(cpu, 0) - before.get(irq, ("", {}))[1].get(cpu, 0)
        if n > 0 and name:
            out[name] = round(n / seconds, 1) if seconds > 0 else 0.0
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


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
    one = f"{'>=' if bound else '~'}{_mpps(worst.one_per_trial_pps)}"
    at = f"{_mpps(fit_pps)} per core"
    ring = f"a {ring_frames}-frame ring"
    if fit and bound:
        text = (f"fit for zero-loss measurements at {at}: fewer than one gap longer than {threshold_us:g} µs per "
                f"{trial_seconds:g} s trial on every core, so host stalls do not overflow {ring} below {one} per core")
    elif not fit and clean_bound:
        text = (f"cannot tell at {at}: no gap longer than {threshold_us:g} µs limits zero loss below "
                f"{_mpps(clean)} per core, and faster rates need shorter gaps than the timer resolves")
    else:
        text = (f"{'fit' if fit else 'NOT fit'} for zero-loss measurements at {at}: zero loss is reproducible "
                f"(at most 1 trial in 10 meets a stall that overflows {ring}) up to {'>=' if clean_bound else '~'}"
                f"{_mpps(clean)} per core; one such stall per {trial_seconds:g} s trial is expected from {one} per "
                f"core (CPU {worst.cpu}: {worst.per_min_1ms:.1f} gaps > 1 ms a minute, longest {_ms(worst.longest_us)})")
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
