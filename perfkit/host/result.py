"""What a host check returns (``HostCheck``, its ``Verdict``) and how it reads: JSON and one line.

Fields of ``to_dict()``: every dataclass field below, with ``cores`` keyed by CPU number as a
string (as ``TrialResult.stalls`` is) and each core's derived figures (``per_min_*``,
``steal_pct``, ``expected_per_trial``) included.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from perfkit.host.gaps import CoreCheck
from perfkit.host.irqs import Irq
from perfkit.host.packetthreads import Interface, PacketThread


@dataclass
class Verdict:
    """The verdict on the measured cores (``perfkit.host.verdict.verdict``)."""

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
    """The result of ``perfkit.host.check.check_host``."""

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
                f"{w.per_min_1ms:.1f} stalls/min > 1 ms, longest {ms_text(w.longest_us)}, steal {w.steal_pct:.2f} %")
        if v.fit and v.bound:
            return (f"{head}; fit for zero-loss: no stall overflows a {v.ring_frames}-frame ring below "
                    f"{mpps_text(v.one_per_trial_pps)} per core")
        clean_bound = all(c.clean_bound for c in self.cores.values())
        return (f"{head}; zero loss reproducible up to {'>=' if clean_bound else '~'}{mpps_text(v.clean_pps)} per core, "
                f"one overflowing stall per {v.trial_seconds:g} s trial from {'>=' if v.bound else '~'}"
                f"{mpps_text(v.one_per_trial_pps)} ({v.ring_frames}-frame ring): "
                + ("fit" if v.fit else "NOT fit") + f" at {mpps_text(v.fit_pps)}")


def ms_text(us: float) -> str:
    """A gap for people: ``1.2 ms``, ``350 µs``."""
    return f"{us / 1e3:.1f} ms" if us >= 1000 else f"{us:.0f} µs"


def mpps_text(pps: float) -> str:
    """A rate for people: ``0.26 Mpps``, ``2.56 Mpps``."""
    return f"{pps / 1e6:.2g} Mpps" if pps < 1e6 else f"{pps / 1e6:.3g} Mpps"
