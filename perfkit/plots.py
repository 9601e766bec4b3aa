"""The report's figures (seaborn/matplotlib). Each takes a frame from ``perfkit.analysis`` or
``perfkit.compare`` and returns a ``matplotlib.figure.Figure`` with a title, axis labels with
units and a legend. ``setup()`` sets the common style once per notebook.

In a notebook, ``setup()`` also makes every figure display as ``<figure class="perfkit-figure">``
around its PNG, with the figure in words (``describe``) as the image's alt text and what it lacks
(``problems``: no title, no axis label with a unit, no legend) in ``data-problems``: so the
report's pages can be checked in a browser (``perfkit.report.check_pages``), and read without the
images. Tables show a missing value as ``MISSING``, not NaN.
"""
from __future__ import annotations

import base64
import html
import io
import math
import re
from typing import Sequence

import matplotlib

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FormatStrFormatter

from perfkit.analysis.run import frame_axis, variant_label
from perfkit.host import cpustat

#: Axis labels (with units) of the frame columns the figures plot.
LABELS = {
    "frame_size": "frame size [bytes]",
    "rx_gbps": "received [Gbit/s, L1]",
    "throughput_gbps": "throughput [Gbit/s, L1 of user frames]",
    "throughput_mpps": "throughput [Mpps]",
    "rx_mpps": "received [Mpps]",
    "offered_mpps": "offered load [Mpps]",
    "loss_pct": "loss [% of offered]",
    "latency_us": "one-way latency [µs]",
    "cpu_pct": "DUT CPU per core [%]",
    "cpu_cores_pct": "DUT CPU work, all DUT cores [% of one core]",
    "change_pct": "change vs baseline [%]",
    "step": "trial [#]",
}
VERDICT_COLORS = {"regression": "#d62728", "improvement": "#2ca02c", "within noise": "#7f7f7f",
                  "new": "#1f77b4", "missing": "#ff7f0e"}


#: A unit in an axis label: ``[Mpps]``, ``[% of offered]``, ``[#]``.
UNIT_RE = re.compile(r"\[[^\]]+\]")


def setup() -> None:
    """The common look: white grid, readable fonts, figures sized for an HTML report; in IPython,
    figures display as ``figure_html`` (see module doc)."""
    matplotlib.rcParams.update({"figure.dpi": 90, "savefig.dpi": 90, "figure.autolayout": False})
    sns.set_theme(style="whitegrid", context="notebook")
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        # load the backend now, not at the first figure: setting up the inline one drops Figure's formatters
        plt.switch_backend(matplotlib.get_backend())
        _register_html(shell)
        # the inline backend, set up at the first figure, drops every formatter of Figure
        shell.events.register("pre_run_cell", lambda *_: _register_html(shell))


def _register_html(shell: object) -> None:
    html_formatter = shell.display_formatter.formatters["text/html"]  # type: ignore[attr-defined]
    html_formatter.for_type(Figure, figure_html)
    html_formatter.for_type(pd.DataFrame, lambda frame: table_html(frame, index=labelled(frame), notebook=True))


def labelled(frame: pd.DataFrame) -> bool:
    """Whether ``frame``'s index says something: it has a name (a pivot's goal, frame size ...);
    an unnamed one is pandas' row numbers, which a report does not show."""
    return any(name is not None for name in frame.index.names)


#: How a missing value shows in the report's tables (a figure that does not exist, e.g. an NDR no
#: trial reached, or a latency not measured), instead of pandas' NaN.
MISSING = "–"


def table_html(frame: pd.DataFrame, index: bool = True, notebook: bool = False) -> str:
    """A frame as an HTML table (class ``dataframe``) with ``MISSING`` for missing values; ``notebook``:
    long frames cut at ``display.max_rows`` as a notebook would (texts stay whole: a report's wide
    tables wrap, ``perfkit.report.TABLE_CSS``), else whole."""
    if notebook:
        return frame.to_html(na_rep=MISSING, index=index, max_rows=pd.get_option("display.max_rows"),
                             show_dimensions=False)
    return frame.to_html(na_rep=MISSING, index=index)


def _titles(fig: Figure) -> list[str]:
    sup = fig._suptitle.get_text() if fig._suptitle is not None else ""  # noqa: SLF001 - no public getter
    return [t for t in [sup, *(ax.get_title() for ax in fig.axes)] if t.strip()]


def _legends(fig: Figure) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    return [t.get_text() for lg in legends for t in lg.get_texts() if t.get_text().strip()]


def _plotting_axes(fig: Figure) -> list:
    """The axes that show data (not turned off, e.g. the message of an empty figure)."""
    return [ax for ax in fig.axes if ax.axison and (ax.lines or ax.collections or ax.patches or ax.images)]


def describe(fig: Figure) -> str:
    """The figure in words: its titles, each axis label, and the legend's entries."""
    axes = "; ".join(f"x: {ax.get_xlabel() or '-'}, y: {ax.get_ylabel() or '-'}" for ax in _plotting_axes(fig)[:4])
    legend = ", ".join(dict.fromkeys(_legends(fig)))
    return " | ".join(part for part in (" / ".join(_titles(fig)), axes, f"legend: {legend}" if legend else "") if part)


def problems(fig: Figure) -> list[str]:
    """What the figure lacks of a title, an axis label with a unit, and a legend."""
    out = [] if _titles(fig) else ["no title"]
    axes = _plotting_axes(fig)
    # facet grids label only their outer axes: the figure needs a unit, not every axes
    if axes and not any(UNIT_RE.search(label) for ax in axes for label in (ax.get_xlabel(), ax.get_ylabel())):
        out.append("no axis label with a unit")
    if axes and not _legends(fig):
        out.append("no legend")
    return out


def figure_html(fig: Figure) -> str:
    """The figure as ``<figure class="perfkit-figure">``: its PNG, alt text, and problems."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    png = base64.b64encode(buf.getvalue()).decode()
    return (f'<figure class="perfkit-figure" data-problems="{html.escape("; ".join(problems(fig)))}">'
            f'<img src="data:image/png;base64,{png}" alt="{html.escape(describe(fig))}"/></figure>')


def _empty(title: str, message: str) -> Figure:
    fig, ax = plt.subplots(figsize=(7, 2))
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def missing_figure(tp: pd.DataFrame, goal: str, value: str = "throughput_gbps") -> str:
    """Why ``throughput_bars(tp, value, goal)`` has nothing to draw, in one line (what limited the
    units, ``_no_figure``); empty when it has a figure. A page says this instead of an empty chart."""
    rows = tp[tp["goal"] == goal]
    if value in rows and rows[value].notna().any():
        return ""
    return " ".join(_no_figure(rows, goal).split())


def _no_figure(rows: pd.DataFrame, goal: str) -> str:
    """Why a goal has no figure to plot: it was not measured, or no unit found a bound (what limited
    them, from ``limited_by``)."""
    name = "max-rate" if goal == "max" else goal.upper()
    if rows.empty:
        return f"no {name} results in this run"
    units = f"{len(rows)} unit" + ("s" if len(rows) > 1 else "")
    if goal == "max":
        return f"no max-rate figure: {units}, none measured"
    why = ", ".join(f"{n} by {lim}" for lim, n in rows["limited_by"].value_counts().items())
    found = "its one unit found no rate" if len(rows) == 1 else f"none of the {units} found a rate"
    return (f"no {name} figure: {found} that passed"
            + (f"\n(limited {why}; see the search page)" if why else ""))


def _variants(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the variant column holding the names the legends show."""
    out = frame.copy()
    out["variant"] = [variant_label(dp, v) for dp, v in zip(out["dataplane"], out["variant"])]
    return out


def _title(fig: Figure, title: str, subtitle: str = "") -> None:
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), y=1.0, va="bottom", fontsize=13)


def _move_legend(g: sns.FacetGrid, title: str) -> None:
    if g.legend is not None:
        g.legend.set_title(title)


# -- throughput -------------------------------------------------------------------------------
def throughput_bars(tp: pd.DataFrame, value: str = "rx_gbps", goal: str = "max", subtitle: str = "") -> Figure:
    """Bars of ``value`` vs frame size, one bar per variant (PGW-U: UL/DL; L4 LB: UDP/TCP), one panel
    per flow mode (and core count).

    ``tp``: ``analysis.throughput_table``; ``goal``: ``max`` (max-rate trials), ``ndr``, ``pdr0.5%`` ...
    Repeats are averaged; error bars show their standard deviation.
    """
    what = {"max": "at max rate (100 % of line rate offered)"}.get(goal, f"at {goal.upper()}")
    title = f"{LABELS.get(value, value).split(' [')[0].capitalize()} vs frame size {what}"
    rows = tp[tp["goal"] == goal]
    d = rows.dropna(subset=[value])
    if d.empty:
        return _empty(title, _no_figure(rows, goal))
    d = _variants(d)
    d["frame_size"] = frame_axis(d)  # a frame mix after the fixed sizes
    many_cores = d["dut_cores"].nunique() > 1
    order, hue_order = _frame_order(d), sorted(d["variant"].unique())
    g = sns.catplot(data=d, kind="bar", x="frame_size", y=value, hue="variant", col="flow_mode",
                    row="dut_cores" if many_cores else None, errorbar="sd", height=3.4, aspect=1.4,
                    order=order, hue_order=hue_order,
                    col_order=[m for m in ("single", "multi") if m in set(d["flow_mode"])], sharey=True)
    g.set_axis_labels(LABELS["frame_size"], LABELS.get(value, value))
    g.set_titles(row_template="{row_name} DUT core(s)", col_template="{col_name} flow")
    marked = _mark_lower_bounds(g, d, order, hue_order, "dut_cores" if many_cores else None)
    _move_legend(g, "")
    if marked and g.legend is not None:
        g.legend.remove()
        handles = [Patch(facecolor=c, label=v) for v, c in zip(hue_order, sns.color_palette(n_colors=len(hue_order)))]
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label=LOWER_BOUND_LABEL))
        g.figure.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.9))
    _title(g.figure, title, subtitle)
    return g.figure


def _frame_order(d: pd.DataFrame) -> list:
    """The x order of frame sizes: ascending, a frame mix last (``analysis.run.frame_axis``)."""
    col = d["frame_size"]
    if isinstance(col.dtype, pd.CategoricalDtype):
        return [c for c in col.cat.categories if c in set(col)]
    return sorted(col.unique())


#: The legend entry of a hatched bar (``analysis`` ``at_least``: ``search.limits.LOWER_BOUNDS`` set it).
LOWER_BOUND_LABEL = "≥: a lower bound (the generator,\nthe testbed, host stalls or the\nmaximum rate set it, not the DUT)"


def _mark_lower_bounds(g: sns.FacetGrid, d: pd.DataFrame, order: list, hue_order: list, row: str | None,
                       col: str = "flow_mode", hue: str = "variant") -> bool:
    """Hatch the bars whose figure is only a lower bound (``at_least``) and write ``≥`` above them."""
    if "at_least" not in d or not d["at_least"].any():
        return False
    for key, ax in g.axes_dict.items():
        row_val, col_val = key if row else (None, key)
        facet = d[d[col] == col_val] if row is None else d[(d[col] == col_val) & (d[row] == row_val)]
        for hue_val, bars in zip(hue_order, ax.containers):
            for x_val, bar in zip(order, bars):
                rows = facet[(facet[hue] == hue_val) & (facet["frame_size"] == x_val)]
                if not rows.empty and rows["at_least"].any():
                    bar.set_hatch("//")
                    bar.set_edgecolor("black")
                    ax.annotate("≥", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                                va="bottom", fontsize=9)
    return True


def best_worst_bars(bw: pd.DataFrame, subtitle: str = "") -> Figure:
    """Seed 003's bars: best-of-N, single-run and worst-of-N throughput [Mpps] vs frame size, one panel
    per dataplane variant (two dataplanes side by side). ``bw``: ``analysis.best_worst_single``."""
    title = "Throughput vs frame size: best-of-N, single run, worst-of-N (vNet-SLA binary search)"
    d = bw.dropna(subset=["throughput_mpps"])
    if d.empty:
        return _empty(title, "no best/worst-of-N search in this run (method bestworst)")
    d = _variants(d)
    d["panel"] = d["dataplane"] + ": " + d["variant"]
    d["frame_size"] = frame_axis(d)  # a frame mix after the fixed sizes
    order = _frame_order(d)
    hue_order = [s for s in dict.fromkeys(bw["series"]) if s in set(d["series"])]
    panels = list(dict.fromkeys(d["panel"]))
    g = sns.catplot(data=d, kind="bar", x="frame_size", y="throughput_mpps", hue="series", col="panel",
                    col_order=panels, col_wrap=min(len(panels), 2), errorbar=None, height=3.4, aspect=1.5,
                    order=order, hue_order=hue_order, sharey=False)
    g.set_axis_labels(LABELS["frame_size"], LABELS["throughput_mpps"])
    g.set_titles(col_template="{col_name}")
    marked = _mark_lower_bounds(g, d, order, hue_order, None, col="panel", hue="series")
    if g.legend is not None:
        g.legend.remove()
    handles = [Patch(facecolor=c, label=v) for v, c in zip(hue_order, sns.color_palette(n_colors=len(hue_order)))]
    if marked:
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label=LOWER_BOUND_LABEL))
    g.figure.legend(handles=handles, title="search", loc="upper left", bbox_to_anchor=(1.0, 0.9))
    _title(g.figure, title, subtitle)
    return g.figure


def throughput_lines(tp: pd.DataFrame, value: str = "throughput_mpps", subtitle: str = "") -> Figure:
    """``value`` vs frame size: one panel per goal (max rate, NDR, PDR ...), hue variant, style flows."""
    title = f"{LABELS.get(value, value).split(' [')[0].capitalize()} vs frame size, per method"
    d = tp.dropna(subset=[value])
    if d.empty:
        return _empty(title, "no throughput results in this run")
    d = _variants(d)
    if "frame_mix" in d:  # a frame size axis: a mix has no place on it (the bar plots show it)
        d = d[d["frame_mix"].fillna("") == ""]
        if d.empty:
            return _empty(title, "only frame mixes in this run: see the bar plots")
    d["goal"] = d["goal"].map(lambda g: "max rate" if g == "max" else g.upper())
    # two methods with a goal of the same name (a single-run NDR and an ndrpdr's) are two panels
    shared = d.groupby("goal")["label"].transform("nunique") > 1
    d["goal"] = d["goal"].where(~shared, d["label"] + ": " + d["goal"])
    d["DUT cores"] = d["dut_cores"].astype(str)
    g = sns.relplot(data=d, kind="line", x="frame_size", y=value, hue="variant", style="flow_mode",
                    size="DUT cores" if d["dut_cores"].nunique() > 1 else None, col="goal", markers=True,
                    errorbar="sd", height=3.4, aspect=1.2, col_wrap=min(d["goal"].nunique(), 4),
                    facet_kws={"sharey": False})
    for ax in g.axes.flat:
        ax.set_xscale("log", base=2)
        ticks = sorted(d["frame_size"].unique())
        ax.set_xticks(ticks, [str(t) for t in ticks], rotation=45)
        ax.minorticks_off()
    g.set_axis_labels(LABELS["frame_size"], LABELS.get(value, value))
    g.set_titles(col_template="{col_name}")
    _move_legend(g, "")
    _title(g.figure, title, subtitle)
    return g.figure


def loss_bars(tp: pd.DataFrame, subtitle: str = "") -> Figure:
    """Loss at max rate [% of offered] vs frame size, one bar per variant, per flow mode."""
    title = "Loss at max rate vs frame size"
    d = tp[tp["goal"] == "max"].dropna(subset=["loss_ratio"]).copy()
    if d.empty:
        return _empty(title, "no max-rate results in this run")
    d["loss_pct"] = d["loss_ratio"] * 100
    d = _variants(d)
    d["frame_size"] = frame_axis(d)
    g = sns.catplot(data=d, kind="bar", x="frame_size", y="loss_pct", hue="variant", col="flow_mode",
                    errorbar="sd", height=3.2, aspect=1.4, order=_frame_order(d))
    g.set_axis_labels(LABELS["frame_size"], LABELS["loss_pct"])
    g.set_titles(col_template="{col_name} flow")
    _move_legend(g, "")
    _title(g.figure, title, subtitle)
    return g.figure


def latency_percentiles(lat: pd.DataFrame, subtitle: str = "") -> Figure:
    """Latency percentiles vs frame size (log scale), one panel per variant x load."""
    title = "One-way latency percentiles vs frame size"
    if lat.empty:
        return _empty(title, "no latency measured in this run")
    d = _variants(lat)
    d["frame_size"] = frame_axis(d)
    loads = list(dict.fromkeys(d["load"]))
    g = sns.catplot(data=d, kind="point", x="frame_size", y="latency_us", hue="percentile", col="variant", order=_frame_order(d),
                    row="load" if len(loads) > 1 else None, row_order=loads if len(loads) > 1 else None,
                    errorbar=None, height=3.0, aspect=1.4, dodge=0.3)
    for ax in g.axes.flat:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.tick_params(axis="y", which="minor", labelsize=7)
    g.set_axis_labels(LABELS["frame_size"], LABELS["latency_us"] + ", log")
    g.set_titles(row_template="at {row_name}", col_template="{col_name}")
    _move_legend(g, "percentile")
    _title(g.figure, title, subtitle)
    return g.figure


# -- CPU --------------------------------------------------------------------------------------
def cpu_vs_frame_size(frame: pd.DataFrame, models: Sequence[object], subtitle: str = "",
                      target: str = "cpu_pct") -> Figure:
    """Seed 001's figure: DUT CPU per core vs frame size, hue = DUT cores, with each core count's
    fitted line (``analysis.fit_cpu_models(...).per_cores``); one panel per variant."""
    title = "DUT CPU per core vs frame size, with linear fits per core count"
    if frame.empty:
        return _empty(title, "no CPU figures in this run")
    variants = sorted(frame["variant"].unique())
    fig, axes = plt.subplots(1, len(variants), figsize=(5.5 * len(variants), 4), squeeze=False, sharey=True)
    cores = sorted(frame["dut_cores"].unique())
    palette = dict(zip(cores, sns.color_palette("viridis", len(cores))))
    fits = {(m.variant, f.group.get("dut_cores")): f for m in models for f in m.per_cores}
    for ax, variant in zip(axes[0], variants):
        d = frame[frame["variant"] == variant]
        sns.scatterplot(data=d, x="frame_size", y=target, hue="dut_cores", palette=palette, style="flow_mode",
                        ax=ax, s=60, alpha=0.8, legend=False)
        xs = np.linspace(d["frame_size"].min(), d["frame_size"].max(), 50)
        for c in cores:
            fit = fits.get((variant, int(c)))
            if fit is not None:
                ax.plot(xs, fit.predict(pd.DataFrame({"frame_size": xs})), color=palette[c], lw=2)
        ax.set_title(variant_label(str(d["dataplane"].iloc[0]), variant))
        ax.set_xlabel(LABELS["frame_size"])
        ax.set_ylabel(LABELS["cpu_pct"])
    handles = [Line2D([], [], color=palette[c], marker="o", lw=2, label=f"{c} core(s): points + fit") for c in cores]
    handles += [Line2D([], [], color="gray", marker=m, lw=0, label=f"{f} flow")
                for f, m in (("single", "o"), ("multi", "X")) if f in set(frame["flow_mode"])]
    fig.tight_layout()
    fig.legend(handles=handles, title="DUT cores", loc="upper left", bbox_to_anchor=(1.0, 0.9))
    _title(fig, title, subtitle)
    return fig


def cpu_mode_heatmap(modes: pd.DataFrame, subtitle: str = "", max_rows: int = 40) -> Figure:
    """The DUT cores' time by CPU mode (``analysis.cpu_modes_per_core``): one row per scenario and
    DUT core, one column per mode, the mean share of the core's time [%]."""
    title = "DUT cores' time by CPU mode, per scenario and core"
    if modes.empty:
        return _empty(title, "no /proc/stat figures of the DUT cores in this run")
    d = modes.assign(row=modes["scenario_key"] + "  cpu " + modes["cpu"].astype(str))
    order = [m for m in cpustat.MODES if m in set(d["mode"])]
    rows = list(dict.fromkeys(d["row"]))[:max_rows]
    grid = d[d["row"].isin(rows)].pivot_table(index="row", columns="mode", values="share_pct", aggfunc="mean")
    grid = grid.reindex(index=rows, columns=order)
    fig, ax = plt.subplots(figsize=(1.1 * len(order) + 6, 0.35 * len(rows) + 2))
    sns.heatmap(grid, annot=True, fmt=".0f", cmap="rocket_r", vmin=0, vmax=100, ax=ax,
                cbar_kws={"label": "share of the core's time [%]"})
    ax.set_xlabel("CPU mode (/proc/stat)")
    ax.set_ylabel("scenario and DUT core")
    trials = int(modes["trials"].max())
    ax.legend(handles=[Patch(facecolor="none", edgecolor="none",
                             label=f"a cell: the mean over the scenario's trials (up to {trials})")],
              loc="upper left", bbox_to_anchor=(0, -0.12 - 0.6 / max(len(rows), 1)), frameon=False)
    _title(fig, title, subtitle + (f" (first {max_rows} rows)" if d["row"].nunique() > max_rows else ""))
    return fig


# -- the dataplane's own counters ------------------------------------------------------------------
def counter_rate(rates: pd.DataFrame, subtitle: str = "", window: tuple[float, float] | None = None) -> Figure:
    """A dataplane counter's rate over a trial (``perfkit.metrics.dpcounters.counter_rate_frame``): one
    line per series (a VIP, a real, an outcome ...), against the seconds after the trial's start;
    ``window`` (start, end [unix s]) shades the trial."""
    metric = str(rates["metric"].iloc[0]) if not rates.empty else "counter"
    unit = "bytes" if metric.endswith("_bytes_total") else "packets"
    title = f"{metric}: rate per scrape interval"
    if rates.empty:
        return _empty(title, "no samples of this counter in the window (was perfkit exporter scraped?)")
    labels = [c for c in rates.columns if c not in ("metric", "time", "seconds", "increase", "rate", "dataplane",
                                                     "testbed")]
    d = rates.assign(series=[", ".join(f"{k}={r[k]}" for k in labels) or metric for _, r in rates.iterrows()])
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, g in d.groupby("series", sort=True):
        ax.step(g["seconds"], g["rate"], where="pre", label=name)
    if window is not None:
        start = float(rates["time"].iloc[0] - rates["seconds"].iloc[0])
        ax.axvspan(window[0] - start, window[1] - start, color="0.9", zorder=0, label="trial")
    ax.set_xlabel("time after the trial's start [s]")
    ax.set_ylabel(f"rate [{unit}/s]")
    ax.legend(title=", ".join(labels) or "series", fontsize=8)
    _title(fig, title, subtitle)
    return fig


def residuals(models: Sequence[object], subtitle: str = "") -> Figure:
    """Residuals of each variant's multivariate model vs its prediction, hue = frame size."""
    title = "Multivariate CPU model: residuals vs predicted"
    fits = [m.multivariate for m in models if getattr(m, "multivariate", None) is not None]
    if not fits:
        return _empty(title, "no multivariate model (too few trials with CPU figures)")
    fig, axes = plt.subplots(1, len(fits), figsize=(5.5 * len(fits), 3.8), squeeze=False, sharey=True)
    for ax, fit in zip(axes[0], fits):
        r = fit.residuals_
        sns.scatterplot(data=r, x="predicted", y="residual", hue="frame_size", palette="viridis", ax=ax, s=35)
        ax.axhline(0, color="black", lw=1, ls="--", label="zero")
        cv = f"{fit.cv_r2_:.2f} cross-validated" if not math.isnan(fit.cv_r2_) else "not cross-validated"
        ax.set_title(f"{fit.group.get('label', fit.group.get('variant'))}: R² {fit.r2_:.2f} in-sample, {cv}"
                     + (" - weak" if fit.weak else "") + f", n = {fit.n_samples_}", fontsize=10)
        ax.set_xlabel("predicted " + LABELS.get(fit.target, fit.target))
        ax.set_ylabel("residual (actual - predicted) [% points]")
        ax.legend(title="frame size [bytes]", fontsize=8)
    fig.tight_layout()
    _title(fig, title, subtitle)
    return fig


# -- searches ---------------------------------------------------------------------------------
def search_paths(path: pd.DataFrame, col_wrap: int = 4, max_units: int = 40, subtitle: str = "") -> Figure:
    """Trial-by-trial path of each search: offered load of each trial (log scale), colour = verdict,
    marker = phase, with the final bounds of the first goal (dashed: lower, dotted: upper)."""
    title = "Search paths: offered load of each trial, and the bounds found"
    if path.empty:
        return _empty(title, "no search in this run")
    units = list(dict.fromkeys(path["unit"]))[:max_units]
    d = path[path["unit"].isin(units)].copy()
    d["panel"] = d["unit"].str.replace("__", "\n", regex=False)
    pdrs = sorted((v for v in set(d["verdict"]) if v.startswith("loss <=")), key=lambda v: float(v.split()[-1][:-1]))
    verdicts = [v for v in ("no loss",) if v in set(d["verdict"])] + pdrs + [v for v in ("loss",) if v in set(d["verdict"])]
    shades = ["#ff7f0e", "#bcbd22", "#17becf", "#9467bd"]
    colors = {"no loss": "#2ca02c", "loss": "#d62728", **dict(zip(pdrs, shades * 3))}
    colors = {v: colors[v] for v in verdicts}
    phases = list(dict.fromkeys(d["phase"]))
    markers = dict(zip(phases, ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"] * 3))
    g = sns.FacetGrid(d, col="panel", col_wrap=min(col_wrap, len(units)), height=2.6, aspect=1.3, sharey=False)
    g.map_dataframe(sns.lineplot, x="step", y="offered_mpps", color="lightgray", lw=1, zorder=1)
    g.map_dataframe(sns.scatterplot, x="step", y="offered_mpps", hue="verdict", hue_order=verdicts,
                    palette=colors, style="phase", markers=markers, s=45, zorder=2, legend=False)
    for ax, unit in zip(g.axes.flat, units):
        u = d[d["unit"] == unit].iloc[0]
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.3g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%.3g"))
        ax.tick_params(axis="y", which="minor", labelsize=7)
        if pd.notna(u["lower_mpps"]):
            ax.axhline(u["lower_mpps"], color="tab:green", ls="--", lw=1)
        if pd.notna(u["upper_mpps"]):
            ax.axhline(u["upper_mpps"], color="tab:red", ls=":", lw=1)
    g.set_axis_labels(LABELS["step"], LABELS["offered_mpps"] + ", log")
    g.set_titles(col_template="{col_name}", size=8)
    handles = [Patch(color=c, label=v) for v, c in colors.items()]
    handles += [Line2D([], [], color="gray", marker=m, lw=0, label=f"phase {ph}") for ph, m in markers.items()]
    handles += [Line2D([], [], color="tab:green", ls="--", label="lower bound"),
                Line2D([], [], color="tab:red", ls=":", label="upper bound")]
    g.figure.tight_layout()
    g.figure.legend(handles=handles, title="trial", loc="upper left", bbox_to_anchor=(1.0, 0.95))
    _title(g.figure, title, subtitle + (f" (first {max_units} of {path['unit'].nunique()} searches)"
                                        if path["unit"].nunique() > max_units else ""))
    return g.figure


# -- comparison -------------------------------------------------------------------------------
def compare_changes(rows: pd.DataFrame, threshold_pct: float, subtitle: str = "") -> Figure:
    """Change of each scenario's figure vs the baseline [%], bars colored by verdict, error bars =
    the noise band, dashed lines at +- threshold."""
    title = "Change vs baseline per scenario"
    d = rows.dropna(subset=["change_pct"]) if not rows.empty else rows
    if d.empty:
        return _empty(title, "no scenario in common with the baseline")
    d = d.sort_values("change_pct").reset_index(drop=True)
    names = d["scenario_key"] + " " + d["metric"]
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.28 * len(d) + 1.2)))
    colors = [VERDICT_COLORS.get(v, "gray") for v in d["verdict"]]
    noise = d["noise_pct"].fillna(0).to_numpy()
    ax.barh(range(len(d)), d["change_pct"], color=colors, xerr=noise, error_kw={"ecolor": "black", "lw": 0.8})
    ax.set_yticks(range(len(d)), names, fontsize=7)
    for x in (-threshold_pct, threshold_pct):
        ax.axvline(x, color="black", ls="--", lw=1)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel(LABELS["change_pct"])
    ax.set_ylabel("scenario, figure")
    present = [v for v in VERDICT_COLORS if v in set(d["verdict"])]
    handles = [Patch(color=VERDICT_COLORS[v], label=v) for v in present]
    handles += [Line2D([], [], color="black", ls="--", label=f"threshold ±{threshold_pct:g} %"),
                Line2D([], [], color="black", marker="|", lw=0.8, label="noise band")]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    fig.tight_layout()
    _title(fig, title, subtitle)
    return fig



#: Colours of ``perfkit.analysis.knobs`` verdicts.
KNOB_VERDICT_COLORS = {"lower": "tab:blue", "higher": "tab:red", "no effect beyond the noise": "tab:gray",
                       "one trial each: no interval": "tab:olive"}


def knob_effects(effects: pd.DataFrame, metric: str = "dut_ns_per_packet", unit: str = "ns",
                 subtitle: str = "") -> Figure:
    """Per knob value and scenario, the change of ``metric`` against the knob's baseline value
    [``unit``], with its confidence interval; bars coloured by verdict."""
    title = f"What each knob did to {metric}"
    d = effects[effects["metric"] == metric] if not effects.empty else effects
    if d.empty:
        return _empty(title, "no knob was varied in this run")
    d = d.reset_index(drop=True)
    names = d["knob"] + "=" + d["value"] + " vs " + d["baseline"] + ": " + d["context"]
    fig, ax = plt.subplots(figsize=(9, max(2.5, 0.3 * len(d) + 1.2)))
    err = np.vstack([(d["change"] - d["ci_low"]).fillna(0).to_numpy(), (d["ci_high"] - d["change"]).fillna(0).to_numpy()])
    ax.barh(range(len(d)), d["change"], color=[KNOB_VERDICT_COLORS.get(v, "gray") for v in d["verdict"]],
            xerr=err, error_kw={"ecolor": "black", "lw": 0.8})
    ax.set_yticks(range(len(d)), names, fontsize=7)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel(f"change of {metric} [{unit}]")
    ax.set_ylabel("knob value vs baseline, scenario")
    handles = [Patch(color=c, label=v) for v, c in KNOB_VERDICT_COLORS.items() if v in set(d["verdict"])]
    handles.append(Line2D([], [], color="black", marker="|", lw=0.8, label="95 % confidence interval"))
    ax.legend(handles=handles, loc="best", fontsize=8)
    fig.tight_layout()
    _title(fig, title, subtitle)
    return fig


def load_fit(model: object | None, subtitle: str = "") -> Figure:
    """The DUT's measured load against the load model (``analysis.fit_load``), one point per trial:
    left, each scenario its own line (in-sample); right, the model fitted without the trial's
    scenario (cross-validated). The diagonal is a perfect model."""
    title = "DUT load (packet threads' CPU): measured vs model"
    if model is None:
        return _empty(title, "no DUT load model: no scenario has trials at several rates with the DUT's CPU measured")
    d = _variants(model.trials)
    d["frame size [bytes]"] = d["frame_size"].astype(int).astype(str)
    panels = [("fitted", f"each scenario its own line: R² {model.r2_:.2f} (in-sample)")]
    if not math.isnan(model.cv_r2_):
        panels.append(("cv_predicted", f"one scenario left out: R² {model.cv_r2_:.2f} (cross-validated)"
                       + (" - weak" if model.weak else "")))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels) + 1.5, 4.3), squeeze=False)
    lo = min(d["load_cores"].min(), *(d[c].min() for c, _ in panels))
    hi = max(d["load_cores"].max(), *(d[c].max() for c, _ in panels))
    for i, (ax, (col, name)) in enumerate(zip(axes[0], panels)):
        sns.scatterplot(data=d, x=col, y="load_cores", hue="variant", style="frame size [bytes]", s=40, ax=ax,
                        legend=i == len(panels) - 1)
        ax.plot([lo, hi], [lo, hi], color="black", lw=1, ls="--", label="measured = model")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("model [cores: packet threads' CPU-seconds per second]")
        ax.set_ylabel("measured [cores]")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    _title(fig, title, subtitle)
    return fig


def marginal_cost(model: object | None, subtitle: str = "") -> Figure:
    """Each scenario's marginal cost per packet (its line's slope, ± one standard error) against frame
    size, and what the second stage (frame size, variant, parameters, cores) makes of it."""
    title = "DUT marginal cost per packet, per scenario"
    if model is None or model.scenarios.empty:
        return _empty(title, "no DUT load model: no scenario has trials at several rates")
    d = _variants(model.scenarios)
    fig, ax = plt.subplots(figsize=(7.5, 4.3))
    variants = list(dict.fromkeys(d["variant"]))
    flows = sorted(d["flows"].unique())
    palette = dict(zip(variants, sns.color_palette("tab10", len(variants))))
    markers = dict(zip(flows, ["o", "s", "D", "^", "v", "P"] * 3))
    shift = (d["frame_size"].max() - d["frame_size"].min() or 100) * 0.012     # side by side, not on top
    for (i, v), f in ((iv, f) for iv in enumerate(variants) for f in flows):
        g = d[(d["variant"] == v) & (d["flows"] == f)]
        if g.empty:
            continue
        x = g["frame_size"] + (i - (len(variants) - 1) / 2) * shift
        ax.errorbar(x, g["marginal_ns"], yerr=g["marginal_se"], fmt=markers[f], color=palette[v], capsize=3, ms=6)
        if model.marginal is not None:
            ax.scatter(x, g["marginal_predicted"], marker="_", s=200, color=palette[v], lw=2)
    handles = [Patch(color=palette[v], label=v) for v in variants]
    handles += [Line2D([], [], color="gray", marker=markers[f], lw=0, label=f"{f} flow{'s' if f > 1 else ''}: "
                       "measured (± 1 s.e.)") for f in flows]
    if model.marginal is not None:
        handles.append(Line2D([], [], color="gray", marker="_", ms=14, mew=2, lw=0, label="second stage"))
    ax.set_xlabel(LABELS["frame_size"])
    ax.set_ylabel("marginal cost [ns per packet]")
    fit = model.marginal
    ax.set_title("second stage: " + (f"R² {fit.r2_:.2f} in-sample, "
                                     + (f"{fit.cv_r2_:.2f} cross-validated" if not math.isnan(fit.cv_r2_) else "not cross-validated")
                                     + (" - weak" if fit.weak else "") if fit is not None else "too few scenarios"),
                 fontsize=10)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    _title(fig, title, subtitle)
    return fig
