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
tools, ``cargo install inferno``; see ``find_tool``). ``--all`` marks kernel frames ``_[k]``; a folded
line is ``comm;outermost;...;leaf <samples>``.
``flamegraph_svg`` renders folded stacks with ``inferno-flamegraph`` (an interactive SVG: click to
zoom, Ctrl-F to search).

Clean-up: an exception in the body (Ctrl-C, SIGTERM turned into an exception by the testbed or the CLI)
kills perf and removes its data. If the Python process dies without clean-up, perf ends too: the
kernel sends it SIGKILL (``setpriv --pdeathsig``), and its control pipe closes; the next recorder
removes the data left (``remove_stale_dirs``). ``perf_processes()`` lists the perf processes left, for tests.

Storage: ``write_folded(run_dir, trial_id, folded)`` keeps a trial's stacks in the run directory as
``perf/<trial_id>.folded`` (atomic, fsynced); ``read_folded``, ``perf_trial_ids`` read them back.
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
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from perfkit import owners
from perfkit.durable import atomic_write, fsync_dir
from perfkit.errors import ConfigError, PerfkitError
from perfkit.paths import TOOLS_DIR

#: Sampling frequency per CPU [Hz]: a 2 s trial gives about 2000 samples per DUT core.
DEFAULT_FREQUENCY = 999
#: Call-graph modes: ``kernel`` (kernel and BPF stacks only), or also user stacks by ``fp`` or ``dwarf``.
CALL_GRAPHS = ("kernel", "fp", "dwarf")
#: The inferno release perfkit is tested with: ``cargo install inferno --version 0.12.8 --locked --root build/tools``.
INFERNO_VERSION = "0.12.8"
INSTALL_INFERNO = "make tools"
#: The run directory's subdirectory of folded stacks (``<trial_id>.folded``).
PERF_DIR = "perf"
FOLDED_SUFFIX = ".folded"
#: Temporary directories of recorders (perf.data, perf's stderr, the owner record).
TMP_PREFIX = "perfkit-perf-"
OWNER_FILE = "owner.json"
#: How long perf may take to start (synthesising the tasks of a busy host) and to stop [s].
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
#: Process names (prefixes) of packet-processing kernel threads: threaded NAPI and cpumap.
PACKET_THREADS = ("napi/", "cpumap/")
#: Process names of CPU idle: their samples are the DUT cores' idle time, not a symbol's.
IDLE_COMMS = ("swapper",)
_BPF_RE = re.compile(r"^bpf_prog_[0-9a-f]{16}_(?P<name>\w+)$")
_LOST_RE = re.compile(r"^\s*LOST events:\s+(\d+)", re.M)
_KERNEL_MARK = "_[k]"
#: The frame given to a sample recorded without any (see ``with_user_frames``).
USER_FRAME = b"\t0 [user] ([unknown])"
_OTHER_MARKS = ("_[j]", "_[i]")


class PerfError(PerfkitError):
    """perf or inferno is missing, or perf could not record (the message names what and why)."""


# -- tools -----------------------------------------------------------------------------------------------
def find_tool(name: str) -> str | None:
    """The path of ``name``: ``build/tools/bin`` (``make setup``), ``~/.cargo/bin``, then ``PATH``."""
    for d in (TOOLS_DIR, Path.home() / ".cargo" / "bin"):
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    return shutil.which(name)


def check_available() -> dict[str, str]:
    """The tools perf attribution needs, ``{name: path}``; a one-line ``PerfError`` naming the first
    one missing (and how to install it) otherwise."""
    found: dict[str, str] = {}
    for name, install in (("perf", "apt-get install linux-perf (Debian) or linux-tools-$(uname -r) (Ubuntu)"),
                          ("setpriv", "apt-get install util-linux"),
                          ("inferno-collapse-perf", INSTALL_INFERNO),
                          ("inferno-flamegraph", INSTALL_INFERNO)):
        path = find_tool(name)
        if not path:
            raise PerfError(f"perf attribution needs {name}, not found in {TOOLS_DIR}, ~/.cargo/bin or PATH; "
                            f"install it: {install}")
        found[name] = path
    return found


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


# -- results ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SymbolShare:
    """One function's part of the samples (all samples of the recorded CPUs, idle included)."""

    symbol: str
    """Function name without perf's annotation: ``veth_poll``, ``bpf_prog_<tag>_xdp_sink``."""
    kind: str
    """``bpf`` (a BPF program), ``kernel`` or ``other`` (user space, unknown)."""
    self_samples: int
    """Samples in this function itself (the leaf of the stack)."""
    inclusive_samples: int
    """Samples with this function anywhere on the stack (each stack counted once)."""
    self_share: float
    """``self_samples`` / all samples [0..1]: with a timer event, its share of the CPUs' time."""
    inclusive_share: float
    """``inclusive_samples`` / all samples [0..1]."""


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


# -- folded stacks ---------------------------------------------------------------------------------------
def parse_folded(text: str) -> list[tuple[list[str], int]]:
    """``[(frames, samples), ...]`` of folded stacks; a ``ValueError`` names the first bad line."""
    stacks = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit() or int(count) < 1:
            raise ValueError(f"folded stacks line {n}: {line[:120]!r} is not 'frame;frame;... <samples>'")
        stacks.append((stack.split(";"), int(count)))
    return stacks


def symbol_kind(frame: str) -> str:
    """``bpf``, ``kernel`` or ``other`` for one frame of ``inferno-collapse-perf --all`` output."""
    name = strip_annotation(frame)
    if _BPF_RE.match(name):
        return "bpf"
    return "kernel" if frame.endswith(_KERNEL_MARK) else "other"


def strip_annotation(frame: str) -> str:
    """The function name without inferno's ``_[k]``/``_[j]``/``_[i]`` annotation."""
    for mark in (_KERNEL_MARK, *_OTHER_MARKS):
        if frame.endswith(mark):
            return frame[:-len(mark)]
    return frame


def bpf_program_name(symbol: str) -> str | None:
    """``xdp_sink`` for ``bpf_prog_55de28cda8ea9ac6_xdp_sink``; None for anything else."""
    m = _BPF_RE.match(strip_annotation(symbol))
    return m.group("name") if m else None


def idle_share(folded: str) -> float:
    """Share of the samples whose process is the idle task [0..1] (0 without samples)."""
    stacks = parse_folded(folded)
    total = sum(c for _, c in stacks)
    idle = sum(c for frames, c in stacks if _is_idle(frames[0]))
    return idle / total if total else 0.0


def _is_idle(comm: str) -> bool:
    return comm.split("/")[0] in IDLE_COMMS


def symbol_table(folded: str) -> pd.DataFrame:
    """Every function of the stacks but the idle task's, most inclusive samples first.

    Columns: symbol, kind (``bpf``/``kernel``/``other``), self_samples, inclusive_samples,
    self_share, inclusive_share (of all samples, idle included: ``idle_share`` is the rest). The
    first frame of a stack is the process name, not a function: it is left out.
    """
    stacks = parse_folded(folded)
    total = sum(c for _, c in stacks)
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    kinds: dict[str, str] = {}
    for frames, count in stacks:
        funcs = frames[1:]
        if not funcs or _is_idle(frames[0]):
            continue
        for f in funcs:
            kinds.setdefault(strip_annotation(f), symbol_kind(f))
        self_c[strip_annotation(funcs[-1])] += count
        for name in {strip_annotation(f) for f in funcs}:
            incl[name] += count
    cols = ["symbol", "kind", "self_samples", "inclusive_samples", "self_share", "inclusive_share"]
    rows = [(s, kinds[s], self_c[s], incl[s], self_c[s] / total, incl[s] / total) for s in incl]
    df = pd.DataFrame(rows, columns=cols)
    return df.sort_values(["inclusive_samples", "self_samples", "symbol"], ascending=[False, False, True],
                          ignore_index=True)


def process_table(folded: str) -> pd.DataFrame:
    """Samples per process name (the first frame), most first: who used the recorded CPUs.

    Columns: process, samples, share (of all samples [0..1]), packet_thread (a NAPI or cpumap
    kernel thread: ``napi/<dev>-<id>``, ``cpumap/...``; the DUT's own, or another testbed's on the
    same CPUs), idle (the idle task).
    """
    counts: Counter[str] = Counter()
    for frames, count in parse_folded(folded):
        counts[frames[0]] += count
    total = sum(counts.values())
    rows = [(p, c, c / total, p.startswith(PACKET_THREADS), _is_idle(p)) for p, c in counts.most_common()]
    return pd.DataFrame(rows, columns=["process", "samples", "share", "packet_thread", "idle"])


def top_symbols(folded: str, n: int = 20, kinds: Sequence[str] = ("kernel", "bpf")) -> list[SymbolShare]:
    """The ``n`` functions of ``kinds`` with the most self samples (ties: inclusive), with their shares."""
    df = symbol_table(folded)
    df = df[df["kind"].isin(kinds)].sort_values(["self_samples", "inclusive_samples", "symbol"],
                                                  ascending=[False, False, True])
    return [SymbolShare(r.symbol, r.kind, int(r.self_samples), int(r.inclusive_samples), float(r.self_share),
                        float(r.inclusive_share)) for r in df.head(n).itertuples()]


def merge_folded(texts: Iterable[str]) -> str:
    """Several folded texts as one (counts of identical stacks added), sorted by stack."""
    total: Counter[str] = Counter()
    for text in texts:
        for frames, count in parse_folded(text):
            total[";".join(frames)] += count
    return "".join(f"{s} {c}\n" for s, c in sorted(total.items()))


# -- rendering -------------------------------------------------------------------------------------------
def flamegraph_svg(folded: str, title: str = "DUT cores", *, width: int = 1200, count_name: str = "samples") -> str:
    """An interactive flame graph (SVG with its own script) of ``folded``, by ``inferno-flamegraph``."""
    tool = find_tool("inferno-flamegraph")
    if not tool:
        raise PerfError(f"flame graphs need inferno-flamegraph, not found in {TOOLS_DIR}, ~/.cargo/bin or PATH; "
                        f"install it: {INSTALL_INFERNO}")
    if not folded.strip():
        raise PerfError("no samples to draw a flame graph of")
    out = subprocess.run([tool, "--title", title, "--countname", count_name, "--width", str(width),
                          "--colors", "hot", "--hash"],
                         input=folded.encode(), capture_output=True, check=False)
    if out.returncode != 0:
        raise PerfError(f"inferno-flamegraph failed: {_last_line(out.stderr)}")
    return out.stdout.decode()


def flamegraph_html(svg: str, max_height: int = 900) -> str:
    """HTML that shows an interactive SVG flame graph in a notebook or an exported page: an ``iframe``
    whose document is the SVG (a ``data:`` URL), so that its script (zoom, search) runs as in a file of
    its own and nothing of the page interferes. As tall as the graph, up to ``max_height`` [px] (then
    it scrolls; the roots are at the bottom)."""
    import base64

    m = re.search(r'<svg[^>]*\sheight="(\d+)"', svg)
    height = min(int(m.group(1)) + 8, max_height) if m else max_height
    url = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
    return (f'<div class="flamegraph"><iframe src="{url}" style="width:100%;height:{height}px;border:0" '
            'title="flame graph"></iframe></div>')


def save_trial_profile(profile: PerfProfile | None, directory: str | Path, trial_id: str,
                       title: str) -> dict[str, Any]:
    """``perfkit trial --perf DIR``: write ``DIR/<trial_id>.folded`` and its flame graph
    ``DIR/<trial_id>.svg``; returns ``profile.to_dict()`` with the two paths (``folded_file``,
    ``flamegraph_file``: None without samples)."""
    if profile is None:
        raise PerfError("no perf profile to save: the recording did not end cleanly")
    d = Path(directory)
    folded, svg = d / f"{trial_id}{FOLDED_SUFFIX}", d / f"{trial_id}.svg"
    atomic_write(folded, profile.folded.encode(), "store.atomic")
    if profile.samples:
        atomic_write(svg, flamegraph_svg(profile.folded, f"{title}: DUT cores {profile.cpus}").encode(),
                     "store.atomic")
    return {**profile.to_dict(), "folded_file": str(folded), "flamegraph_file": str(svg) if profile.samples else None}


# -- the run store ---------------------------------------------------------------------------------------
def write_folded(run_dir: str | Path, trial_id: str, folded: str) -> Path:
    """Keep a trial's folded stacks as ``<run_dir>/perf/<trial_id>.folded`` (atomic, fsynced)."""
    parse_folded(folded)   # never store what cannot be read back
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", trial_id):
        raise ConfigError("trial_id", trial_id, "letters, digits, '_', '.', '-'")
    d = Path(run_dir) / PERF_DIR
    if not d.is_dir():
        d.mkdir()
        fsync_dir(d.parent)
    path = d / f"{trial_id}{FOLDED_SUFFIX}"
    atomic_write(path, folded.encode(), "store.atomic")
    return path


def perf_trial_ids(run_dir: str | Path) -> list[str]:
    """Trials of the run with folded stacks, sorted."""
    d = Path(run_dir) / PERF_DIR
    return sorted(p.name[:-len(FOLDED_SUFFIX)] for p in d.glob(f"*{FOLDED_SUFFIX}")) if d.is_dir() else []


def read_folded(run_dir: str | Path, trial_id: str) -> str:
    """The folded stacks of one trial (``write_folded``)."""
    return (Path(run_dir) / PERF_DIR / f"{trial_id}{FOLDED_SUFFIX}").read_text()


def scenario_profiles(trials: pd.DataFrame, run_dir: str | Path) -> pd.DataFrame:
    """One trial with folded stacks per scenario: the one that received the most packets per second.

    ``trials``: a trial frame (``perfkit.analysis.trial_frame``; needs trial_id, scenario_key, rx_pps).
    Columns: the trial's columns, plus ``perf_trials`` (how many of the scenario's trials have stacks).
    Empty when the run has no perf data.
    """
    ids = set(perf_trial_ids(run_dir))
    if trials.empty or not ids:
        return pd.DataFrame()
    df = trials[trials["trial_id"].isin(ids)]
    if df.empty:
        return pd.DataFrame()
    counts = df.groupby("scenario_key")["trial_id"].count().rename("perf_trials")
    best = df.sort_values("rx_pps", ascending=False).drop_duplicates("scenario_key")
    return best.join(counts, on="scenario_key").sort_values("scenario_key", ignore_index=True)


def top_table(folded: str, n: int = 15) -> pd.DataFrame:
    """The report's table: the top ``n`` kernel and BPF functions by self share, in percent."""
    rows = [{"symbol": s.symbol, "kind": s.kind, "self %": 100 * s.self_share,
             "inclusive %": 100 * s.inclusive_share, "self samples": s.self_samples}
            for s in top_symbols(folded, n)]
    return pd.DataFrame(rows, columns=["symbol", "kind", "self %", "inclusive %", "self samples"])


@dataclass
class ScenarioProfile:
    """One scenario's section of the report: its profiled trial, table and flame graph."""

    scenario_key: str
    trial_id: str
    title: str
    """``<scenario_key>: <method>, <rx Mpps> received, <samples> samples``."""
    folded: str
    top: pd.DataFrame
    """``top_table``."""

    def flamegraph_html(self, max_height: int = 900) -> str:
        return flamegraph_html(flamegraph_svg(self.folded, f"{self.scenario_key}: DUT cores"), max_height)


def scenario_sections(trials: pd.DataFrame, run_dir: str | Path, n: int = 15) -> list[ScenarioProfile]:
    """Per scenario with perf data, its profiled trial (``scenario_profiles``), top table and stacks."""
    out = []
    for r in scenario_profiles(trials, run_dir).itertuples():
        folded = read_folded(run_dir, r.trial_id)
        samples = sum(c for _, c in parse_folded(folded))
        title = (f"{r.scenario_key}: {getattr(r, 'method', 'trial')}, {r.rx_pps / 1e6:.3f} Mpps received, "
                 f"{samples} samples (trial {r.trial_id}; {r.perf_trials} trial(s) of the scenario recorded)")
        out.append(ScenarioProfile(r.scenario_key, r.trial_id, title, folded, top_table(folded, n)))
    return out


def summary_table(sections: Sequence[ScenarioProfile]) -> pd.DataFrame:
    """One row per scenario: where the DUT cores' samples went, in percent of all samples.

    Columns: scenario_key, samples, packet threads % (NAPI and cpumap kernel threads: the DUT's
    packet path; the rest is other work the host ran on those cores), idle %, BPF programs % (their
    own code), kernel % (kernel functions as leaves), other % (user space), top BPF program, top
    kernel symbol (by self share).
    """
    rows = []
    for sec in sections:
        tab = symbol_table(sec.folded)
        stacks = parse_folded(sec.folded)
        total = sum(c for _, c in stacks)
        leaf = Counter()
        for frames, count in stacks:
            leaf["idle" if _is_idle(frames[0]) else symbol_kind(frames[-1])] += count
        bpf = tab[tab["kind"] == "bpf"].sort_values("self_samples", ascending=False)
        kern = tab[tab["kind"] == "kernel"].sort_values("self_samples", ascending=False)
        procs = process_table(sec.folded)
        rows.append({"scenario_key": sec.scenario_key, "samples": total,
                     "packet threads %": 100 * procs.loc[procs["packet_thread"], "share"].sum(),
                     "idle %": 100 * leaf["idle"] / total, "BPF programs %": 100 * leaf["bpf"] / total,
                     "kernel %": 100 * leaf["kernel"] / total, "other %": 100 * leaf["other"] / total,
                     "top BPF program": bpf["symbol"].iloc[0] if len(bpf) else "",
                     "top kernel symbol": kern["symbol"].iloc[0] if len(kern) else ""})
    return pd.DataFrame(rows, columns=["scenario_key", "samples", "packet threads %", "idle %", "BPF programs %",
                                       "kernel %", "other %", "top BPF program", "top kernel symbol"])


# -- recording -------------------------------------------------------------------------------------------
class PerfRecorder:
    """``perf record`` of ``cpus`` around a block (see the module doc); ``profile`` after a clean exit."""

    def __init__(self, cpus: Iterable[int], frequency: int = DEFAULT_FREQUENCY, call_graph: str = "kernel", *,
                 top: int = 20, event: str | None = None):
        given = list(cpus)
        self.cpus = sorted({int(c) for c in given})
        ncpu = os.cpu_count() or 1
        if not self.cpus or any(not 0 <= c < ncpu for c in self.cpus):
            raise ConfigError("cpus", given, f"CPUs of 0 .. {ncpu - 1}")
        if isinstance(frequency, bool) or not isinstance(frequency, int) or not 1 <= frequency <= 100_000:
            raise ConfigError("frequency", frequency, "an integer number of samples per second, 1 .. 100000")
        if call_graph not in CALL_GRAPHS:
            raise ConfigError("call_graph", call_graph, CALL_GRAPHS)
        self.frequency, self.call_graph, self.top, self.event = frequency, call_graph, top, event
        self.profile: PerfProfile | None = None
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
        self._tools = check_available()
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
            folded = self._collapse(data)
            profile = PerfProfile(folded=folded, samples=sum(c for _, c in parse_folded(folded)), cpus=self.cpus,
                                  frequency=self.frequency, call_graph=self.call_graph, event=self._event(data),
                                  seconds=seconds, perf_cpu_seconds=perf_cpu, perf_process_cpus=affinity,
                                  lost_events=self._lost(data), top=top_symbols(folded, self.top))
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

    def _collapse(self, data: Path) -> str:
        script = subprocess.run([self._tools["perf"], "script", "-i", str(data), "--no-inline",
                                 "-F", "comm,pid,tid,cpu,time,event,ip,sym,dso"],
                                capture_output=True, stdin=subprocess.DEVNULL, check=False)
        if script.returncode != 0:
            raise PerfError(f"perf script failed (exit {script.returncode}) on {data}: {_first_line(script.stderr)}")
        out = subprocess.run([self._tools["inferno-collapse-perf"], "--all", "--quiet"],
                             input=with_user_frames(script.stdout), capture_output=True, check=False)
        if out.returncode != 0:
            raise PerfError(f"inferno-collapse-perf failed: {_last_line(out.stderr)}")
        return out.stdout.decode(errors="replace")

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


def _last_line(raw: bytes) -> str:
    lines = [ln.strip() for ln in raw.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


__all__ = ["CALL_GRAPHS", "DEFAULT_FREQUENCY", "PerfError", "PerfProfile", "PerfRecorder", "ScenarioProfile",
           "SymbolShare", "check_available", "find_tool", "flamegraph_html", "flamegraph_svg", "idle_share",
           "merge_folded", "parse_folded", "perf_processes", "perf_trial_ids", "process_table", "read_folded",
           "remove_stale_dirs",
           "save_trial_profile", "scenario_profiles", "scenario_sections", "summary_table", "symbol_table",
           "top_symbols", "top_table", "with_user_frames", "write_folded"]
