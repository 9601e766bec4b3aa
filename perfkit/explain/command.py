"""What ``perfkit explain`` does: choose the pairs of trial sets from stored runs, explain each, and
draw its differential flame graph of ns per packet."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.analysis.run import load_run
from perfkit.durable import atomic_write
from perfkit.errors import ConfigError
from perfkit.explain.flame import ns_diff_flamegraph_svg
from perfkit.explain.gap import TOP, Explanation, explain
from perfkit.explain.sets import Pair, knob_pairs, run_pairs, scenario_pair

#: The run directory's subdirectory the flame graphs go to by default.
EXPLAIN_DIR = "explain"


@dataclass(frozen=True)
class Explained:
    """One pair, explained."""

    explanation: Explanation
    flamegraph: str | None
    """The differential flame graph's SVG file (None: not drawn)."""

    def to_dict(self) -> dict[str, Any]:
        return {**self.explanation.to_dict(), "flamegraph": self.flamegraph}

    def text(self) -> str:
        e = self.explanation
        accounted = e.accounted_line()
        lines = [e.sentence(), *(["  " + accounted] if accounted else []), "  " + e.kinds_line()]
        lines += ["  " + line for line in e.table(10).round(1).to_string(index=False).splitlines()]
        lines += [f"  flame graph (ps per packet): {self.flamegraph}"] if self.flamegraph else []
        return "\n".join(lines)


def choose_pairs(run_id: str, root: str | Path, a: str | None = None, b: str | None = None, knob: str | None = None,
                 baseline: str | None = None) -> list[Pair]:
    """The pairs the options ask for: ``--a/--b`` scenarios of a run, a ``--knob``'s two values
    (``--a``/``--b`` its values), or the run against a ``--baseline`` run (``--a`` one scenario)."""
    run = load_run(run_id, root)
    if knob is not None:
        if baseline is not None:
            raise ConfigError("--knob", knob, "either --knob or --baseline, not both")
        return knob_pairs(run, knob, a, b)
    if baseline is not None:
        if b is not None:
            raise ConfigError("--b", b, "not with --baseline (--a chooses the scenario)")
        return run_pairs(run, load_run(baseline, root), a)
    if a is None or b is None:
        raise ConfigError("--a/--b" if a is None and b is None else ("--a" if a is None else "--b"), None,
                          "two scenario keys of the run (or --knob NAME, or --baseline RUN_ID)")
    return [scenario_pair(run, a, b)]


def explain_pairs(pairs: list[Pair], flamegraph_dir: str | Path | None, top: int = TOP) -> list[Explained]:
    """Each pair explained, its flame graph written to ``flamegraph_dir`` (None: not drawn)."""
    out = []
    for pair in pairs:
        e = explain(pair.a, pair.b, pair.context, top)
        path = None
        if flamegraph_dir is not None:
            name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{pair.context + '__' if pair.context else ''}"
                                                      f"{pair.b.label}__vs__{pair.a.label}")
            title = f"{pair.b.label} against {pair.a.label}" + (f": {pair.context}" if pair.context else "")
            p = Path(flamegraph_dir) / f"{name}.svg"
            p.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(p, ns_diff_flamegraph_svg(pair.a.profiles, pair.b.profiles,
                                                   f"{title} (ns per packet)").encode(), "store.atomic")
            path = str(p)
        out.append(Explained(e, path))
    return out


def default_flamegraph_dir(run_id: str, root: str | Path) -> Path:
    """``<root>/<run_id>/explain``: the run's own directory."""
    return Path(root) / run_id / EXPLAIN_DIR
