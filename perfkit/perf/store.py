"""Where folded stacks are kept: a run's ``perf/<trial_id>.folded`` files, and the files of
``perfkit trial --perf DIR``.

``write_folded(run_dir, trial_id, folded)`` keeps a trial's stacks in the run directory as
``perf/<trial_id>.folded`` (atomic, fsynced); ``read_folded``, ``perf_trial_ids`` read them back.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from perfkit.durable import atomic_write, fsync_dir
from perfkit.errors import ConfigError
from perfkit.perf.flamegraph import flamegraph_svg
from perfkit.perf.folded import parse_folded
from perfkit.perf.record import PerfProfile
from perfkit.perf.tools import PerfError

#: The run directory's subdirectory of folded stacks (``<trial_id>.folded``).
PERF_DIR = "perf"
FOLDED_SUFFIX = ".folded"


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
