"""Host check: is this machine fit for zero-loss measurements? (``perfkit host check``)

``check_host(seconds, cpus)`` measures every CPU for ``seconds`` with the stall probe
(``perfkit.host.stallprobe``: a BPF timer pinned to each CPU, here every ``PERIOD_US`` = 50 µs), reads what
seed 001 tuned by hand (SMT, frequency governor, IRQ and NAPI affinity, isolated cores, the packet
threads' scheduling class) and ends with a verdict. ``HostCheck.to_dict()`` is JSON-ready (run
metadata), ``HostCheck.summary()`` one line (a report's index page)::

    from perfkit.host.check import check_host

    hc = check_host(10.0)
    hc.verdict.fit, hc.verdict.one_per_trial_pps, hc.cores[1].gaps_1ms
    hc.summary()   # 'host: KVM VM, 2 CPUs, kernel 6.18.44; CPU 1: 3.1 stalls/min > 1 ms, ...'

The pieces: the gaps and the rate formula (``perfkit.host.gaps``), the verdict
(``perfkit.host.verdict``), the result (``perfkit.host.result``), and the readers of the host's
CPUs, interrupts and packet threads (``perfkit.host.cpus``, ``irqs``, ``packetthreads``).
"""
from __future__ import annotations

import math
import os
import sys
import time

from perfkit.errors import ConfigError
from perfkit.generators.xdpcores import RING_FRAMES
from perfkit.host import cpustat
from perfkit.host.cpus import (cpufreq, hypervisor, idle_driver, isolated_cpus, kernel_cmdline, loadavg,
                               nohz_full_cpus, online_cpus, smt)
from perfkit.host.gaps import PERIOD_US, SPEED_WINDOW_S, THRESHOLD_US, TRIAL_SECONDS, CoreCheck, speed_figures
from perfkit.host.irqs import default_irq_affinity, irq_counts, irq_rates, irqbalance_running, irqs
from perfkit.host.packetthreads import packet_threads, perfkit_interfaces
from perfkit.host.result import HostCheck
from perfkit.host.stallprobe import StallProbe
from perfkit.host.verdict import FIT_PPS, host_notes, verdict
from perfkit.layouts import STALL_MAX_CPUS

#: The longest measurement: the probe keeps events for 10 minutes.
MAX_SECONDS = 600.0


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
    vm, kind = hypervisor()
    smt_control, smt_active, siblings = smt(online)
    driver, governors = cpufreq(online)
    idle = idle_driver()
    threads = packet_threads()
    interfaces = perfkit_interfaces(threads)

    started = time.time()
    cores, irq_before, irq_after, window = _measure(cpus, seconds, progress, trial_seconds, ring_frames)
    elapsed = (window[1] - window[0]) / 1e9
    for cc in cores.values():
        cc.irq_per_s = irq_rates(irq_before, irq_after, cc.cpu, elapsed)
    hc = HostCheck(
        kernel=os.uname().release, kernel_version=os.uname().version, vm=vm, hypervisor=kind,
        cpus_online=online, smt=smt_control, smt_active=smt_active, smt_siblings=siblings, cpufreq_driver=driver,
        governors=governors, idle_driver=idle, isolated=isolated_cpus(),
        nohz_full=nohz_full_cpus(), cmdline=kernel_cmdline(), irqbalance=irqbalance_running(),
        default_irq_affinity=default_irq_affinity(online),
        irqs=irqs(irq_after), packet_threads=threads, interfaces=interfaces, period_us=PERIOD_US,
        threshold_us=THRESHOLD_US, seconds=elapsed, load_average=loadavg(), time=started, window_ns=window,
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
        irq0 = irq_counts()
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
        stats1, proc1, irq1 = probe.per_cpu(), cpustat.read_proc_stat(), irq_counts()
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
