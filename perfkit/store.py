"""The run store: ``data/runs/<run_id>/`` holds a run's metadata and every trial, on disk first.

Layout of a run directory:

- ``metadata.json``: host, kernel, CPU, perfkit git sha, BPF object hashes, the campaign ...
- ``trials/<NNNNNN>-<trial_id>.parquet``: one file per trial, one row (``TrialResult.to_record``),
  written atomically (temporary file + rename) the moment the trial ends, before anything else
  (push, plot) happens. The directory is a Parquet dataset: ``pandas.read_parquet(dir)`` or
  DuckDB ``read_parquet('trials/*.parquet')`` read it whole.
- ``pushes.jsonl``: one line per successful push of a trial to a Pushgateway (for backfill).
- ``searches/<name>.json``: search summaries (bounds, trial ids), written by campaigns
  (``write_search``/``searches``).
- ``units.jsonl``: a campaign's journal of units started, done, failed (``perfkit.campaign.journal``).
- ``cpu_prometheus.parquet``: the DUT CPU per trial as Prometheus saw it (``perfkit.metrics.query
  .cpu_frame`` columns), saved by a campaign before it stops its metrics stack, so that reports
  regenerate without servers (``write_prometheus_cpu``/``prometheus_cpu``).

Trial rows may carry bookkeeping columns besides ``RECORD_COLUMNS`` (``append(result, extra=...)``):
campaigns add ``unit`` (the campaign unit the trial belongs to) and ``attempt`` (1 for the first
try of that unit, 2 after a resume ...), in the same atomic file as the trial.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from perfkit.errors import StoreError
from perfkit.trial import TrialResult

DEFAULT_ROOT = Path(os.environ.get("PERFKIT_DATA", "data")) / "runs"
#: File of a run directory holding the Prometheus-derived CPU frame.
PROMETHEUS_CPU_FILE = "cpu_prometheus.parquet"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.%+-]{0,200}$")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def new_run_id(prefix: str = "") -> str:
    """A sortable, unique run id: ``20261122T170712-1a2b``."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{prefix}{stamp}-{os.urandom(2).hex()}"


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass
class RunStore:
    """One run directory. Create with ``RunStore.create``, reopen with ``RunStore.open``."""

    path: Path

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

    # -- metadata --------------------------------------------------------------------------------
    def write_metadata(self, metadata: dict[str, Any]) -> None:
        _atomic_write(self.path / "metadata.json",
                      json.dumps({"run_id": self.run_id, **metadata}, indent=2, default=str).encode())

    def metadata(self) -> dict[str, Any]:
        p = self.path / "metadata.json"
        return json.loads(p.read_text()) if p.exists() else {"run_id": self.run_id}

    # -- trials ----------------------------------------------------------------------------------
    def append(self, result: TrialResult, extra: dict[str, Any] | None = None) -> Path:
        """Write one trial durably; returns its file. Call this before pushing or plotting.

        ``extra``: bookkeeping columns stored in the same row (e.g. ``unit``, ``attempt``); they
        must not shadow a record column.
        """
        result.run_id = result.run_id or self.run_id
        seq = len(list(self._trial_files()))
        path = self.path / "trials" / f"{seq:06d}-{result.trial_id}.parquet"
        record = result.to_record()
        for key, value in (extra or {}).items():
            if key in record:
                raise StoreError(f"extra column {key!r} would overwrite a trial field; pick another name")
            record[key] = value
        frame = pd.DataFrame([record])
        tmp = path.with_name(f".{path.name}.tmp")
        frame.to_parquet(tmp, index=False)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return path

    def _trial_files(self) -> Iterator[Path]:
        return iter(sorted((self.path / "trials").glob("[0-9]*.parquet")))

    def trials(self) -> pd.DataFrame:
        """All trials, one row each, in the order they ended (columns: ``trial.RECORD_COLUMNS``)."""
        files = list(self._trial_files())
        if not files:
            return pd.DataFrame()
        return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)

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
        (self.path / "searches").mkdir(exist_ok=True)
        path = self.path / "searches" / f"{name}.json"
        _atomic_write(path, json.dumps(summary, indent=2, sort_keys=True, default=str).encode())
        return path

    def searches(self) -> list[dict[str, Any]]:
        """Every search summary of the run, by file name."""
        d = self.path / "searches"
        return [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.is_dir() else []

    def write_prometheus_cpu(self, frame: pd.DataFrame) -> Path:
        """Save the Prometheus-derived CPU frame (``perfkit.metrics.query.cpu_frame``) of the run."""
        path = self.path / PROMETHEUS_CPU_FILE
        tmp = path.with_name(f".{path.name}.tmp")
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
        return path

    def prometheus_cpu(self) -> pd.DataFrame | None:
        """The saved Prometheus CPU frame, or None if the run has none."""
        path = self.path / PROMETHEUS_CPU_FILE
        return pd.read_parquet(path) if path.exists() else None

    # -- pushes ----------------------------------------------------------------------------------
    def mark_pushed(self, trial_id: str, url: str) -> None:
        with open(self.path / "pushes.jsonl", "a") as f:
            f.write(json.dumps({"trial_id": trial_id, "url": url, "time": time.time()}) + "\n")

    def pushed_trial_ids(self) -> set[str]:
        p = self.path / "pushes.jsonl"
        if not p.exists():
            return set()
        return {json.loads(line)["trial_id"] for line in p.read_text().splitlines() if line.strip()}


def list_runs(root: Path | str = DEFAULT_ROOT) -> list[str]:
    """Run ids under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "trials").is_dir())
