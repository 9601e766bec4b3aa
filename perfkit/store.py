"""The run store: ``data/runs/<run_id>/`` holds a run's metadata and every trial, on disk first.

Layout of a run directory:

- ``metadata.json``: host, kernel, CPU, perfkit git sha, BPF object hashes, the campaign ...
- ``trials/<NNNNNN>-<trial_id>.parquet``: one file per trial, one row (``TrialResult.to_record``),
  written atomically (temporary file + rename) the moment the trial ends, before anything else
  (push, plot) happens. The directory is a Parquet dataset: ``pandas.read_parquet(dir)`` or
  DuckDB ``read_parquet('trials/*.parquet')`` read it whole.
- ``pushes.jsonl``: one line per successful push of a trial to a Pushgateway (for backfill),
  appended and fsynced; a torn line (a process died writing it) is ignored: that trial counts as
  not pushed.
- ``searches/<name>.json``: search summaries (bounds, trial ids), written by campaigns
  (``write_search``/``searches``).
- ``units.jsonl``: a campaign's journal of units started, done, failed (``perfkit.campaign.journal``).
- ``trials.cache.parquet``: derived, never the record: the trials of a large run read once, each row
  with its trial file's name, so that the next reader (each notebook of a report) reads only the
  files written since (``trials``). Deleting it costs one slow read; a trial file set aside since
  drops out of it.
- ``cpu_prometheus.parquet``: the DUT CPU per trial as Prometheus saw it (``perfkit.metrics.query
  .cpu_frame`` columns), saved by a campaign before it stops its metrics stack, so that reports
  regenerate without servers (``write_prometheus_cpu``/``prometheus_cpu``).

Crash safety: every file is written through ``perfkit.durable`` (temporary file, fsync, rename,
directory fsync; appends fsynced, torn lines skipped). A process killed while writing leaves at most
a ``.<name>.tmp`` file, which ``recover()`` (run under the run's lock by a resume) removes. Files
that cannot be read (a truncated Parquet file, a corrupt ``metadata.json``) raise a ``StoreError``
naming the file and what to do, never a raw parser error; ``recover()`` sets unreadable trial files
aside (``*.corrupt``) so that their trials are measured again. ``lock()`` keeps a second process
from running or resuming the same run at the same time (``fcntl.flock`` on ``.lock``).

Trial rows may carry bookkeeping columns besides ``RECORD_COLUMNS`` (``append(result, extra=...)``):
campaigns add ``unit`` (the campaign unit the trial belongs to) and ``attempt`` (1 for the first
try of that unit, 2 after a resume ...), in the same atomic file as the trial.
"""
from __future__ import annotations

import fcntl
import io
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pandas as pd
import pyarrow.parquet as pq

from perfkit import owners
from perfkit.crashpoints import crashpoint
from perfkit.durable import append_line, atomic_write, fsync_dir, read_lines
from perfkit.errors import StoreError
from perfkit.paths import data_dir
from perfkit.trial import TrialResult

DEFAULT_ROOT = data_dir() / "runs"
#: File of a run directory holding the Prometheus-derived CPU frame.
PROMETHEUS_CPU_FILE = "cpu_prometheus.parquet"
#: Trials of the run that had no Prometheus CPU figures (``{trial_id: why}``), beside that frame.
PROMETHEUS_CPU_MISSING_FILE = "cpu_prometheus_missing.json"
PUSHES_FILE = "pushes.jsonl"
#: The derived frame of a large run's trials (``RunStore.trials``); its rows name their trial files.
TRIALS_CACHE_FILE = "trials.cache.parquet"
_CACHE_FILE_COLUMN = "__trial_file"
#: Trial files a read must find beyond the cache before it writes the cache again: a few thousand
#: one-row Parquet files take about 3-15 ms each to read, the cache a fraction of a second.
CACHE_MIN_NEW = 200
LOCK_FILE = ".lock"
#: Suffix given to a trial file that cannot be read (``recover``): kept for inspection, not a trial.
CORRUPT_SUFFIX = ".corrupt"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.%+-]{0,200}$")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
#: What a run id may be (``RunStore.create`` refuses others).
RUN_ID_PATTERN = _RUN_ID_RE


def new_run_id(prefix: str = "") -> str:
    """A sortable, unique run id: ``20261122T170712-1a2b``."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{prefix}{stamp}-{os.urandom(2).hex()}"


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return buf.getvalue()


def _read_parquet(path: Path, advice: str) -> pd.DataFrame:
    """``pd.read_parquet``, with a one-line ``StoreError`` naming the file when it cannot be read."""
    try:
        return pd.read_parquet(path)
    except FileNotFoundError:
        raise StoreError(f"{path}: missing (removed while reading?); {advice}") from None
    except Exception as err:  # pyarrow raises ArrowInvalid, OSError ... for truncated or foreign files
        raise StoreError(f"{path}: not a readable Parquet file ({_short(err)}); {advice}") from None


def _missing_as_na(frame: pd.DataFrame) -> pd.DataFrame:
    """One spelling of a missing value per column, the one a Parquet round trip keeps, so that the
    cache and the trial files give equal frames: a column of numbers with gaps (an optional figure
    some trials lack) is float64 with NaN; any other object column (flags some dataplanes lack)
    holds None."""
    for col in frame.columns[frame.dtypes == object]:
        values = frame[col]
        present = values[values.notna()]
        if len(present) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            frame[col] = values.astype("float64")
        else:
            frame[col] = values.astype(object).where(values.notna(), None)
    return frame


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 160 else text[:157] + "..."


@dataclass
class Recovery:
    """What ``RunStore.recover`` found and did; ``notes`` says it in words."""

    notes: list[str] = field(default_factory=list)
    removed_tmp: list[str] = field(default_factory=list)
    corrupt_trials: dict[str, str] = field(default_factory=dict)
    """trial id -> the file set aside (``*.corrupt``)."""


@dataclass
class RunStore:
    """One run directory. Create with ``RunStore.create``, reopen with ``RunStore.open``."""

    path: Path
    _lock_fd: int | None = field(default=None, repr=False, compare=False)

    @property
    def run_id(self) -> str:
        return self.path.name

    # -- life cycle ------------------------------------------------------------------------------
    @classmethod
    def create(cls, run_id: str | None = None, root: Path | str = DEFAULT_ROOT,
               metadata: dict[str, Any] | None = None) -> RunStore:
        run_id = run_id or new_run_id()
        if not _RUN_ID_RE.match(run_id):
            raise StoreError(f"run_id: {run_id!r} is not allowed; allowed: letters, digits, '_', '.', '-'")
        path = Path(root) / run_id
        if path.exists():
            raise StoreError(f"run {run_id} already exists in {root}; resume it or pick another run id")
        (path / "trials").mkdir(parents=True)
        fsync_dir(path)
        fsync_dir(path.parent)
        store = cls(path)
        store.write_metadata(metadata or {})
        return store

    @classmethod
    def open(cls, run_id: str, root: Path | str = DEFAULT_ROOT) -> RunStore:
        path = Path(root) / run_id
        if not (path / "trials").is_dir():
            known = ", ".join(list_runs(root)[-5:]) or "none"
            raise StoreError(f"run_id: {run_id!r} not found under {root}; recent runs: {known}")
        return cls(path)

    # -- one process at a time -------------------------------------------------------------------
    def lock(self) -> RunStore:
        """Take the run's lock (released by ``unlock`` or when the process ends, even by SIGKILL).

        Raises ``StoreError`` if another process holds it (it runs or resumes this run).
        """
        if self._lock_fd is not None:
            return self
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StoreError(f"run {self.run_id} is in use by {holder}; wait until it ends (or stop it) and "
                             f"resume then: perfkit run --resume {self.run_id}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, owners.describe(owners.me()).encode(), 0)
        self._lock_fd = fd
        return self

    def unlock(self) -> None:
        if self._lock_fd is not None:
            fd, self._lock_fd = self._lock_fd, None
            os.ftruncate(fd, 0)
            os.close(fd)

    # -- after a crash ---------------------------------------------------------------------------
    def recover(self, done_trials: dict[str, str] | None = None) -> Recovery:
        """Remove what a killed writer left and set unreadable trial files aside; call under ``lock``.

        ``done_trials`` (trial id -> unit, from the journal's done units) only makes the notes say
        which unit a lost trial belonged to.
        """
        rec = Recovery()
        for tmp in sorted(self.path.rglob("*.tmp")):
            if tmp.is_file():
                tmp.unlink()
                rec.removed_tmp.append(str(tmp.relative_to(self.path)))
        if rec.removed_tmp:
            rec.notes.append(f"removed {len(rec.removed_tmp)} unfinished file(s) a killed process left: "
                             + ", ".join(rec.removed_tmp))
        for f in list(self._trial_files()):
            try:
                pq.read_metadata(f)
                continue
            except Exception as err:
                why = _short(err)
            aside = f.with_name(f.name + CORRUPT_SUFFIX)
            os.replace(f, aside)
            tid = _trial_id_of(f)
            rec.corrupt_trials[tid] = str(aside.relative_to(self.path))
            unit = (done_trials or {}).get(tid)
            rec.notes.append(f"trials/{f.name} is not readable ({why}): set aside as {aside.name}; its trial is "
                             "measured again" + (f" (unit {unit} runs again)" if unit else ""))
        if rec.removed_tmp or rec.corrupt_trials:
            fsync_dir(self.path / "trials")
        return rec

    # -- metadata --------------------------------------------------------------------------------
    def write_metadata(self, metadata: dict[str, Any]) -> None:
        atomic_write(self.path / "metadata.json",
                     json.dumps({"run_id": self.run_id, **metadata}, indent=2, default=str).encode(),
                     "metadata.write")

    def metadata(self) -> dict[str, Any]:
        """The run's metadata; a ``StoreError`` naming the file if it is corrupt."""
        p = self.path / "metadata.json"
        if not p.exists():
            return {"run_id": self.run_id}
        try:
            data = json.loads(p.read_bytes())
        except ValueError as err:
            raise StoreError(f"{p}: corrupt ({_short(err)}); restore it from a backup, or rebuild it by resuming "
                             f"with the run's campaign file: perfkit run --resume {self.run_id} CAMPAIGN "
                             "(the trials are intact)") from None
        if not isinstance(data, dict):
            raise StoreError(f"{p}: corrupt (a JSON {type(data).__name__}, not an object); restore it from a "
                             f"backup, or rebuild it: perfkit run --resume {self.run_id} CAMPAIGN")
        return data

    # -- trials ----------------------------------------------------------------------------------
    def append(self, result: TrialResult, extra: dict[str, Any] | None = None) -> Path:
        """Write one trial durably; returns its file. Call this before pushing or plotting.

        ``extra``: bookkeeping columns stored in the same row (e.g. ``unit``, ``attempt``); they
        must not shadow a record column.
        """
        result.run_id = result.run_id or self.run_id
        files = list(self._trial_files())
        seq = int(files[-1].name.split("-", 1)[0]) + 1 if files else 0
        path = self.path / "trials" / f"{seq:06d}-{result.trial_id}.parquet"
        record = result.to_record()
        for key, value in (extra or {}).items():
            if key in record:
                raise StoreError(f"extra column {key!r} would overwrite a trial field; pick another name")
            record[key] = value
        atomic_write(path, _parquet_bytes(pd.DataFrame([record])), "store.write")
        crashpoint("store.renamed")
        return path

    def _trial_files(self) -> Iterator[Path]:
        return iter(sorted((self.path / "trials").glob("[0-9]*.parquet")))

    def trials(self) -> pd.DataFrame:
        """All trials, one row each, in the order they ended (columns: ``trial.RECORD_COLUMNS``).
        A missing value is NaN in a numeric column and None in any other (``_missing_as_na``).

        A file that cannot be read raises a ``StoreError`` naming it.
        """
        files = list(self._trial_files())
        if not files:
            return pd.DataFrame()
        advice = (f"resume the run to set it aside and measure that trial again (perfkit run --resume "
                  f"{self.run_id}), or move the file out of trials/")
        names = {f.name: i for i, f in enumerate(files)}
        cached = self._cached_trials(names)
        known = set(cached[_CACHE_FILE_COLUMN]) if cached is not None else set()
        new = [f for f in files if f.name not in known]
        parts = ([cached] if cached is not None else []) + [
            _read_parquet(f, advice).assign(**{_CACHE_FILE_COLUMN: f.name}) for f in new]
        frame = _missing_as_na(pd.concat(parts, ignore_index=True))
        frame = frame.iloc[frame[_CACHE_FILE_COLUMN].map(names).argsort(kind="stable")].reset_index(drop=True)
        if len(new) >= CACHE_MIN_NEW:
            try:
                atomic_write(self.path / TRIALS_CACHE_FILE, _parquet_bytes(frame))
            except OSError:
                pass   # a read-only copy of a run: it reads slowly, as before the cache
        return frame.drop(columns=[_CACHE_FILE_COLUMN])

    def _cached_trials(self, names: dict[str, int]) -> pd.DataFrame | None:
        """The cache's rows whose trial files are still there; None without a readable cache."""
        try:
            cached = pd.read_parquet(self.path / TRIALS_CACHE_FILE)
        except Exception:  # noqa: BLE001 - none yet, or torn: it is rebuilt from the trial files
            return None
        if _CACHE_FILE_COLUMN not in cached:
            return None
        kept = cached[cached[_CACHE_FILE_COLUMN].isin(names)]
        return kept if len(kept) else None

    def check(self) -> None:
        """Raise a ``StoreError`` naming the first file of the run that cannot be read (metadata,
        trial files, search summaries): for commands that read a run (report, compare, push)."""
        self.metadata()
        for f in self._trial_files():
            try:
                pq.read_metadata(f)
            except Exception as err:
                raise StoreError(f"{f}: not a readable Parquet file ({_short(err)}); resume the run to set it "
                                 f"aside and measure that trial again (perfkit run --resume {self.run_id}), or "
                                 "move the file out of trials/") from None
        self.searches()
        self.prometheus_cpu()

    def cpu_frame(self) -> pd.DataFrame:
        """CPU time per trial x cpu x mode from /proc/stat, tidy.

        Columns: trial_id, scenario_key, cpu (int), mode (user, nice, system, idle, iowait, irq,
        softirq, steal), fraction (0..1 of the trial's wall time), dut_core (bool).
        """
        rows = []
        for r in self.results():
            dut = set(r.dut_cpu)
            for cpu, modes in r.cpu_modes.items():
                for mode, frac in modes.items():
                    rows.append({"trial_id": r.trial_id, "scenario_key": r.scenario_key, "cpu": int(cpu),
                                 "mode": mode, "fraction": float(frac), "dut_core": cpu in dut})
        return pd.DataFrame(rows, columns=["trial_id", "scenario_key", "cpu", "mode", "fraction", "dut_core"])

    def results(self) -> list[TrialResult]:
        return [TrialResult.from_record(r) for r in self.trials().to_dict("records")]

    # -- search summaries and derived frames ------------------------------------------------------
    def write_search(self, name: str, summary: dict[str, Any]) -> Path:
        """Write ``searches/<name>.json`` atomically (``name``: letters, digits, ``_.%+-``)."""
        if not _NAME_RE.match(name):
            raise StoreError(f"search name: {name!r} is not allowed; allowed: letters, digits, '_.%+-'")
        d = self.path / "searches"
        if not d.is_dir():
            d.mkdir()
            fsync_dir(self.path)
        path = d / f"{name}.json"
        atomic_write(path, json.dumps(summary, indent=2, sort_keys=True, default=str).encode(), "search.write")
        return path

    def searches(self) -> list[dict[str, Any]]:
        """Every search summary of the run, by file name; a ``StoreError`` names a corrupt one."""
        d = self.path / "searches"
        out = []
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            try:
                out.append(json.loads(p.read_bytes()))
            except ValueError as err:
                raise StoreError(f"{p}: corrupt ({_short(err)}); remove it and resume the run to write it again "
                                 f"from the unit's trials (perfkit run --resume {self.run_id})") from None
        return out

    def write_prometheus_cpu(self, frame: pd.DataFrame, missing: dict[str, str] | None = None) -> Path:
        """Save the Prometheus-derived CPU frame (``perfkit.metrics.query.cpu_frame``) of the run, and
        ``missing``: the trials that have none, with why (``prometheus_cpu_missing``)."""
        path = self.path / PROMETHEUS_CPU_FILE
        atomic_write(path, _parquet_bytes(frame), "store.atomic")
        atomic_write(self.path / PROMETHEUS_CPU_MISSING_FILE,
                     json.dumps(missing or {}, indent=1, sort_keys=True).encode(), "store.atomic")
        return path

    def prometheus_cpu(self) -> pd.DataFrame | None:
        """The saved Prometheus CPU frame, or None if the run has none."""
        path = self.path / PROMETHEUS_CPU_FILE
        if not path.exists():
            return None
        return _read_parquet(path, "remove it: the analysis then takes the DUT CPU from /proc/stat")

    def prometheus_cpu_missing(self) -> dict[str, str]:
        """Trials with no Prometheus CPU figures when the frame was saved: ``{trial_id: why}``."""
        path = self.path / PROMETHEUS_CPU_MISSING_FILE
        try:
            data = json.loads(path.read_bytes())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    # -- pushes ----------------------------------------------------------------------------------
    def mark_pushed(self, trial_id: str, url: str) -> None:
        """Record a successful push (appended and fsynced)."""
        line = json.dumps({"trial_id": trial_id, "url": url, "time": time.time()}) + "\n"
        append_line(self.path / PUSHES_FILE, line.encode(), "pushes.append")

    def pushed_trial_ids(self) -> set[str]:
        """Trials recorded as pushed; a torn line (see ``pushes_torn_lines``) counts as not pushed."""
        events, _ = read_lines(self.path / PUSHES_FILE)
        return {e["trial_id"] for e in events if isinstance(e.get("trial_id"), str)}

    def push_times(self) -> dict[str, float]:
        """Unix time of each trial's latest recorded push: when its group was on the Pushgateway, so
        when Prometheus scraped it (``perfkit.metrics.query.pushed_trials_frame``)."""
        events, _ = read_lines(self.path / PUSHES_FILE)
        out: dict[str, float] = {}
        for e in events:
            tid, t = e.get("trial_id"), e.get("time")
            if isinstance(tid, str) and isinstance(t, (int, float)) and not isinstance(t, bool):
                out[tid] = max(float(t), out.get(tid, float(t)))
        return out

    def pushes_torn_lines(self) -> list[int]:
        """Line numbers of torn lines in pushes.jsonl (a process died while writing them)."""
        return read_lines(self.path / PUSHES_FILE)[1]


def _trial_id_of(path: Path) -> str:
    """The trial id in a trial file's name (``<seq>-<trial_id>.parquet``)."""
    name = path.name.split(".", 1)[0]
    return name.split("-", 1)[1] if "-" in name else name


def list_runs(root: Path | str = DEFAULT_ROOT) -> list[str]:
    """Run ids under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "trials").is_dir())
