"""``perfkit history``: a campaign's runs gathered by the commit they measured, in commit order.

Every run records the git commit of the perfkit that made it (``metadata.perfkit.git_sha_full``,
``perfkit.version``); ``ab`` and ``bisect`` runs record their side's. A run of a user's dataplane
(every dataplane of it a description file in a git repository, ``metadata.dataplanes[..].commit``,
``perfkit.provenance.dataplane_source``) belongs to that commit instead: the history of their
dataplane is drawn along their commits (``run_commit``). ``gather(root, campaign)``
takes the complete runs of the campaign (by its name) and, per commit and figure (scenario, method,
goal: ``compare.scenario_figures``):

- ``value_mpps``: the mean of the runs' figures (each the mean of its repeats);
- ``noise_pct``: the larger of the runs' own noise (``compare``'s: 2 x the repeats' CV, the search
  bracket) and 2 x the CV across the commit's runs;
- ``at_least``: a run's figure was limited by something else than the DUT (``search.limits
  .LOWER_BOUNDS``: generator, testbed ...): the value is a lower bound, drawn as one;
- ``change_pct``, ``step``: the change from the previous commit that has the figure, and whether it
  lies beyond both commits' noise (hypot) and ``threshold_pct``: where the figure stepped.

Commits are ordered as ``git rev-list --topo-order`` of the repository gives them (oldest first);
commits the repository does not have come last, in the order their first run started.
``write_history`` draws ``history.png`` (``perfci.plots.history_plot``) and writes ``history.json``
and ``history.html``, a page with the plot and the table.
"""
from __future__ import annotations

import base64
import html
import json
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfkit.analysis import load_run, throughput_table
from perfkit.compare import KEY, scenario_figures
from perfkit.errors import ConfigError, PerfkitError
from perfkit.perfci.plots import history_plot
from perfkit.search.limits import LOWER_BOUNDS
from perfkit.store import RunStore, list_runs

POINT_COLUMNS = ["figure", *KEY, "commit", "commit_label", "subject", "position", "runs", "run_ids", "value_mpps",
                 "noise_pct", "limited_by", "at_least", "change_pct", "band_pct", "step"]


def commit_order(repo: Path | None) -> list[str]:
    """Every commit reachable from any branch or HEAD of ``repo``, oldest first ([] without one)."""
    if repo is None:
        return []
    out = subprocess.run(["git", "-C", str(repo), "rev-list", "--topo-order", "--reverse", "--all", "HEAD"],
                         capture_output=True, text=True)
    return out.stdout.split() if out.returncode == 0 else []


def _subject(repo: Path | None, commit: str) -> str:
    if repo is None:
        return ""
    out = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%s", commit], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""


def campaign_runs(root: Path, campaign: str) -> list[tuple[str, dict[str, Any]]]:
    """(run id, metadata) of the complete runs of the campaign named ``campaign``, oldest first."""
    out = []
    for rid in list_runs(root):
        meta = RunStore.open(rid, root).metadata()
        if (meta.get("campaign") or {}).get("name") == campaign and meta.get("status") == "complete":
            out.append((rid, meta))
    return sorted(out, key=lambda x: x[1].get("started_at") or 0)


def run_figures(rid: str, root: Path) -> pd.DataFrame:
    """``compare.scenario_figures`` of a run, with ``limited_by`` (its repeats' distinct words)."""
    run = load_run(rid, root)
    fig = scenario_figures(run)
    tp = throughput_table(run)
    if fig.empty:
        return fig.assign(limited_by=pd.Series(dtype=object))
    lim = tp.groupby(KEY, sort=False)["limited_by"].agg(
        lambda s: "/".join(dict.fromkeys(str(x) for x in s if isinstance(x, str)))).reset_index()
    return fig.merge(lim, on=KEY, how="left")


def run_commit(meta: dict[str, Any]) -> str:
    """The commit a run's figures belong to (module doc): its user dataplane's, else perfkit's."""
    sources = list((meta.get("dataplanes") or {}).values())
    commits = {s.get("commit") for s in sources if isinstance(s, dict) and "file" in s}
    if sources and len(commits) == 1 and all(isinstance(s, dict) and "file" in s for s in sources):
        commit = commits.pop()
        if commit:
            return str(commit)
    return (meta.get("perfkit") or {}).get("git_sha_full") or "unknown"


@dataclass
class History:
    """The points of a campaign's history (``POINT_COLUMNS``, one row per commit and figure)."""

    campaign: str
    points: pd.DataFrame
    threshold_pct: float

    def steps(self) -> pd.DataFrame:
        return self.points[self.points["step"]]

    def to_dict(self) -> dict[str, Any]:
        pts = json.loads(self.points.to_json(orient="records"))
        return {"campaign": self.campaign, "threshold_pct": self.threshold_pct,
                "commits": list(dict.fromkeys(self.points["commit"])), "points": pts,
                "steps": json.loads(self.steps().to_json(orient="records"))}


def gather(root: Path, campaign: str, repo: Path | None = None, metric: str | None = None,
           threshold_pct: float = 5.0) -> History:
    """The history of ``campaign`` in the runs under ``root`` (module doc); ``metric``: only the
    figures of that goal (``max``, ``ndr`` ...)."""
    runs = campaign_runs(root, campaign)
    if not runs:
        raise PerfkitError(f"no complete run of campaign {campaign!r} under {root}")
    frames = []
    for rid, meta in runs:
        fig = run_figures(rid, root)
        fig["commit"] = run_commit(meta)
        fig["run_id"] = rid
        frames.append(fig)
    allfig = pd.concat(frames, ignore_index=True)
    if metric is not None:
        goals = sorted(set(allfig["goal"].astype(str)))
        if metric.lower() not in [g.lower() for g in goals]:
            raise ConfigError("--metric", metric, ", ".join(goals) or "(the runs have no figure)")
        allfig = allfig[allfig["goal"].astype(str).str.lower() == metric.lower()]
    order = {c: i for i, c in enumerate(commit_order(repo))}
    first_seen = {c: i for i, c in enumerate(dict.fromkeys(allfig["commit"]))}
    commits = sorted(first_seen, key=lambda c: (c not in order, order.get(c, 0), first_seen[c]))
    rows = []
    for key, g in allfig.groupby(KEY, sort=False):
        name = f"{key[0]} {key[1]} {'max rate rx' if key[2] == 'max' else str(key[2]).upper()}"
        for pos, commit in enumerate(commits):
            d = g[g["commit"] == commit]
            if d.empty:
                continue
            values = d["value_pps"].dropna().to_numpy(dtype=float)
            mean = float(values.mean()) if len(values) else math.nan
            spread = 200 * float(values.std(ddof=1)) / mean if len(values) >= 2 and mean > 0 else 0.0
            limited = "/".join(dict.fromkeys(w for s in d["limited_by"].fillna("") for w in str(s).split("/") if w))
            rows.append({"figure": name, **dict(zip(KEY, key)), "commit": commit,
                         "commit_label": commit[:7] if commit in order else f"{commit[:7]}?",
                         "subject": _subject(repo, commit), "position": pos, "runs": len(d),
                         "run_ids": list(d["run_id"]), "value_mpps": mean / 1e6,
                         "noise_pct": max(float(d["noise_pct"].max()), spread), "limited_by": limited,
                         "at_least": any(w in LOWER_BOUNDS for w in limited.split("/"))})
    points = pd.DataFrame(rows, columns=[c for c in POINT_COLUMNS if c not in ("change_pct", "band_pct", "step")])
    return History(campaign, _steps(points, threshold_pct), threshold_pct)


def _steps(points: pd.DataFrame, threshold_pct: float) -> pd.DataFrame:
    """Add ``change_pct``, ``band_pct`` and ``step`` (module doc) to each figure's points."""
    out = []
    for _, g in points.groupby("figure", sort=False):
        g = g.sort_values("position").copy()
        prev_v = g["value_mpps"].shift(1)
        prev_n = g["noise_pct"].shift(1)
        g["change_pct"] = (g["value_mpps"] - prev_v) / prev_v * 100
        g["band_pct"] = np.maximum(threshold_pct, np.hypot(prev_n.fillna(0), g["noise_pct"]))
        g["step"] = g["change_pct"].abs() > g["band_pct"]
        out.append(g)
    if not out:
        return points.assign(change_pct=pd.Series(dtype=float), band_pct=pd.Series(dtype=float),
                             step=pd.Series(dtype=bool))
    return pd.concat(out, ignore_index=True)[POINT_COLUMNS]


def write_history(history: History, out: Path) -> dict[str, str]:
    """``history.png``, ``history.json`` and ``history.html`` in ``out``; their paths by name."""
    out.mkdir(parents=True, exist_ok=True)
    png = history_plot(history.points, out / "history.png",
                       f"campaign {history.campaign}: each figure along the commit order")
    (out / "history.json").write_text(json.dumps(history.to_dict(), indent=2) + "\n")
    page = out / "history.html"
    page.write_text(history_html(history, png.read_bytes()))
    return {"plot": str(png), "json": str(out / "history.json"), "page": str(page)}


def history_html(history: History, png: bytes) -> str:
    """A standalone page: the plot and the table of points."""
    cols = ["figure", "commit_label", "subject", "runs", "value_mpps", "noise_pct", "limited_by", "change_pct", "step"]
    table = history.points[cols].to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="-", escape=True)
    steps = history.steps()
    said = ("; ".join(f"{r['figure']}: {r['change_pct']:+.1f} % at {r['commit_label']} {html.escape(r['subject'])}"
                      for r in steps.to_dict("records")) or "none beyond the noise")
    img = base64.b64encode(png).decode()
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>perfkit history: "
            f"{html.escape(history.campaign)}</title></head><body>"
            f"<h1>History of campaign {html.escape(history.campaign)}</h1>"
            f"<p>Each figure along the commit order (oldest first), with its noise band; a triangle is a lower "
            f"bound (limited by the generator or the testbed, not the DUT). Steps beyond the noise and "
            f"{history.threshold_pct:g} %: {said}.</p>"
            f"<img alt='history of {html.escape(history.campaign)}' src='data:image/png;base64,{img}'>"
            f"{table}</body></html>\n")
