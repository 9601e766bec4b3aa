"""The stall probe: moments when a CPU, or a DUT packet thread, could not run (``bpf/stallprobe.bpf.c``).

On a VM the host takes a vCPU away for 1-4 ms a few times a minute. A DUT thread that does not run
for that long overflows its 256-frame receive ring at a few hundred kpps, and the loss looks like
the DUT's. ``StallProbe`` measures two things per CPU, both in kernel time (CLOCK_MONOTONIC):

- **tick gaps**: a BPF timer pinned to the CPU ticks every ``period_us``; a tick that comes late
  by more than ``report_us`` is a stall of the CPU itself (the vCPU was away, or interrupts were
  off). The stall began somewhere in the period before, so its length is taken as the middle of
  what the tick covers, ± half a period (``Stall.length_us``); a stall shorter than ``period_us +
  report_us`` may end before any tick is late enough to count it. Late ticks back to back are one
  stall: a tick can get through in the middle of one while threads still do not run. With the
  ticks, the hypervisor's steal clock (KVM ``steal_time``), exact to the nanosecond, says how much
  of it the host took. What of the gap the watched packet threads ran, less what the steal clock
  gives the host, is left out: at full load a real-time packet thread keeps the timer's softirq
  from running (gaps of 10-60 ms with no steal were seen on a saturated calibrated DUT's core),
  and its packets were processed all along.
- **thread waits**: for watched threads (the DUT's threaded-NAPI and cpumap kthreads, the sink's
  NAPI threads, all SCHED_FIFO), the time from wake-up or preemption to running that something
  able to keep a real-time thread from its core took: another real-time task (a real-time hog on
  the DUT core delays these and not the timer), or the host (the steal clock). The rest of the wait
  is the DUT's own cost (``Stall.own_us``): several packet threads on one core (the NAPI thread and
  a cpumap kthread of several DUT cores) that wait for each other, and the kernel's throttling of
  real-time threads that would run more than 95 % of a second (the DUT at full load: ordinary
  tasks or nothing run for 50 ms; seen as 50 ms waits on a saturated calibrated DUT's core).

- **speed**: about every ``SPEED_PERIOD_US``, a tick also times a fixed piece of work (``speed_steps`` steps of the calibrated
  DUT's kind). A vCPU the host shares with other guests runs slower without stopping, and a
  CPU-bound DUT forwards proportionally less: the probe's time per step is the CPU's speed where
  the DUT runs (``CpuStalls.speed_ns_per_step``).

``probe.mark()`` at a trial's start and ``probe.since(mark)`` at its end give one ``CpuStalls``
per probed CPU for that window; ``evidence`` turns them into a trial's fields. What a trial makes
of them (stalled, disturbed) is ``perfkit.host.disturbance``.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable

from perfkit.errors import PerfkitError
from perfkit.layouts import STALL_MAX_CPUS, StallKind, stall_config, stall_cpu, stall_event, stall_watch
from perfkit.libbpf import BpfObject, RingBuffer
from perfkit.testbed.bpfbuild import object_path

PROGRAM = "stallprobe"
#: Timer period and stall threshold of trials. A 256-frame ring lasts ~0.5-1 ms at the rates of
#: a CPU-bound DUT; a tick costs the probed CPU ~20 µs on a KVM guest (the timer interrupt and its
#: re-arming are exits to the hypervisor, plus the speed probe's share; ``bench/probe_cost.py``),
#: taken from the DUT's packet threads: 5000 ticks a second slowed the DUT by 9-11 %, 2000 by ~4 %.
#: At 500 µs a stall is known to ± 250 µs, and one under 600 µs may go unseen.
TRIAL_PERIOD_US, TRIAL_REPORT_US = 500.0, 100.0
#: Steps of the speed probe, and the time from one probe to the next [µs] (a whole number of ticks
#: of both the trials' and the host check's timer): about 11 µs every 1.5 ms, 0.7 % of a core (see
#: ``bpf/stallprobe.bpf.c`` for why long and sparse).
SPEED_STEPS, SPEED_PERIOD_US = 1024, 1500.0


@dataclass(frozen=True)
class Stall:
    """One stall: ``gap_us`` without a tick (``tick``), or a watched thread waiting (``wait``)."""

    cpu: int
    kind: str
    """``tick`` (the CPU did not run) or ``wait`` (a watched thread was runnable, not running)."""
    end_ns: int
    """CLOCK_MONOTONIC [ns] at its end (``time.monotonic_ns()``'s clock)."""
    gap_us: float
    """Its length [µs]; for ``tick``, the timer period included."""
    steal_us: float
    """Of which the hypervisor reported as stolen [µs] (0 when not a KVM guest); for a ``wait``,
    the rest of ``gap_us`` is other real-time tasks' run."""
    own_us: float = 0.0
    """For a ``wait``, the part left out of ``gap_us`` [µs]: the DUT's own cost, not a stall (other
    packet threads ran, or the kernel throttled real-time threads at full load); for a ``tick``, how
    long watched threads ran during it, the time the host took while one was current included."""

    @property
    def start_ns(self) -> int:
        return self.end_ns - int(self.gap_us * 1e3)

    def length_us(self, period_us: float) -> float:
        """How long it stalled [µs]: a wait's ``gap_us``; for a tick of a timer with ``period_us``,
        the middle of ``gap_us - period_us`` .. ``gap_us`` (the stall began somewhere in the period
        before the late tick), ± half a period, less the time watched threads ran during it that
        the steal clock does not account for: a timer delayed while the packet threads ran (a
        real-time packet thread at full load keeps the timer's softirq from running for tens of
        ms) was no stall for them. (With no watched threads, as in the host check, the whole gap.)"""
        if self.kind != "tick":
            return self.gap_us
        return max(0.0, self.gap_us - period_us / 2 - max(0.0, self.own_us - self.steal_us))


@dataclass
class CpuStalls:
    """What one CPU went through during a window."""

    cpu: int
    longest_us: float = 0.0
    """Longest time the CPU did not run its timer [µs] (``Stall.length_us``: ± half a period; 0:
    never late)."""
    stalls: int = 0
    """Ticks late by more than the threshold."""
    stalled_us: float = 0.0
    """Sum of those ticks' stalls [µs]."""
    steal_us: float = 0.0
    """Time the hypervisor took from this vCPU [µs] (KVM steal clock; 0 when not a KVM guest)."""
    longest_wait_us: float = 0.0
    """Longest time a watched thread, runnable, was kept from running on this CPU by another
    real-time task or the host [µs] (``Stall.own_us`` left out)."""
    waits: int = 0
    """Such waits longer than the threshold."""
    waited_us: float = 0.0
    """Sum of those waits [µs]."""
    speed_ns_per_step: float | None = None
    """Mean time of one step of the speed probe [ns]: higher is a slower CPU (None: no probe ran)."""
    period_us: float = 0.0
    """The timer's period [µs]: how precisely a stall is known, and what the probe cost the CPU
    (``TRIAL_PERIOD_US``)."""
    events: list[Stall] = field(default_factory=list)

    @property
    def longest_any_us(self) -> float:
        """The longest time packets on this CPU could not be processed [µs]."""
        return max(self.longest_us, self.longest_wait_us)

    def to_dict(self) -> dict[str, float]:
        return {"longest_us": self.longest_us, "stalls": self.stalls, "stalled_us": self.stalled_us,
                "steal_us": self.steal_us, "longest_wait_us": self.longest_wait_us, "waits": self.waits,
                "waited_us": self.waited_us, "speed_ns_per_step": self.speed_ns_per_step, "period_us": self.period_us}


@dataclass(frozen=True)
class Mark:
    """The probe's state at the start of a window."""

    t_ns: int
    steal_ns: dict[int, int]
    speed: dict[int, tuple[int, int]] = field(default_factory=dict)
    """cpu -> (speed_ns, speed_probes) so far."""


class StallProbe:
    """The stall probe armed on ``cpus``; close it (or use ``with``) to stop it."""

    def __init__(self, cpus: Iterable[int], period_us: float = TRIAL_PERIOD_US, report_us: float = TRIAL_REPORT_US,
                 speed_steps: int = SPEED_STEPS):
        self.cpus = sorted(set(cpus))
        if not self.cpus or max(self.cpus) >= STALL_MAX_CPUS:
            raise PerfkitError(f"stall probe: cpus {self.cpus} (at most cpu {STALL_MAX_CPUS - 1})")
        self.period_us, self.report_us, self.speed_steps = period_us, report_us, speed_steps
        speed_every = max(1, round(SPEED_PERIOD_US / period_us))
        self.obj = BpfObject(object_path(PROGRAM))
        self._events: list[Stall] = []
        self._last_tick: dict[int, int] = {}
        """CPU -> index of its last tick event in ``_events`` (``_add`` joins the next one to it)."""
        try:
            self.obj.map("probe_config").update(ctypes.c_uint32(0), stall_config(int(period_us * 1e3),
                                                                                   int(report_us * 1e3), speed_steps,
                                                                                   speed_every))
            self.obj.attach("stall_wakeup")
            self.obj.attach("stall_switch")
            self.obj.attach("stall_irq")
            self._stats = self.obj.map("stall_cpu")
            self._ring = RingBuffer(self.obj.map("stall_events"))
            self._watched = self.obj.map("watched")
            for cpu in self.cpus:
                self._arm(cpu)
        except BaseException:
            self.close()
            raise

    def _arm(self, cpu: int) -> None:
        """Start the timer of ``cpu``: the arming program runs on the CPU of the thread calling it."""
        prog = self.obj.program("stall_arm")
        out: list[BaseException | int] = []

        def arm() -> None:
            try:
                os.sched_setaffinity(0, {cpu})
                out.append(prog.test_run(bytes(64)).retval)
            except BaseException as err:  # noqa: BLE001 - handed to the caller
                out.append(err)

        t = threading.Thread(target=arm, name=f"stall-arm-{cpu}")
        t.start()
        t.join()
        if isinstance(out[0], BaseException):
            raise out[0]
        if out[0] != 2:  # XDP_PASS
            raise PerfkitError(f"stall probe: arming cpu {cpu} failed (verdict {out[0]})")

    # -- watched threads ---------------------------------------------------------------------------
    def watch(self, tids: Iterable[int]) -> None:
        """Measure how long these threads wait to run (kernel thread ids, e.g. the DUT's NAPI threads)."""
        for tid in tids:
            self._watched.update(ctypes.c_uint32(tid), stall_watch())

    def unwatch(self) -> None:
        for key in list(self._watched.keys()):
            self._watched.delete(key)

    # -- reading -----------------------------------------------------------------------------------
    def per_cpu(self) -> dict[int, stall_cpu]:
        """The cumulative per-CPU statistics (only the probed CPUs)."""
        raw = self._stats.lookup(ctypes.c_uint32(0))
        values = self._stats.percpu_values(raw) if raw else []
        return {cpu: stall_cpu.from_buffer_copy(values[cpu][:ctypes.sizeof(stall_cpu)])
                for cpu in self.cpus if cpu < len(values)}

    def _drain(self) -> None:
        for rec in self._ring.drain():
            e = stall_event.from_buffer_copy(rec[:ctypes.sizeof(stall_event)])
            kind = "wait" if e.kind == StallKind.STALL_WAIT else "tick"
            self._add(Stall(int(e.cpu), kind, int(e.end_ns), e.gap_ns / 1e3, e.steal_ns / 1e3, e.own_ns / 1e3))
        horizon = time.monotonic_ns() - 600 * 10**9  # a window longer than 10 minutes is not a trial
        self._events = [e for e in self._events if e.end_ns >= horizon]
        self._last_tick = {e.cpu: i for i, e in enumerate(self._events) if e.kind == "tick"}

    def _add(self, e: Stall) -> None:
        """Keep an event; a late tick that began where its CPU's last late tick ended is the same
        stall, and the two are joined: one tick can get through in the middle of a stall while
        threads still do not run (a busy loop's 1.4 ms gap on this VM was late ticks of 99, 732 and
        620 µs back to back, none stolen)."""
        i = self._last_tick.get(e.cpu)
        last = self._events[i] if i is not None else None
        if e.kind == "tick" and last is not None and abs(e.start_ns - last.end_ns) < self.period_us * 500:
            self._events[i] = Stall(e.cpu, "tick", e.end_ns, last.gap_us + e.gap_us, last.steal_us + e.steal_us,
                                    last.own_us + e.own_us)
            return
        if e.kind == "tick":
            self._last_tick[e.cpu] = len(self._events)
        self._events.append(e)

    def mark(self) -> Mark:
        """The start of a window."""
        self._drain()
        cpus = self.per_cpu()
        return Mark(time.monotonic_ns(), {c: s.last_steal_ns for c, s in cpus.items()},
                    {c: (s.speed_ns, s.speed_probes) for c, s in cpus.items()})

    def since(self, mark: Mark) -> dict[int, CpuStalls]:
        """What each probed CPU went through from ``mark`` to now."""
        self._drain()
        now = time.monotonic_ns()
        out = {c: CpuStalls(c, period_us=self.period_us) for c in self.cpus}
        for c, s in self.per_cpu().items():
            if s.last_steal_ns and mark.steal_ns.get(c):
                out[c].steal_us = (s.last_steal_ns - mark.steal_ns[c]) / 1e3
            ns0, probes0 = mark.speed.get(c, (0, 0))
            if s.speed_probes > probes0 and self.speed_steps:
                out[c].speed_ns_per_step = (s.speed_ns - ns0) / (s.speed_probes - probes0) / self.speed_steps
        for e in self._events:
            if not mark.t_ns < e.end_ns <= now or e.cpu not in out:
                continue
            cs = out[e.cpu]
            cs.events.append(e)
            if e.kind == "tick":
                late = e.length_us(self.period_us)
                if late <= self.report_us:
                    continue  # late behind the packet threads, which ran: no stall for them
                cs.stalls += 1
                cs.stalled_us += late
                cs.longest_us = max(cs.longest_us, late)
            else:
                cs.waits += 1
                cs.waited_us += e.gap_us
                cs.longest_wait_us = max(cs.longest_wait_us, e.gap_us)
        return out

    def close(self) -> None:
        ring = getattr(self, "_ring", None)
        if ring is not None:
            ring.close()
        self.obj.close()  # frees the timers with their map

    def __enter__(self) -> StallProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reference_speed(probe: StallProbe, cpus: Iterable[int], seconds: float = 1.0, window_s: float = 0.25) -> float:
    """The CPUs' speed [ns per step]: over ``seconds``, the median of ``window_s`` windows of each
    CPU's speed probe, averaged over ``cpus`` (a reference for speed normalization)."""
    cpus = list(cpus)
    windows: dict[int, list[float]] = {c: [] for c in cpus}
    for _ in range(max(1, round(seconds / window_s))):
        mark = probe.mark()
        time.sleep(window_s)
        for c, cs in probe.since(mark).items():
            if c in windows and cs.speed_ns_per_step:
                windows[c].append(cs.speed_ns_per_step)
    medians = [sorted(w)[len(w) // 2] for w in windows.values() if w]
    if len(medians) != len(cpus):
        raise PerfkitError(f"speed probe: no measurement on CPUs {cpus}")
    return sum(medians) / len(medians)


def evidence(per_cpu: dict[int, CpuStalls], dut_cores: Iterable[int],
             tester_cores: Iterable[int]) -> dict[str, float]:
    """The ``TrialResult`` fields of a window's stalls: ``stalls``, ``dut_stall_us``, ``tester_stall_us``,
    ``dut_speed_ns_per_step``."""
    def longest(cores: Iterable[int]) -> float:
        return max((per_cpu[c].longest_any_us for c in cores if c in per_cpu), default=0.0)

    speeds = [per_cpu[c].speed_ns_per_step for c in dut_cores if c in per_cpu]
    speed = sum(speeds) / len(speeds) if speeds and None not in speeds else None
    return {"stalls": {str(c): s.to_dict() for c, s in sorted(per_cpu.items())},
            "dut_stall_us": longest(dut_cores), "tester_stall_us": longest(tester_cores),
            "dut_speed_ns_per_step": speed}
