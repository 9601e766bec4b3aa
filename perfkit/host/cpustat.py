"""CPU use from ``/proc``: per CPU and mode (``/proc/stat``) and per kernel thread (``/proc/<pid>/stat``).

The trial code takes a snapshot before and after the traffic and asks for the difference::

    from perfkit.host import cpustat

    snap = cpustat.snapshot(kthreads=["napi/dut-*", "cpumap/*"])   # kthreads: optional patterns
    ...                                                              # traffic
    d = cpustat.delta(snap, cpustat.snapshot(kthreads=["napi/dut-*", "cpumap/*"]))
    d.busy([1, 2])        # {1: 0.97, 2: 0.41}   busy fraction per CPU (0..1)
    d.dut_cpu([1, 2])     # {"1": 0.97, "2": 0.41} the same, keyed as TrialResult.dut_cpu wants
    d.frame()             # tidy DataFrame, one row per cpu x mode (see below)
    d.kthread_busy()      # {"napi/dut0-8193": 0.62, "cpumap/1/map:5": 0.3}  busy fraction per thread

Definitions
-----------
- *modes* are the columns of a ``cpuN`` line of ``/proc/stat``: ``user nice system idle iowait irq
  softirq steal`` (``MODES``; guest time is already inside ``user``/``nice`` and is not counted twice).
- *busy fraction* of a CPU = 1 - (idle + iowait) / (sum of all modes), all as deltas between the two
  snapshots. The denominator is the CPU's own accounted time, not the wall clock, so a CPU that was
  offline for part of the window is not diluted. ``/proc/stat`` counts in clock ticks (``USER_HZ``,
  normally 100 per second): a 1 s window resolves 1 %. A CPU with no ticks in the window gets
  ``nan`` (the window was too short to say anything).
- *busy fraction* of a kernel thread = (utime + stime) delta / wall-clock time between the snapshots
  (0..1 for a single thread). Threads are found by name with shell-style patterns matched against
  ``/proc/<pid>/comm`` (``napi/<dev>-<napi id>`` for threaded NAPI, ``cpumap/<cpu>/map:<id>`` for
  cpumap kthreads, ``ksoftirqd/*`` ...). A thread that appears between the snapshots counts from its
  start; one that disappears is left out (its last times are unknown).

DataFrame columns of ``CpuDelta.frame()`` (one row per cpu x mode, cpus ascending, modes in ``MODES`` order):

==========  =========  ================================================================
column      dtype      meaning
==========  =========  ================================================================
cpu         int        logical CPU number (``cpuN`` in /proc/stat)
mode        str        one of ``MODES``
seconds     float      CPU time spent in the mode between the snapshots [s]
fraction    float      ``seconds`` / total accounted time of that CPU (modes of a cpu sum to 1)
busy        bool       True for the modes counted as busy (all but idle and iowait)
==========  =========  ================================================================

``CpuDelta.kthread_frame()`` has one row per thread: ``pid`` (int), ``name`` (str), ``cpu`` (int,
the CPU it last ran on), ``seconds`` (float, utime + stime [s]), ``utime_s``, ``stime_s`` and
``fraction`` (float, ``seconds`` / wall-clock window).
"""
from __future__ import annotations

import fnmatch
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence


from perfkit.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

#: The modes of a ``cpuN`` line of /proc/stat, in file order (guest, guest_nice are left out: they
#: are already included in user and nice).
MODES: tuple[str, ...] = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
#: Modes that are not busy time.
IDLE_MODES: frozenset[str] = frozenset({"idle", "iowait"})
#: Kernel thread flag in /proc/<pid>/stat (include/linux/sched.h).
PF_KTHREAD = 0x00200000
#: Clock ticks per second of /proc/stat and /proc/<pid>/stat times (USER_HZ).
CLK_TCK: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

PROC = Path("/proc")


@dataclass(frozen=True)
class ThreadTimes:
    """CPU times of one thread at one moment, from ``/proc/<pid>/stat``."""

    pid: int
    name: str
    """``/proc/<pid>/comm`` (e.g. ``napi/dut0-8193``)."""
    utime: int
    """User time [clock ticks]."""
    stime: int
    """System time [clock ticks]."""
    start: int
    """Start time after boot [clock ticks]."""
    cpu: int
    """CPU the thread last ran on."""
    kernel: bool
    """True for a kernel thread (PF_KTHREAD)."""


@dataclass(frozen=True)
class CpuSnapshot:
    """Counters of every CPU (and optionally of some kernel threads) at one moment."""

    time: float
    """Unix time [s] of the snapshot."""
    monotonic: float
    """``time.monotonic()`` [s] at the snapshot (used for the wall-clock window)."""
    uptime: float
    """Seconds since boot (``CLOCK_BOOTTIME``), to tell threads started after the snapshot."""
    ticks: Mapping[int, Mapping[str, int]]
    """{cpu: {mode: clock ticks since boot}}."""
    threads: Mapping[int, ThreadTimes] = field(default_factory=dict)
    """{pid: times} of the threads selected by ``kthreads`` patterns."""
    patterns: tuple[str, ...] = ()
    """The kthread name patterns this snapshot looked for."""
    clk_tck: int = CLK_TCK

    @property
    def cpus(self) -> list[int]:
        return sorted(self.ticks)


@dataclass(frozen=True)
class CpuDelta:
    """What happened between two snapshots: CPU seconds per cpu and mode, and per thread."""

    start: float
    """Unix time [s] of the first snapshot."""
    end: float
    """Unix time [s] of the second snapshot."""
    wall: float
    """Wall-clock length of the window [s] (monotonic clock)."""
    seconds: Mapping[int, Mapping[str, float]]
    """{cpu: {mode: CPU seconds in the window}} for the CPUs present in both snapshots."""
    threads: Mapping[int, tuple[ThreadTimes, float, float]] = field(default_factory=dict)
    """{pid: (times at the end, utime delta [s], stime delta [s])}."""

    @property
    def cpus(self) -> list[int]:
        return sorted(self.seconds)

    def total(self, cpu: int) -> float:
        """Accounted CPU seconds of ``cpu`` in the window (all modes)."""
        return float(sum(self._cpu(cpu).values()))

    def fraction(self, cpu: int, mode: str) -> float:
        """Share of ``cpu``'s time spent in ``mode`` (0..1; nan if no ticks were accounted)."""
        mode = normalize_mode(mode)
        total = self.total(cpu)
        return self._cpu(cpu)[mode] / total if total > 0 else math.nan

    def busy(self, cpus: Iterable[int] | None = None) -> dict[int, float]:
        """{cpu: busy fraction 0..1} for ``cpus`` (default: all); nan for a CPU without ticks."""
        out: dict[int, float] = {}
        for cpu in (self.cpus if cpus is None else [int(c) for c in cpus]):
            modes = self._cpu(cpu)
            total = sum(modes.values())
            idle = sum(modes[m] for m in IDLE_MODES)
            out[cpu] = (total - idle) / total if total > 0 else math.nan
        return out

    def dut_cpu(self, cpus: Iterable[int]) -> dict[str, float]:
        """``busy(cpus)`` keyed by cpu number as a string: what ``TrialResult.dut_cpu`` holds."""
        return {str(c): v for c, v in self.busy(cpus).items()}

    def frame(self, cpus: Iterable[int] | None = None) -> pd.DataFrame:
        import pandas as pd   # here: a lab host's agent accounts CPU time without pandas
        """Tidy frame: one row per cpu x mode (columns in the module docstring)."""
        rows = []
        for cpu in (self.cpus if cpus is None else sorted(int(c) for c in cpus)):
            modes = self._cpu(cpu)
            total = sum(modes.values())
            for mode in MODES:
                rows.append({"cpu": cpu, "mode": mode, "seconds": modes[mode],
                             "fraction": modes[mode] / total if total > 0 else math.nan,
                             "busy": mode not in IDLE_MODES})
        return pd.DataFrame(rows, columns=["cpu", "mode", "seconds", "fraction", "busy"])

    def kthread_busy(self) -> dict[str, float]:
        """{thread name: busy fraction 0..1} of the threads found in both snapshots.

        Two threads with the same name are told apart as ``name[pid]``.
        """
        names = [t.name for t, _, _ in self.threads.values()]
        out: dict[str, float] = {}
        for pid, (t, ut, st) in sorted(self.threads.items()):
            key = t.name if names.count(t.name) == 1 else f"{t.name}[{pid}]"
            out[key] = (ut + st) / self.wall if self.wall > 0 else math.nan
        return out

    def kthread_frame(self) -> pd.DataFrame:
        import pandas as pd
        """One row per thread (columns in the module docstring)."""
        rows = [{"pid": pid, "name": t.name, "cpu": t.cpu, "seconds": ut + st, "utime_s": ut,
                 "stime_s": st, "fraction": (ut + st) / self.wall if self.wall > 0 else math.nan}
                for pid, (t, ut, st) in sorted(self.threads.items())]
        return pd.DataFrame(rows, columns=["pid", "name", "cpu", "seconds", "utime_s", "stime_s",
                                           "fraction"])

    def _cpu(self, cpu: int) -> Mapping[str, float]:
        try:
            return self.seconds[int(cpu)]
        except (KeyError, ValueError, TypeError):
            raise ConfigError("cpu", cpu, f"a CPU present in both snapshots: {self.cpus}") from None


# -- mode names ----------------------------------------------------------------------------------
#: Other spellings of the modes (top's two-letter names, mpstat's %-less names) -> ``MODES``.
MODE_ALIASES: dict[str, str] = {
    "us": "user", "ni": "nice", "sy": "system", "sys": "system", "id": "idle", "wa": "iowait",
    "hi": "irq", "hardirq": "irq", "si": "softirq", "soft": "softirq", "st": "steal",
    "iowait": "iowait", "user": "user", "nice": "nice", "system": "system", "idle": "idle",
    "irq": "irq", "softirq": "softirq", "steal": "steal",
}


def normalize_mode(mode: str) -> str:
    """The ``MODES`` name of ``mode`` (accepts ``MODE_ALIASES``, any case)."""
    try:
        return MODE_ALIASES[str(mode).strip().lower().lstrip("%")]
    except KeyError:
        raise ConfigError("mode", mode, MODES) from None


# -- reading /proc -------------------------------------------------------------------------------
def read_proc_stat(proc: Path = PROC) -> dict[int, dict[str, int]]:
    """{cpu: {mode: ticks}} from ``/proc/stat`` (the aggregate ``cpu`` line is skipped)."""
    out: dict[int, dict[str, int]] = {}
    with open(Path(proc) / "stat") as f:
        for line in f:
            parts = line.split()
            if not parts or not parts[0].startswith("cpu"):
                if out:
                    break          # the cpuN lines are contiguous at the top
                continue
            if parts[0] == "cpu":
                continue           # the aggregate line
            values = [int(v) for v in parts[1:1 + len(MODES)]]
            values += [0] * (len(MODES) - len(values))   # old kernels have fewer columns
            out[int(parts[0][3:])] = dict(zip(MODES, values))
    return out


def _read_thread(stat_path: Path) -> ThreadTimes | None:
    try:
        text = stat_path.read_text()
        comm_path = stat_path.with_name("comm")
        name = comm_path.read_text().rstrip("\n")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = text[text.rfind(")") + 2:].split()
    # rest[0] is field 3 (state) of proc(5): field N is rest[N - 3].
    return ThreadTimes(pid=int(text[:text.index(" ")]), name=name, utime=int(rest[11]),
                       stime=int(rest[12]), start=int(rest[19]), cpu=int(rest[36]),
                       kernel=bool(int(rest[6]) & PF_KTHREAD))


def find_threads(patterns: str | Sequence[str], kernel_only: bool = True,
                 proc: Path = PROC) -> list[ThreadTimes]:
    """Threads whose name (``/proc/<pid>/comm``) matches any of the shell ``patterns``.

    ``kernel_only`` (default) keeps only kernel threads, which all have their own ``/proc/<pid>``;
    with ``kernel_only=False`` the threads of user processes (``/proc/<pid>/task/<tid>``) are
    searched too. Sorted by pid.
    """
    pats = _patterns(patterns)
    found: dict[int, ThreadTimes] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        stats = [Path(entry.path) / "stat"]
        if not kernel_only:
            try:
                stats = [Path(t.path) / "stat" for t in os.scandir(Path(entry.path) / "task")]
            except (FileNotFoundError, PermissionError):
                continue
        for stat in stats:
            t = _read_thread(stat)
            if t is None or (kernel_only and not t.kernel):
                continue
            if any(fnmatch.fnmatchcase(t.name, p) for p in pats):
                found[t.pid] = t
    return [found[p] for p in sorted(found)]


def runtime_ns(pids: Iterable[int], proc: Path = PROC) -> dict[int, int]:
    """CPU time each thread has run [ns], from ``/proc/<pid>/schedstat`` (CONFIG_SCHED_INFO): exact,
    unlike the tick-sampled ``utime``/``stime``, and without the time the hypervisor stole (the
    scheduler's task clock leaves it out). Threads that are gone are left out."""
    out = {}
    for pid in pids:
        try:
            out[pid] = int((proc / str(pid) / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return out


def timeslices(pids: Iterable[int], proc: Path = PROC) -> dict[int, int]:
    """How many times each thread was put on a CPU, from ``/proc/<pid>/schedstat`` (its third field,
    CONFIG_SCHED_INFO): every wake-up, and every return after a preemption. A packet thread that
    sleeps between packets pays each wake-up in CPU time. Threads that are gone are left out."""
    out = {}
    for pid in pids:
        try:
            out[pid] = int((proc / str(pid) / "schedstat").read_text().split()[2])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return out


def find_kthreads(patterns: str | Sequence[str], proc: Path = PROC) -> list[ThreadTimes]:
    """Kernel threads whose name matches a pattern, e.g. ``find_kthreads(["napi/dut-*", "cpumap/*"])``."""
    return find_threads(patterns, kernel_only=True, proc=proc)


def _patterns(patterns: str | Sequence[str]) -> tuple[str, ...]:
    pats = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    if not pats or not all(isinstance(p, str) and p for p in pats):
        raise ConfigError("kthread patterns", patterns,
                          "one or more non-empty shell patterns, e.g. 'napi/dut-*', 'cpumap/*'")
    return pats


def _uptime() -> float:
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):
        return float(Path("/proc/uptime").read_text().split()[0])


# -- public API ----------------------------------------------------------------------------------
def snapshot(kthreads: str | Sequence[str] = (), *, kernel_only: bool = True, proc: Path = PROC) -> CpuSnapshot:
    """Counters of every CPU now, plus the kernel threads matching ``kthreads`` (shell patterns).

    ``kernel_only=False`` also matches the threads of user processes (see ``find_threads``).
    """
    pats = _patterns(kthreads) if kthreads else ()
    threads = {t.pid: t for t in find_threads(pats, kernel_only, proc)} if pats else {}
    return CpuSnapshot(time=time.time(), monotonic=time.monotonic(), uptime=_uptime(),
                       ticks=read_proc_stat(proc), threads=threads, patterns=pats)


def delta(before: CpuSnapshot, after: CpuSnapshot) -> CpuDelta:
    """The CPU seconds spent between ``before`` and ``after`` (taken in that order)."""
    if after.monotonic < before.monotonic:
        raise ConfigError("snapshots", "after is older than before", "delta(before, after) in time order")
    tck = float(before.clk_tck)
    seconds = {cpu: {m: max(0, after.ticks[cpu][m] - before.ticks[cpu][m]) / tck for m in MODES}
               for cpu in before.ticks if cpu in after.ticks}
    threads: dict[int, tuple[ThreadTimes, float, float]] = {}
    for pid, t in after.threads.items():
        b = before.threads.get(pid)
        if b is not None and b.start == t.start:
            threads[pid] = (t, (t.utime - b.utime) / tck, (t.stime - b.stime) / tck)
        elif b is None and t.start >= int(before.uptime * tck) and before.patterns:
            threads[pid] = (t, t.utime / tck, t.stime / tck)   # started inside the window
    return CpuDelta(start=before.time, end=after.time, wall=after.monotonic - before.monotonic,
                    seconds=seconds, threads=threads)
