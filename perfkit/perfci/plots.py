"""The figures of performance CI (matplotlib, drawn off-screen, saved as PNG).

- ``change_plot``: ``perfkit ab``'s change per figure with its noise band, coloured by verdict;
- ``repeats_plot``: every repeat of every figure on both sides, in the order they ran: a drift of the
  host shows as both sides moving together;
- ``history_plot``: a figure along the commit order (``perfkit history``), its noise band, a
  lower-bound figure (generator-, testbed-limited ...) drawn as an upward triangle.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from perfkit.analysis import RunData, throughput_table
from perfkit.compare import Comparison
from perfkit.plots import VERDICT_COLORS

SIDE_COLORS = {"base": "#1f77b4", "head": "#ff7f0e"}


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    return path


def figure_name(r: dict) -> str:
    return f"{r['scenario_key']} {r['label']} {r['metric']}"


def change_plot(cmp: Comparison, path: Path, subtitle: str) -> Path:
    """Horizontal bars: change [%] per figure, the band as a grey span around 0."""
    rows = cmp.rows.to_dict("records")
    fig = Figure(figsize=(8, 0.5 * max(2, len(rows)) + 1.2))
    ax = fig.add_subplot()
    reach = 5.0
    for i, r in enumerate(rows):
        change = r["change_pct"] if pd.notna(r["change_pct"]) else 0.0
        ax.fill_betweenx([i - 0.4, i + 0.4], -r["band_pct"], r["band_pct"], color="#cccccc", alpha=0.6, zorder=0)
        ax.barh(i, change, height=0.5, color=VERDICT_COLORS.get(r["verdict"], "#7f7f7f"), zorder=2)
        for edge in (-r["band_pct"], r["band_pct"]):
            ax.plot([edge, edge], [i - 0.4, i + 0.4], "--", color="#555555", lw=1, zorder=3)
        ax.annotate(f"{change:+.1f} %", (change, i), textcoords="offset points", xytext=(4 if change >= 0 else -4, 0),
                    va="center", ha="left" if change >= 0 else "right", fontsize=8, zorder=4)
        reach = max(reach, abs(change), r["band_pct"])
    ax.set_xlim(-reach * 1.3, reach * 1.3)
    ax.set_yticks(range(len(rows)), [figure_name(r) for r in rows], fontsize=8)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("change of head vs base [%]")
    ax.set_title(f"perfkit ab: {subtitle}", fontsize=10)
    handles = [Line2D([], [], color=c, lw=6, label=v) for v, c in VERDICT_COLORS.items()
               if any(r["verdict"] == v for r in rows)]
    handles.append(Line2D([], [], color="#cccccc", lw=6, label="noise band (dashed: its edges)"))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _save(fig, path)


def repeats_plot(runs: dict[str, RunData], path: Path) -> Path:
    """One panel per figure: each repeat's value [Mpps] by side, against the repeat."""
    tables = {name: throughput_table(run) for name, run in runs.items()}
    keys = list(dict.fromkeys(k for tp in tables.values() for k in zip(tp["scenario_key"], tp["label"], tp["goal"])))
    fig = Figure(figsize=(8, 2.6 * max(1, len(keys))))
    for i, key in enumerate(keys or [("", "", "")]):
        ax = fig.add_subplot(max(1, len(keys)), 1, i + 1)
        for name, tp in tables.items():
            d = tp[(tp["scenario_key"] == key[0]) & (tp["label"] == key[1]) & (tp["goal"] == key[2])]
            ax.plot(d["repeat"], d["throughput_mpps"], "o-", color=SIDE_COLORS.get(name), label=name)
        ax.set_title(" ".join(key), fontsize=9)
        ax.set_xlabel("repeat [#]")
        ax.set_ylabel("throughput [Mpps]")
        ax.legend(fontsize=8)
    fig.suptitle("every repeat, both sides (interleaved: a host drift moves both)", fontsize=10)
    return _save(fig, path)


def history_figure(points: pd.DataFrame, title: str) -> Figure:
    """One panel per figure (``history.points`` rows): value [Mpps] per commit, band, lower bounds,
    the steps circled with their change."""
    figs = list(dict.fromkeys(points["figure"])) if not points.empty else []
    fig = Figure(figsize=(max(6, 0.7 * points["commit"].nunique() + 3) if not points.empty else 6,
                          3 * max(1, len(figs))))
    for i, name in enumerate(figs or [""]):
        ax = fig.add_subplot(max(1, len(figs)), 1, i + 1)
        d = points[points["figure"] == name].sort_values("position") if figs else points
        if d.empty:
            ax.set_title("no runs", fontsize=9)
            continue
        x = d["position"].to_numpy()
        y = d["value_mpps"].to_numpy(dtype=float)
        band = y * d["noise_pct"].to_numpy(dtype=float) / 100
        ax.plot(x, y, "-", color="#1f77b4", lw=1)
        ax.fill_between(x, y - band, y + band, color="#1f77b4", alpha=0.2, label="noise band")
        low = d["at_least"].to_numpy(dtype=bool)
        ax.plot(x[~low], y[~low], "o", color="#1f77b4", label="DUT-limited")
        if low.any():
            ax.plot(x[low], y[low], "^", color="#ff7f0e", label="lower bound (not DUT-limited)")
        step = d["step"].to_numpy(dtype=bool)
        if step.any():
            ax.plot(x[step], y[step], "o", mfc="none", mec="#d62728", ms=13, mew=2, label="step beyond the noise")
            for xi, yi, c in zip(x[step], y[step], d["change_pct"].to_numpy(dtype=float)[step]):
                ax.annotate(f"{c:+.0f} %", (xi, yi), textcoords="offset points", xytext=(8, 8), fontsize=8,
                            color="#d62728")
        ax.set_xticks(x, d["commit_label"], rotation=45, ha="right", fontsize=8)
        ax.set_xlabel("commit (oldest first)")
        ax.set_ylabel("throughput [Mpps]")
        ax.set_title(name, fontsize=9)
        top = float(np.nanmax(y + band))
        ax.set_ylim(bottom=0, top=top * 1.2 if np.isfinite(top) and top > 0 else None)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def history_plot(points: pd.DataFrame, path: Path, title: str) -> Path:
    """``history_figure`` saved as PNG."""
    return _save(history_figure(points, title), path)
