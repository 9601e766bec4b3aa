"""The benches' measured figures, with the date and host they were measured on.

A figure that a report page or a command shows is either computed in that run or read from here. A
bench (``bench/<name>.py``) whose figures perfkit quotes records every run it makes (``record``);
the readers show the latest record with its date and host, or say plainly that the bench has not
been run on record (``not_on_record``), never a number from nowhere.

Files, in ``paths.bench_results_dir()`` (``bench/results/`` of the checkout, or
``$PERFKIT_BENCH_RESULTS``):

- ``<name>.jsonl``: one JSON object per run of the bench (``BenchRecord.to_dict``: ``measured_at``,
  ``host`` {hostname, kernel, cpu_model, nproc}, ``git_sha``, ``command``, ``figures``: what the
  bench prints with ``--json``), appended and fsynced (``durable.append_line``); the last line is the
  latest. The history stays, so a figure that moved can be traced to the date, host and commit.
- ``RESULTS.md`` beside that directory (``bench/RESULTS.md``): one dated line per run, for people.

``latest`` takes the last record of a bench, whichever host made it: every text built from it names
that host, so the reader can judge whether it applies to theirs.

What the pages quote: ``probe_tick_cost`` (``perfkit compare``'s caveat about the stall probe's
period, from ``bench/probe_cost.py``) and ``perf_overhead_text`` (the perf page, from
``bench/perf_overhead.py``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from perfkit import durable
from perfkit.paths import bench_results_dir, shown
from perfkit.version import git_sha

#: The head of a new ``bench/RESULTS.md``.
RESULTS_MD_HEADER = """# Bench results: the measured history

One line per run of a bench (`bench/<name>.py`), appended by the bench when it ends: the date (UTC),
the host it ran on (hostname, kernel, CPUs online x CPU model), the commit, the command and its
headline figures. A figure holds for the host that measured it: compare lines of the same host. The
full figures of every run are in `bench/results/<name>.jsonl`; reports and `perfkit compare` quote
the latest of them, always with its date and host.

"""


@dataclass(frozen=True)
class Host:
    """The machine a bench ran on."""

    hostname: str
    kernel: str
    """``uname -r``."""
    cpu_model: str
    """``model name`` of /proc/cpuinfo (or the machine type)."""
    nproc: int
    """CPUs online [count]."""

    def describe(self) -> str:
        return f"{self.hostname} (kernel {self.kernel}, {self.nproc} x {self.cpu_model})"


@dataclass(frozen=True)
class BenchRecord:
    """One run of a bench."""

    bench: str
    """The bench's name: ``bench/<bench>.py``."""
    measured_at: str
    """When the run ended, ISO 8601 UTC to the second (``2026-11-26T09:40:12Z``)."""
    host: Host
    git_sha: str
    """The checkout's commit (``unknown`` outside one)."""
    command: str
    """The command line, as typed from the repository (``bench/probe_cost.py --rounds 9``)."""
    figures: dict[str, Any]
    """What the bench prints with ``--json``: its parameters and figures, in the units its doc names."""

    @property
    def date(self) -> str:
        """``measured_at`` for people: ``2026-11-26 09:40 UTC``."""
        return self.measured_at[:16].replace("T", " ") + " UTC"

    def provenance(self) -> str:
        """Who measured it, when and where: ``measured by `cmd` on <date> on <host>``."""
        return f"measured by `{self.command}` on {self.date} on {self.host.describe()}, commit {self.git_sha}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchRecord:
        return cls(bench=str(d["bench"]), measured_at=str(d["measured_at"]), host=Host(**d["host"]),
                   git_sha=str(d.get("git_sha", "unknown")), command=str(d.get("command", "")),
                   figures=dict(d.get("figures") or {}))


def results_file(bench: str) -> Path:
    """``<bench results dir>/<bench>.jsonl``."""
    return bench_results_dir() / f"{bench}.jsonl"


def results_md() -> Path:
    """The people's history: ``RESULTS.md`` beside the results directory (``bench/RESULTS.md``)."""
    return bench_results_dir().parent / "RESULTS.md"


def this_host() -> Host:
    from perfkit.campaign.metadata import cpu_model  # heavy: loads the campaign package, +0.1 s on perfkit.compare

    return Host(hostname=socket.gethostname(), kernel=platform.release(), cpu_model=cpu_model(),
                nproc=os.cpu_count() or 1)


def command_line(argv: Sequence[str]) -> str:
    """``argv`` as typed from the repository: the script relative to it when it lies inside."""
    head = shown(Path(argv[0]).resolve()) if argv else "?"
    return " ".join([head, *argv[1:]])


def record(bench: str, figures: dict[str, Any], summary: str, argv: Sequence[str]) -> BenchRecord:
    """Append one run of ``bench`` to its results file and a dated line with ``summary`` (its headline
    figures, in words) to ``RESULTS.md``; both fsynced. Returns the record."""
    rec = BenchRecord(bench=bench, measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      host=this_host(), git_sha=git_sha(), command=command_line(argv),
                      figures=json.loads(json.dumps(figures)))   # plain JSON types, as a reader gets them
    path = results_file(bench)
    path.parent.mkdir(parents=True, exist_ok=True)
    durable.append_line(path, (json.dumps(rec.to_dict()) + "\n").encode(), point="bench.record")
    md = results_md()
    if not md.exists():
        durable.atomic_write(md, RESULTS_MD_HEADER.encode(), point="bench.results_md")
    line = f"- {rec.date}, {rec.host.describe()}, commit {rec.git_sha}: **{bench}**: {summary} (`{rec.command}`)\n"
    durable.append_line(md, line.encode(), point="bench.results_md")
    return rec


def records(bench: str) -> list[BenchRecord]:
    """Every run of ``bench`` on record, oldest first (a torn last line is skipped)."""
    out = []
    for d in durable.read_lines(results_file(bench))[0]:
        try:
            out.append(BenchRecord.from_dict(d))
        except (KeyError, TypeError):
            continue       # a line of another shape is no record
    return out


def latest(bench: str) -> BenchRecord | None:
    """The latest run of ``bench`` on record, or None."""
    found = records(bench)
    return found[-1] if found else None


def not_on_record(bench: str) -> str:
    """What to say instead of a figure ``bench`` would have measured."""
    path = results_file(bench)
    return f"`bench/{bench}.py` has not been run on record (no {shown(path)})"


# -- what the pages quote ----------------------------------------------------------------------------
def probe_tick_cost(periods: Iterable[float]) -> str:
    """What the stall probe's ticks cost the probed CPU, at ``periods`` [µs] where the latest
    ``probe_cost`` record has them (else at every period it has), with its date and host."""
    rec = latest("probe_cost")
    if rec is None:
        return f"how much is not known here: {not_on_record('probe_cost')}"
    rows = {float(r["period_us"]): r for r in rec.figures.get("periods", [])}
    wanted = [p for p in sorted(set(periods)) if p in rows] or sorted(rows)
    parts = [f"{100 * (rows[p]['ratio_median'] - 1):.1f} % at {p:g} µs ({rows[p]['us_per_tick']:.1f} µs per tick)"
             for p in wanted]
    return (f"bench/probe_cost.py slowed work on the probed CPU by {' and '.join(parts)}, median of "
            f"{rec.figures.get('rounds', '?')} paired rounds, {rec.provenance()}")


def _quartile_text(q: Sequence[float] | None) -> str:
    return "not measured" if q is None else f"median {q[1]:.2f}, quartiles {q[0]:.2f}-{q[2]:.2f}"


def _hz(arm: str) -> float:
    """The sampling frequency of an arm named ``999 Hz`` [Hz] (unparsable names last)."""
    try:
        return float(arm.split()[0])
    except (ValueError, IndexError):
        return float("inf")


def perf_overhead_text() -> str:
    """What ``perf record`` of the DUT cores cost a trial (the latest ``perf_overhead`` record, with
    its date and host), in markdown; or that it has not been measured on record."""
    rec = latest("perf_overhead")
    if rec is None:
        return f"perf's own cost on a trial has not been measured: {not_on_record('perf_overhead')}."
    f = rec.figures
    rate = f.get("rate_pps")
    setup = (f"{f.get('scenario', '?')} {'at ' + format(rate / 1e6, '.3f') + ' Mpps' if rate else 'at max rate'}, "
             f"{f.get('rounds', '?')} rounds of {f.get('duration', '?')} s trials with and without perf, in "
             "shuffled order")
    arms = []
    by_arm = f.get("paired_ratio_quartiles") or {}
    for arm in sorted(by_arm, key=_hz):   # lowest frequency first, as the bench ran them
        ratios = by_arm[arm]
        dut = ratios.get("dut_ns_per_packet")
        noise = "" if dut is None else (" (within the noise: the quartiles include 1)" if dut[0] <= 1 <= dut[2]
                                        else f" ({100 * (dut[1] - 1):+.0f} %)")
        perf_cpu = ((f.get("median") or {}).get(arm) or {}).get("perf_cpu")
        own = "" if perf_cpu is None else f"; the perf process itself used {100 * perf_cpu:.2g} % of a tester core"
        arms.append(f"at {arm}, the DUT's ns per packet with perf / without: {_quartile_text(dut)}{noise}; "
                    f"received rate: {_quartile_text(ratios.get('rx_mpps'))}{own}")
    if not arms:
        return f"perf's own cost on a trial: the record has no figures ({rec.provenance()})."
    return f"perf's own cost on a trial ({setup}; {rec.provenance()}): " + "; ".join(arms) + "."
