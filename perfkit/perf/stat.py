"""``perf stat`` of the DUT cores during a trial: counters per core (seed 003 reports cycles per
packet, cache misses and context switches per core).

``PerfCounter(cpus)`` is a context manager around one trial::

    with PerfCounter(gen.dut_cores) as counter:
        result = gen.measure(rate_pps, duration)
    counts = counter.counts          # a PerfCounts: per CPU, per event, a number or NOT_AVAILABLE

- ``perf stat -A -x, -C <cpus> -e <EVENTS>``, counting (no sampling: no interrupt per event), its
  events enabled for the trial only (``perfkit.perf.session``). perf itself runs where the caller
  may run: off the DUT cores.
- Software events are always there: context switches and CPU migrations.
- Hardware events (cycles, instructions, cache misses) need a PMU. Most VMs, this one included, have
  none: perf answers ``<not supported>``, and the count is ``NOT_AVAILABLE``, in words, never 0.
  Cycles per packet (``PerfCounts.per_packet``) is then None, with the reason beside it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from perfkit.perf.session import PerfSession
from perfkit.perf.tools import PerfError, check_available

#: Counted on every trial: software events first (always there), then the PMU's.
SOFTWARE_EVENTS = ("context-switches", "cpu-migrations")
HARDWARE_EVENTS = ("cycles", "instructions", "cache-misses")
EVENTS = SOFTWARE_EVENTS + HARDWARE_EVENTS
#: A count perf could not take: the CPU (a VM's) exposes no such event.
NOT_AVAILABLE = "not available"
_UNCOUNTED = ("<not supported>", "<not counted>")


@dataclass
class PerfCounts:
    """What ``perf stat`` counted on each CPU while a trial ran."""

    per_cpu: dict[str, dict[str, float | str]] = field(default_factory=dict)
    """CPU (as text) -> event -> count, or ``NOT_AVAILABLE``."""

    def total(self, event: str) -> float | str:
        """The event summed over the CPUs, or ``NOT_AVAILABLE`` if any CPU could not count it."""
        values = [c.get(event, NOT_AVAILABLE) for c in self.per_cpu.values()]
        if not values or any(isinstance(v, str) for v in values):
            return NOT_AVAILABLE
        return float(sum(values))  # type: ignore[arg-type]

    def per_packet(self, event: str, packets: int) -> float | None:
        """The event per packet over all CPUs; None when it was not available or no packet was seen."""
        total = self.total(event)
        return None if isinstance(total, str) or packets <= 0 else total / packets


def parse(text: str) -> PerfCounts:
    """``perf stat -A -x,`` output: ``CPU1,<count>,<unit>,<event>,...`` lines."""
    out: dict[str, dict[str, float | str]] = {}
    for line in text.splitlines():
        cols = line.split(",")
        if len(cols) < 4 or not cols[0].startswith("CPU") or not cols[0][3:].isdigit():
            continue
        cpu, value, event = cols[0][3:], cols[1].strip(), cols[3].strip()
        if value in _UNCOUNTED:
            out.setdefault(cpu, {})[event] = NOT_AVAILABLE
            continue
        try:
            out.setdefault(cpu, {})[event] = float(value)
        except ValueError:
            continue
    return PerfCounts(out)


class PerfCounter(PerfSession):
    """``perf stat`` of ``cpus`` around a block (see the module doc); ``counts`` after a clean exit."""

    command, activity = "stat", "counting"

    def __init__(self, cpus: Iterable[int], events: Iterable[str] = EVENTS):
        super().__init__(cpus)
        self.events = tuple(events)
        self.counts: PerfCounts | None = None

    def keep(self, result: PerfCounts) -> None:
        self.counts = result

    def start(self) -> None:
        tools = check_available(fold=False)
        self.launch(tools["setpriv"], [tools["perf"], "stat", "-A", "-x,", "-C", ",".join(map(str, self.cpus)),
                                       "-e", ",".join(self.events)])

    def stop(self) -> PerfCounts:
        """Disable the events, stop perf and read what it counted."""
        if not self.running:
            raise PerfError("this PerfCounter is not counting")
        try:
            self.disable()
            self.finish()
            counts = parse(self.stderr_text())
        except BaseException:
            self.abort()
            raise
        self.close()
        if not counts.per_cpu:
            raise PerfError(f"perf stat counted nothing on CPUs {self.cpus}: {self.stderr_line()}")
        return counts


def trial_counter(cpus: Iterable[int]) -> PerfCounter | None:
    """A counter for one trial on ``cpus``, or None where perf cannot run (not installed)."""
    try:
        check_available(fold=False)
    except PerfError:
        return None
    return PerfCounter(cpus)


def perf_stat_fields(counts: PerfCounts | None, packets: int) -> dict[str, object]:
    """A trial's fields from what ``perf stat`` counted on the DUT cores over ``packets`` packets the
    DUT processed (none when it was not run)."""
    if counts is None:
        return {}
    return {"dut_perf_counts": counts.per_cpu, "dut_cycles_per_packet": counts.per_packet("cycles", packets)}
