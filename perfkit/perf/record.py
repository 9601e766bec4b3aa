"""perf attribution: ``perf record`` of the DUT cores during a trial, folded into stacks for flame graphs.

``PerfRecorder(cpus)`` is a context manager around one trial::

    with PerfRecorder(gen.dut_cores) as rec:
        result = gen.measure(rate_pps, duration)
    profile = rec.profile            # a PerfProfile: folded stacks, samples, top symbols, perf's own CPU

How it records:

- ``perf record -C <cpus> -g -F <frequency> -D -1 --control fd:...``: every CPU of ``cpus``, every task on
  them (the DUT's NAPI and cpumap kernel threads, and whatever else the host runs there). perf starts
  with its events disabled; ``__enter__`` returns once perf acknowledged ``enable``, and ``__exit__``
  sends ``disable`` (acknowledged) the moment the trial ends, then SIGINT, so that the samples cover
  the trial and nothing of perf's start-up or shut-down.
- Call graphs: kernel stacks are unwound by the kernel itself (ORC on x86-64); it follows JIT-compiled
  BPF programs through their frame pointers, so a stack reads ``napi_threaded_poll;...;veth_xdp_rcv_one;
  bpf_prog_<tag>_xdp_sink;bpf_ringbuf_reserve``. ``call_graph`` chooses what happens to *user*
  stacks, which the DUT's packet path does not have: ``kernel`` (the default) records none (a
  user-space sample is its process and the function it was in), ``fp`` walks them by frame pointers,
  ``dwarf`` copies 8 KiB of user stack per sample. Other tasks on the DUT cores (a Python process of
  the host) then add their 100-frame stacks to the flame graph and perf's cost.
- BPF programs are named ``bpf_prog_<tag>_<function>``: perf reads the programs loaded when it starts
  (the DUT's are) and ``/proc/kallsyms`` when folding (``net.core.bpf_jit_kallsyms`` must be 1, its
  default as root). ``--no-bpf-event`` spares perf's BPF side-band thread, which took 0.7 s to stop.
- perf's build-id pass is skipped (``-B -N``), and only tasks are synthesised (``--synth=task``): perf
  starts in about 0.3 s and stops, folded, in about 0.3 s here (2 s trial, one core, 999 Hz).
- The event is perf's default: ``cycles`` where the CPU has a PMU, ``cpu-clock`` (a timer) in most
  VMs. With the timer, a sample is 1/frequency s of the CPU's time, so a symbol's share of the samples
  is its share of the DUT cores' time.

Folding: ``perf script`` (no period: one count per sample; a user-space sample without a stack gets
the frame ``[user]``) into ``inferno-collapse-perf --all`` (the Rust port of Brendan Gregg's FlameGraph
tools, ``cargo install inferno``; ``perfkit.perf.tools`` finds them). ``--all`` marks kernel frames
``_[k]``; a folded line is ``comm;outermost;...;leaf <samples>`` (``perfkit.perf.folded`` makes the
tables; ``perfkit.perf.flamegraph`` the flame graphs).

Clean-up: an exception in the body (Ctrl-C, SIGTERM turned into an exception by the testbed or the CLI)
kills perf and removes its data. If the Python process dies without clean-up, perf ends too: the
kernel sends it SIGKILL (``setpriv --pdeathsig``), and its control pipe closes; the next recorder
removes the data left (``perfkit.perf.session``, which `perf stat` shares: ``remove_stale_dirs``,
``perf_processes()`` lists the perf processes left, for tests).
"""
from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from perfkit.errors import ConfigError
from perfkit.perf.folded import SymbolShare, idle_share, parse_folded, process_table, top_symbols
from perfkit.perf.session import PerfSession, first_line
from perfkit.perf.tools import PerfError, check_available, last_line

#: Sampling frequency per CPU [Hz]: a 2 s trial gives about 2000 samples per DUT core.
DEFAULT_FREQUENCY = 999
#: Call-graph modes: ``kernel`` (kernel and BPF stacks only), or also user stacks by ``fp`` or ``dwarf``.
CALL_GRAPHS = ("kernel", "fp", "dwarf")
_LOST_RE = re.compile(r"^\s*LOST events:\s+(\d+)", re.M)
#: The frame given to a sample recorded without any (see ``with_user_frames``).
USER_FRAME = b"\t0 [user] ([unknown])"


@dataclass
class PerfProfile:
    """What one ``PerfRecorder`` recorded."""

    folded: str
    """Folded stacks, one ``comm;outermost;...;leaf <samples>`` line per distinct stack."""
    samples: int
    """Samples in ``folded`` (all CPUs, idle included)."""
    cpus: list[int]
    """The CPUs recorded."""
    frequency: int
    """Sampling frequency per CPU [Hz]."""
    call_graph: str
    event: str
    """The event perf sampled (``cycles`` with a PMU, ``cpu-clock`` otherwise)."""
    seconds: float
    """Wall time the events were enabled [s]."""
    perf_cpu_seconds: float | None
    """CPU time of the perf process while the events were enabled (user + system) [s]; None if unread."""
    perf_process_cpus: list[int]
    """The CPUs the perf process itself could run on (this process's affinity when it started)."""
    lost_events: int = 0
    """Events perf lost (its ring buffer overflowed): samples missing from ``folded``."""
    top: list[SymbolShare] = field(default_factory=list)
    """The top symbols of ``folded`` (``top_symbols``)."""

    @property
    def perf_cpu(self) -> float | None:
        """perf's own CPU while recording, as a fraction of one core [0..1]."""
        if self.perf_cpu_seconds is None or self.seconds <= 0:
            return None
        return self.perf_cpu_seconds / self.seconds

    @property
    def idle_share(self) -> float:
        """Share of the samples in the idle task [0..1]."""
        return idle_share(self.folded)

    def to_dict(self, folded: bool = False) -> dict[str, Any]:
        """JSON-ready summary (``folded`` text only when asked), with the top 10 ``processes``."""
        d = {k: v for k, v in asdict(self).items() if k != "folded" or folded}
        d["perf_cpu"] = self.perf_cpu
        d["idle_share"] = self.idle_share
        procs = process_table(self.folded).head(10)
        d["processes"] = [{"process": r.process, "samples": int(r.samples), "share": float(r.share)}
                          for r in procs.itertuples()]
        return d


# -- recording -------------------------------------------------------------------------------------------
class PerfRecorder(PerfSession):
    """``perf record`` of ``cpus`` around a block (see the module doc); ``profile`` after a clean exit."""

    command, activity = "record", "recording"

    def __init__(self, cpus: Iterable[int], frequency: int = DEFAULT_FREQUENCY, call_graph: str = "kernel", *,
                 top: int = 20, event: str | None = None, fold: bool = True):
        """``fold=False``: ``profile.folded`` is left empty and ``script`` holds ``perf script``'s
        output, for a host without inferno (a lab's DUT: the controller folds it, ``fold_script``)."""
        super().__init__(cpus)
        if isinstance(frequency, bool) or not isinstance(frequency, int) or not 1 <= frequency <= 100_000:
            raise ConfigError("frequency", frequency, "an integer number of samples per second, 1 .. 100000")
        if call_graph not in CALL_GRAPHS:
            raise ConfigError("call_graph", call_graph, CALL_GRAPHS)
        self.frequency, self.call_graph, self.top, self.event, self.fold = frequency, call_graph, top, event, fold
        self.profile: PerfProfile | None = None
        #: ``perf script``'s output of the last recording, when not folded here (``fold=False``).
        self.script: bytes = b""
        self._tools: dict[str, str] = {}
        self._enabled_at = 0.0
        self._cpu0: float | None = None

    def keep(self, result: PerfProfile) -> None:
        self.profile = result

    def start(self) -> None:
        """Start perf with its events disabled, then enable them; returns when perf acknowledged."""
        if self.running:
            raise PerfError("this PerfRecorder is already recording")
        self._tools = check_available(fold=self.fold)
        # perf.data goes to the session's directory, perf's working directory
        argv = [self._tools["perf"], "record", "-o", "perf.data", "-C", ",".join(map(str, self.cpus)),
                "-F", str(self.frequency), "--call-graph", "fp" if self.call_graph == "kernel" else self.call_graph,
                "-B", "-N", "--synth=task", "--no-bpf-event"]
        if self.call_graph == "kernel":
            argv.append("--kernel-callchains")
        if self.event:
            argv += ["-e", self.event]
        self.launch(self._tools["setpriv"], argv)
        self._enabled_at = time.monotonic()
        assert self.pid is not None
        self._cpu0 = _proc_cpu_seconds(self.pid)

    def stop(self) -> PerfProfile:
        """Disable the events, stop perf (SIGINT), fold its samples; perf's files are removed."""
        if not self.running or self.pid is None:
            raise PerfError("this PerfRecorder is not recording")
        try:
            self.disable()
            seconds = time.monotonic() - self._enabled_at
            cpu1 = _proc_cpu_seconds(self.pid)
            perf_cpu = cpu1 - self._cpu0 if cpu1 is not None and self._cpu0 is not None else None
            affinity = sorted(os.sched_getaffinity(self.pid))
            self.finish()
            data = self.workdir / "perf.data"
            self.script = self._script(data)
            folded = fold_script(self.script, self._tools["inferno-collapse-perf"]) if self.fold else ""
            profile = PerfProfile(folded=folded, samples=sum(c for _, c in parse_folded(folded)), cpus=self.cpus,
                                  frequency=self.frequency, call_graph=self.call_graph, event=self._event(data),
                                  seconds=seconds, perf_cpu_seconds=perf_cpu, perf_process_cpus=affinity,
                                  lost_events=self._lost(data), top=top_symbols(folded, self.top) if self.fold else [])
        except BaseException:
            self.abort()
            raise
        self.close()
        return profile

    # -- helpers -----------------------------------------------------------------------------------------
    def _script(self, data: Path) -> bytes:
        """``perf script`` of ``data``, with a frame for user-space samples without a stack."""
        script = subprocess.run([self._tools["perf"], "script", "-i", str(data), "--no-inline",
                                 "-F", "comm,pid,tid,cpu,time,event,ip,sym,dso"],
                                capture_output=True, stdin=subprocess.DEVNULL, check=False)
        if script.returncode != 0:
            raise PerfError(f"perf script failed (exit {script.returncode}) on {data}: {first_line(script.stderr)}")
        return with_user_frames(script.stdout)

    def _event(self, data: Path) -> str:
        out = subprocess.run([self._tools["perf"], "evlist", "-i", str(data)], capture_output=True, check=False)
        events = [e for e in out.stdout.decode().split() if not e.startswith("dummy")]
        return events[0] if events else "unknown"

    def _lost(self, data: Path) -> int:
        out = subprocess.run([self._tools["perf"], "report", "-i", str(data), "--stats"], capture_output=True,
                             check=False)
        return sum(int(n) for n in _LOST_RE.findall(out.stdout.decode()))


def fold_script(script: bytes, collapse: str | None = None) -> str:
    """Folded stacks of ``perf script``'s output (``inferno-collapse-perf --all``)."""
    tool = collapse or check_available()["inferno-collapse-perf"]
    out = subprocess.run([tool, "--all", "--quiet"], input=script, capture_output=True, check=False)
    if out.returncode != 0:
        raise PerfError(f"inferno-collapse-perf failed: {last_line(out.stderr)}")
    return out.stdout.decode(errors="replace")


def with_user_frames(script: bytes) -> bytes:
    """``perf script`` output where a sample without any frame (a user-space sample recorded with
    kernel call chains only) gets the frame ``[user]``: inferno would drop it, and the shares would
    then leave user space out of the total."""
    out: list[bytes] = []
    pending = False                  # a sample header waits for its first frame
    for line in script.splitlines():
        if pending and not line.strip():
            out.append(USER_FRAME)
        if line.strip():
            pending = not line[:1].isspace()
        else:
            pending = False
        out.append(line)
    if pending:
        out.append(USER_FRAME)
    return b"\n".join(out) + b"\n"


def _proc_cpu_seconds(pid: int) -> float | None:
    """CPU time of a process, all its threads (``/proc/<pid>/task/*/schedstat``, ns) [s]; None if it is gone."""
    total, found = 0, False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            found = True
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9 if found else None
