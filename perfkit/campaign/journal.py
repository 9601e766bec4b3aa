"""The campaign journal, ``units.jsonl`` in the run directory: what a resume needs besides the trials.

One JSON object per line, appended and fsynced, never rewritten:

- ``{"event": "session", "session": n, "action": "start"|"resume", "time": ...}``
- ``{"event": "start", "unit": id, "attempt": n, "replay": k, "time": ...}``: attempt n of a unit
  begins, re-using the k trials it already has on disk;
- ``{"event": "superseded", "unit": id, "trial_ids": [...]}``: trials of an interrupted attempt
  that the restarted search did not ask for again (it diverged from the recorded path); they stay
  on disk but are not part of the unit's result;
- ``{"event": "done", "unit": id, "attempt": n, "trial_ids": [...], "time": ...}``: the unit's
  search ended and ``searches/<id>.json`` is written;
- ``{"event": "failed", "unit": id, "attempt": n, "error": "..."}``: the unit raised an error
  (a resume tries it again);
- ``{"event": "reopened", "unit": id, "reason": "..."}``: a done unit whose trial file was found
  missing or corrupt on resume; it runs again (replaying its trials that are still readable);
- ``{"event": "end", "session": n, "status": "complete"|"incomplete"|"interrupted"|"failed", ...}``.

A line the process died while writing (a *torn* line: no valid JSON) is ignored when read, and
``torn`` lists where, for the resume to report. The next append starts on a fresh line, never glued
onto the fragment: a torn line therefore stays a line of its own, and only ever at the place where
a process died.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.durable import append_line, read_lines

JOURNAL_FILE = "units.jsonl"


@dataclass
class JournalState:
    """What the journal says so far."""

    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    """unit id -> its ``done`` event."""
    attempts: dict[str, int] = field(default_factory=dict)
    """unit id -> attempts started."""
    failed: dict[str, str] = field(default_factory=dict)
    """unit id -> last error, for units not done."""
    superseded: set[str] = field(default_factory=set)
    """Trial ids that belong to no unit's result."""
    session_events: list[dict[str, Any]] = field(default_factory=list)
    """``session`` and ``end`` events, in order."""
    torn: list[int] = field(default_factory=list)
    """Line numbers (1-based) of torn lines, ignored."""

    @property
    def session_count(self) -> int:
        return sum(1 for s in self.session_events if s["event"] == "session")


class Journal:
    """Append-only event log of a campaign run."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / JOURNAL_FILE

    def append(self, event: str, **fields: Any) -> None:
        """Append one event durably (written and fsynced before this returns)."""
        line = (json.dumps({"event": event, "time": time.time(), **fields}, sort_keys=True, default=str)
                + "\n").encode()
        append_line(self.path, line, "journal.append")

    def events(self) -> list[dict[str, Any]]:
        return self._read()[0]

    def torn_lines(self) -> list[int]:
        """Line numbers (1-based) of the torn lines that reading ignores."""
        return self._read()[1]

    def _read(self) -> tuple[list[dict[str, Any]], list[int]]:
        return read_lines(self.path)

    def state(self) -> JournalState:
        events, torn = self._read()
        st = JournalState(torn=torn)
        for e in events:
            kind, unit = e.get("event"), e.get("unit")
            if kind == "start":
                st.attempts[unit] = max(st.attempts.get(unit, 0), int(e.get("attempt", 1)))
            elif kind == "done":
                st.done[unit] = e
                st.failed.pop(unit, None)
            elif kind == "failed":
                st.failed[unit] = e.get("error", "")
            elif kind == "reopened":
                st.done.pop(unit, None)
            elif kind == "superseded":
                st.superseded.update(e.get("trial_ids", []))
            elif kind in ("session", "end"):
                st.session_events.append(e)
        return st

