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
removes the data left (``remove_stale_dirs``). ``perf_processes()`` lists the perf processes left, for tests.
"""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from perfkit import owners
from perfkit.errors import ConfigError
from perfkit.perf.folded import SymbolShare, idle_share, parse_folded, process_table, top_symbols
from perfkit.perf.tools import PerfError, check_available, last_line

#: Sampling frequency per CPU [Hz]: a 2 s trial gives about 2000 samples per DUT core.
DEFAULT_FREQUENCY = 999
#: Call-graph modes: ``kernel`` (kernel and BPF stacks only), or also user stacks by ``fp`` or ``dwarf``.
CALL_GRAPHS = ("kernel", "fp", "dwarf")
#: Temporary directories of recorders (perf.data, perf's stderr, the owner record).
TMP_PREFIX = "perfkit-perf-"
OWNER_FILE = "owner.json"
#: How long perf may take to start (synthesising the tasks of a busy host) and to stop [s].
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
_LOST_RE = re.compile(r"^\s*LOST events:\s+(\d+)", re.M)
#: The frame given to a sample recorded without any (see ``with_user_frames``).
USER_FRAME = b"\t0 [user] ([unknown])"


def remove_stale_dirs() -> list[Path]:
    """Remove the temporary directories of recorders whose process died without cleaning up (SIGKILL,
    SIGTERM without a handler); returns them."""
    gone = []
    for d in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*"):
        try:
            owner = json.loads((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            owner = None
        if owner is not None and owners.alive(owner):
            continue
        try:
            if owner is None and time.time() - d.stat().st_mtime < 60:
                continue      # being created just now
        except OSError:
            continue          # removed meanwhile
        shutil.rmtree(d, ignore_errors=True)
        gone.append(d)
    return gone


def perf_processes() -> list[int]:
    """PIDs of running ``perf record`` processes (any owner): what a recorder must not leave behind."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 1 and os.path.basename(argv[0]).startswith(b"perf") and argv[1] == b"record":
                pids.append(int(entry))
    return pids


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
class PerfRecorder:
    """``perf record`` of ``cpus`` around a block (see the module doc); ``profile`` after a clean exit."""

    def __init__(self, cpus: Iterable[int], frequency: int = DEFAULT_FREQUENCY, call_graph: str = "kernel", *,
                 top: int = 20, event: str | None = None, fold: bool = True):
        """``fold=False``: ``profile.folded`` is left empty and ``script`` holds ``perf script``'s
        output, for a host without inferno (a lab's DUT: the controller folds it, ``fold_script``)."""
        given = list(cpus)
        self.cpus = sorted({int(c) for c in given})
        ncpu = os.cpu_count() or 1
        if not self.cpus or any(not 0 <= c < ncpu for c in self.cpus):
            raise ConfigError("cpus", given, f"CPUs of 0 .. {ncpu - 1}")
        if isinstance(frequency, bool) or not isinstance(frequency, int) or not 1 <= frequency <= 100_000:
            raise ConfigError("frequency", frequency, "an integer number of samples per second, 1 .. 100000")
        if call_graph not in CALL_GRAPHS:
            raise ConfigError("call_graph", call_graph, CALL_GRAPHS)
        self.frequency, self.call_graph, self.top, self.event, self.fold = frequency, call_graph, top, event, fold
        self.profile: PerfProfile | None = None
        #: ``perf script``'s output of the last recording, when not folded here (``fold=False``).
        self.script: bytes = b""
        self.pid: int | None = None
        """The perf process's PID while it records (and after, for the record)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._ctl: int | None = None
        self._ack: int | None = None
        self._tools: dict[str, str] = {}
        self._enabled_at = 0.0
        self._cpu0: float | None = None

    # context manager: start on entry; on exit fold the stacks, or, after an exception, only clean up
    def __enter__(self) -> PerfRecorder:
        self.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.profile = self.stop()
        else:
            self.abort()

    def start(self) -> None:
        """Start perf with its events disabled, then enable them; returns when perf acknowledged."""
        if self._proc is not None:
            raise PerfError("this PerfRecorder is already recording")
        self._tools = check_available(fold=self.fold)
        remove_stale_dirs()
        self._dir = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        (self._dir / OWNER_FILE).write_text(json.dumps(owners.me()))
        ctl_r, self._ctl = os.pipe()
        self._ack, ack_w = os.pipe()
        cmd = [self._tools["setpriv"], "--pdeathsig", "KILL", "--",
               self._tools["perf"], "record", "-o", str(self._dir / "perf.data"), "-C", ",".join(map(str, self.cpus)),
               "-F", str(self.frequency), "--call-graph", "fp" if self.call_graph == "kernel" else self.call_graph,
               "-D", "-1", "--control", f"fd:{ctl_r},{ack_w}", "-B", "-N", "--synth=task", "--no-bpf-event"]
        if self.call_graph == "kernel":
            cmd.append("--kernel-callchains")
        if self.event:
            cmd += ["-e", self.event]
        try:
            with open(self._dir / "stderr", "wb") as err:
                self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                              pass_fds=(ctl_r, ack_w),
                                              start_new_session=True)   # Ctrl-C reaches us, and we stop perf
            self.pid = self._proc.pid
        except BaseException:
            os.close(ctl_r)
            os.close(ack_w)
            self._cleanup()
            raise
        os.close(ctl_r)
        os.close(ack_w)
        try:
            self._command("enable", START_TIMEOUT)
            self._enabled_at = time.monotonic()
            self._cpu0 = _proc_cpu_seconds(self._proc.pid)
        except BaseException:
            self.abort()
            raise

    def stop(self) -> PerfProfile:
        """Disable the events, stop perf (SIGINT), fold its samples; perf's files are removed."""
        if self._proc is None or self._dir is None:
            raise PerfError("this PerfRecorder is not recording")
        try:
            self._command("disable", STOP_TIMEOUT)
            seconds = time.monotonic() - self._enabled_at
            cpu1 = _proc_cpu_seconds(self._proc.pid)
            perf_cpu = cpu1 - self._cpu0 if cpu1 is not None and self._cpu0 is not None else None
            affinity = sorted(os.sched_getaffinity(self._proc.pid))
            self._proc.send_signal(signal.SIGINT)
            try:
                rc = self._proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise PerfError(f"perf record did not stop within {STOP_TIMEOUT:g} s of SIGINT; killed it") from None
            if rc not in (0, -signal.SIGINT, 128 + signal.SIGINT):
                raise PerfError(f"perf record failed (exit {rc}): {self._stderr()}")
            data = self._dir / "perf.data"
            self.script = self._script(data)
            folded = fold_script(self.script, self._tools["inferno-collapse-perf"]) if self.fold else ""
            profile = PerfProfile(folded=folded, samples=sum(c for _, c in parse_folded(folded)), cpus=self.cpus,
                                  frequency=self.frequency, call_graph=self.call_graph, event=self._event(data),
                                  seconds=seconds, perf_cpu_seconds=perf_cpu, perf_process_cpus=affinity,
                                  lost_events=self._lost(data), top=top_symbols(folded, self.top) if self.fold else [])
        except BaseException:
            self.abort()
            raise
        self._proc = None
        self._cleanup()
        return profile

    def abort(self) -> None:
        """Kill perf (SIGINT, then SIGKILL after a second) and remove its files; never raises."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGINT, 1.0), (signal.SIGKILL, 5.0)):
                try:
                    proc.send_signal(sig)
                    proc.wait(wait)
                    break
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    continue
        self._cleanup()

    # -- helpers -----------------------------------------------------------------------------------------
    def _command(self, cmd: str, timeout: float) -> None:
        """Send a control command to perf and wait for its ``ack``; a ``PerfError`` if perf died."""
        assert self._proc is not None and self._ctl is not None and self._ack is not None
        try:
            os.write(self._ctl, cmd.encode() + b"\n")
        except BrokenPipeError:
            pass   # perf is gone: the wait below says why
        deadline = time.monotonic() + timeout
        reply = b""
        while b"\n" not in reply:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PerfError(f"perf record did not acknowledge '{cmd}' within {timeout:g} s")
            ready, _, _ = select.select([self._ack], [], [], min(left, 0.2))
            if ready:
                chunk = os.read(self._ack, 64)
                if not chunk:
                    break
                reply += chunk
            elif self._proc.poll() is not None:
                break
        if not reply.startswith(b"ack"):
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            what = "start recording" if cmd == "enable" else f"'{cmd}'"
            raise PerfError(f"perf record could not {what} CPUs {self.cpus} (exit {self._proc.returncode}): "
                            f"{self._stderr()}")

    def _script(self, data: Path) -> bytes:
        """``perf script`` of ``data``, with a frame for user-space samples without a stack."""
        script = subprocess.run([self._tools["perf"], "script", "-i", str(data), "--no-inline",
                                 "-F", "comm,pid,tid,cpu,time,event,ip,sym,dso"],
                                capture_output=True, stdin=subprocess.DEVNULL, check=False)
        if script.returncode != 0:
            raise PerfError(f"perf script failed (exit {script.returncode}) on {data}: {_first_line(script.stderr)}")
        return with_user_frames(script.stdout)

    def _event(self, data: Path) -> str:
        out = subprocess.run([self._tools["perf"], "evlist", "-i", str(data)], capture_output=True, check=False)
        events = [e for e in out.stdout.decode().split() if not e.startswith("dummy")]
        return events[0] if events else "unknown"

    def _lost(self, data: Path) -> int:
        out = subprocess.run([self._tools["perf"], "report", "-i", str(data), "--stats"], capture_output=True,
                             check=False)
        return sum(int(n) for n in _LOST_RE.findall(out.stdout.decode()))

    def _stderr(self) -> str:
        try:
            return _first_line((self._dir / "stderr").read_bytes()) if self._dir else "no output"
        except OSError:
            return "no output"

    def _cleanup(self) -> None:
        # dropped before closed: after an interrupt, a second close could hit another file's number
        fds, self._ctl, self._ack = (self._ctl, self._ack), None, None
        for fd in fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


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


def _first_line(raw: bytes) -> str:
    """perf's first message line (with the next one when it only says ``Error:``), at most 200 characters."""
    lines = [" ".join(ln.split()) for ln in raw.decode(errors="replace").splitlines() if ln.strip()]
    if not lines:
        return "no output"
    text = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
    return text[:200]
