"""The host's CPUs as the kernel shows them: which are online, SMT siblings, frequency governors,
idle driver, isolated cores, the kernel parameters that place work on CPUs, and whether this is a VM.

Readers of ``/sys/devices/system/cpu`` and ``/proc``: each returns what it found, or a default
(``none``, ``unknown``, empty) where the kernel does not have the file.
"""
from __future__ import annotations

import os
from pathlib import Path

SYS_CPU = Path("/sys/devices/system/cpu")
PROC = Path("/proc")


def read_text(path: Path | str, default: str = "") -> str:
    """A sysfs or procfs file's text, stripped; ``default`` when it cannot be read."""
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
    """The CPUs online now (this process's affinity when sysfs does not say)."""
    text = read_text(SYS_CPU / "online")
    return cpu_list(text) if text else sorted(os.sched_getaffinity(0))


def isolated_cpus() -> list[int]:
    """CPUs isolated from the scheduler (``isolcpus=``)."""
    return cpu_list(read_text(SYS_CPU / "isolated"))


def nohz_full_cpus() -> list[int]:
    """Tickless CPUs (``nohz_full=``)."""
    return cpu_list(read_text(SYS_CPU / "nohz_full"))


def hypervisor() -> tuple[bool, str]:
    """(runs under a hypervisor, its kind: ``KVM``, ``Xen``, ``Hyper-V``, ``VMware``, ``unknown`` or ``none``)."""
    flags = ""
    for line in read_text(PROC / "cpuinfo").splitlines():
        if line.startswith(("flags", "Features")):
            flags = line
            break
    xen = read_text("/sys/hypervisor/type")
    vm = " hypervisor" in flags or bool(xen) or Path("/proc/device-tree/hypervisor").exists()
    if not vm:
        return False, "none"
    clocks = read_text(SYS_CPU.parent / "clocksource/clocksource0/available_clocksource")
    for word, name in (("kvm-clock", "KVM"), ("hyperv", "Hyper-V"), ("xen", "Xen"), ("vmware", "VMware")):
        if word in clocks:
            return True, name
    return True, {"xen": "Xen"}.get(xen, "unknown")


def smt(cpus: list[int]) -> tuple[str, bool, dict[int, list[int]]]:
    """(SMT control, SMT active, {cpu: its sibling threads} of ``cpus`` that have any)."""
    siblings = {}
    for c in cpus:
        sib = cpu_list(read_text(SYS_CPU / f"cpu{c}/topology/thread_siblings_list") or str(c))
        if len(sib) > 1:
            siblings[c] = sib
    control = read_text(SYS_CPU / "smt/control", "unknown")
    active = read_text(SYS_CPU / "smt/active", "1" if siblings else "0") == "1"
    return control, active, siblings


def cpufreq(cpus: list[int]) -> tuple[str, dict[int, str]]:
    """(frequency scaling driver, {cpu: governor}); ``none`` without cpufreq."""
    governors, driver = {}, "none"
    for c in cpus:
        base = SYS_CPU / f"cpu{c}/cpufreq"
        governors[c] = read_text(base / "scaling_governor", "none")
        driver = read_text(base / "scaling_driver", driver) or driver
    return driver, governors


def idle_driver() -> str:
    """The cpuidle driver and governor, ``driver/governor`` (``none``: the default idle loop)."""
    driver = read_text(SYS_CPU / "cpuidle/current_driver", "none")
    return f"{driver}/{read_text(SYS_CPU / 'cpuidle/current_governor', 'none')}"


def kernel_cmdline() -> dict[str, str]:
    """The kernel parameters that place work on CPUs (isolcpus, nohz_full, rcu_nocbs, irqaffinity, idle ...)."""
    keys = ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity", "idle", "intel_idle.max_cstate",
            "processor.max_cstate", "nosmt", "threadirqs", "preempt")
    out = {}
    for word in read_text(PROC / "cmdline").split():
        key, _, value = word.partition("=")
        if key in keys:
            out[key] = value
    return out


def loadavg() -> list[float]:
    """``/proc/loadavg``: the 1, 5 and 15 minute load averages (empty if unreadable)."""
    try:
        return [float(x) for x in read_text(PROC / "loadavg").split()[:3]]
    except ValueError:
        return []
