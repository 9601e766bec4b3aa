"""``perfkit ab``: two revisions of the project, built apart, measured interleaved on one testbed.

``run_ab(repo, base, head, campaign, ...)``:

1. builds each revision in a git worktree of its own (``perfci.sides``: its BPF objects, its perfkit;
   with ``dataplane`` a description file of the user's repository, ``perfci.userside``: that
   revision's description and object, measured by this perfkit, the same for both sides);
2. runs the campaign's units ``repeats`` times on both, interleaved (A B, B A, ...; ``perfci.units``),
   each unit by that side's own perfkit;
3. gathers each side's units into one run of the store (``ab-<stamp>-base``, ``ab-<stamp>-head``),
   which ``perfkit compare``, ``perfkit report`` and ``perfkit history`` read like any run;
4. compares head with base with ``perfkit.compare`` (per figure: change, noise band from the repeats
   and search brackets, verdict) and writes into ``out``: ``pr-comment.md`` (verdict, table, what
   limited each figure), ``ab-change.png`` and ``ab-repeats.png``, and ``summary.json``.

The verdict: ``regression`` (a figure fell beyond max(threshold, noise): exit 1), ``improvement``,
or ``no change beyond the noise``. Worktrees are removed at the end, also after Ctrl-C or SIGTERM.
"""
from __future__ import annotations

import math
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from perfkit.analysis import load_run, throughput_table
from perfkit.campaign.model import Campaign
from perfkit.compare import KEY, Comparison, compare_runs
from perfkit.perfci.comment import ab_comment
from perfkit.perfci.plots import change_plot, repeats_plot
from perfkit.perfci.session import Session
from perfkit.perfci.sides import Side
from perfkit.perfci.userside import (PLUGIN, DataplaneSide, PluginSide, build_side, plugin_campaign, running_perfkit,
                                     side_campaign, side_kind, use_plugin)
from perfkit.perfci.units import write_json

NO_CHANGE = "no change beyond the noise"


@dataclass
class AbResult:
    """The outcome of one ``perfkit ab``."""

    base: Side
    head: Side
    base_run_id: str
    head_run_id: str
    comparison: Comparison
    limits: pd.DataFrame
    """Per figure (``compare.KEY``): ``limited_base``, ``limited_head``: what limited it on each side
    (``search.limits.LIMITS`` words, the repeats' distinct ones joined by ``/``)."""
    repeats: int
    order: list[tuple[int, int, str]]
    """(repeat, unit index, side) in the order the units ran."""
    out: Path
    files: dict[str, str]
    """Output name -> path: ``comment``, ``change_plot``, ``repeats_plot``, ``summary``."""
    wall_seconds: float
    root: Path | None = None
    """The runs directory both runs are in (the comment reads their perf stacks from it)."""

    @property
    def verdict(self) -> str:
        c = self.comparison.counts
        if c["regression"]:
            return "regression"
        if c["improvement"]:
            return "improvement"
        return NO_CHANGE

    @property
    def regressed(self) -> bool:
        return self.verdict == "regression"

    def headline(self) -> str:
        rows = self.comparison.rows
        if self.verdict == NO_CHANGE:
            return f"{NO_CHANGE}: {len(rows)} figure(s) within max(threshold {self.comparison.threshold_pct:g} %, noise)"
        worse = rows[rows["verdict"] == self.verdict].sort_values("change_pct")
        names = ", ".join(f"{r['scenario_key']} {r['metric']} {r['change_pct']:+.1f} %"
                          for r in worse.to_dict("records"))
        word = "slower" if self.verdict == "regression" else "faster"
        return f"{self.verdict}: {len(worse)} figure(s) {word} beyond the noise: {names}"

    def perfkit(self) -> dict[str, Any]:
        """The perfkit that measured each side: ``same_on_both_sides`` (the running one, for a
        user's dataplane; else each side's own commit), ``version``, ``git_sha_full`` (None when
        they differ) and ``commits`` (base, head)."""
        if isinstance(self.base, DataplaneSide):
            v = running_perfkit()
            commits = [self.base.perfkit_commit or v["git_sha_full"], self.head.perfkit_commit or v["git_sha_full"]]
            return {**v, "git_sha_full": commits[0], "git_sha": commits[0][:7], "same_on_both_sides": commits[0] == commits[1],
                    "commits": commits}
        same = self.base.commit == self.head.commit
        return {"same_on_both_sides": same, "git_sha_full": self.base.commit if same else None,
                "commits": [self.base.commit, self.head.commit]}

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "headline": self.headline(), "regressed": self.regressed,
                "perfkit": self.perfkit(),
                "base": side_dict(self.base, self.base_run_id), "head": side_dict(self.head, self.head_run_id),
                "repeats": self.repeats, "order": [list(o) for o in self.order],
                "comparison": self.comparison.to_dict(), "limits": self.limits.to_dict("records"),
                "out": str(self.out), "files": dict(self.files), "wall_seconds": round(self.wall_seconds, 1)}


def side_dict(side: Side, run_id: str) -> dict[str, Any]:
    """A side for outputs; a user's dataplane side adds ``dataplane`` (``DataplaneSide.facts``)."""
    extra = {"dataplane": side.facts()} if isinstance(side, DataplaneSide) else {}
    return {"name": side.name, "rev": side.rev, "commit": side.commit, "run_id": run_id, "unit_runs": list(side.runs),
            **extra}


def provenance_line(result: AbResult) -> str:
    """One sentence of the comment: what was built per side, and which perfkit measured."""
    pk = result.perfkit()
    if isinstance(result.base, PluginSide):
        a, b = result.base, result.head
        return (f"Plugin `{a.plugin}` installed from the repository at each revision into a side environment "
                f"(`{a.package}` base, `{b.package}` head); perfkit {pk['version']} `{pk['git_sha_full'][:7]}` "
                f"measured both: **perfkit's commit is the same on both sides**.")
    if isinstance(result.base, DataplaneSide):
        a, b = result.base, result.head
        return (f"Dataplane `{a.description}` of the repository built at each revision by its build command "
                f"(objects `{a.object_sha256[:12] or '-'}` base, `{b.object_sha256[:12] or '-'}` head); "
                f"perfkit {pk['version']} `{pk['git_sha_full'][:7]}` measured both: **perfkit's commit is the "
                f"same on both sides**.")
    return "Each side is perfkit at that revision: its BPF objects and its perfkit."


def figure_limits(run_id: str, root: Path) -> pd.DataFrame:
    """What limited each figure of a run: KEY + ``limited_by`` (repeats' distinct words, ``/``)."""
    tp = throughput_table(load_run(run_id, root))
    if tp.empty:
        return pd.DataFrame(columns=[*KEY, "limited_by"])
    return (tp.groupby(KEY, sort=False)["limited_by"]
            .agg(lambda s: "/".join(dict.fromkeys(str(x) for x in s if isinstance(x, str)))).reset_index())


def run_ab(repo: Path, base: str, head: str, campaign: Campaign | str | Path, *, repeats: int = 3,
           threshold_pct: float = 5.0, root: Path, out: Path, workdir: Path | None = None,
           dataplane: str | None = None, say: Callable[[str], None] = print) -> AbResult:
    """Build, measure interleaved, compare, write the outputs (module doc). ``dataplane``: a
    description file of ``repo`` (relative to it), or None / perfkit's own: the sides are perfkit's."""
    start = time.monotonic()
    plugin = side_kind(dataplane, plugins=True) == PLUGIN
    if not isinstance(campaign, Campaign) and not plugin:
        campaign = side_campaign(Path(campaign), repo, dataplane)
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="perfkit-ab-")) if own else Path(workdir)
    sides: list[Side] = []
    try:
        say(f"building base {base} and head {head} in worktrees under {work}")
        sides.append(build_side(repo, base, work / "trees", "base", "--base", dataplane))
        sides.append(build_side(repo, head, work / "trees", "head", "--head", dataplane))
        a, b = sides
        if isinstance(a, PluginSide):   # the campaign's parameters are the base revision's plugin's
            use_plugin(a)
            if not isinstance(campaign, Campaign):
                campaign = plugin_campaign(Path(campaign), a.plugin)
        session = Session(campaign, work, say)
        say(f"{len(session.units)} unit(s) x {repeats} repeat(s) per side, interleaved")
        measured = session.measure(a, b, repeats)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        runs = {}
        for name in (a.name, b.name):
            rid = f"ab-{stamp}-{name}-{measured[name].side.short[:7]}"
            session.merge(measured[name], root, rid, {"ab": {"base": a.commit, "head": b.commit}})
            runs[name] = rid
        return finish_ab(a, b, runs["base"], runs["head"], root, out, threshold_pct, repeats, session.order,
                         time.monotonic() - start)
    finally:
        for side in sides:
            side.close()
        if own:
            shutil.rmtree(work, ignore_errors=True)


def finish_ab(a: Side, b: Side, base_run: str, head_run: str, root: Path, out: Path, threshold_pct: float,
              repeats: int, order: list[tuple[int, int, str]], wall: float) -> AbResult:
    """Compare the two merged runs and write the outputs."""
    cmp = compare_runs(load_run(head_run, root), load_run(base_run, root), threshold_pct)
    limits = figure_limits(base_run, root).merge(figure_limits(head_run, root), on=KEY, how="outer",
                                                 suffixes=("_base", "_head"))
    limits = limits.rename(columns={"limited_by_base": "limited_base", "limited_by_head": "limited_head"})
    out.mkdir(parents=True, exist_ok=True)
    files = {"comment": str(out / "pr-comment.md"), "change_plot": str(out / "ab-change.png"),
             "repeats_plot": str(out / "ab-repeats.png"), "summary": str(out / "summary.json")}
    result = AbResult(a, b, base_run, head_run, cmp, limits, repeats, order, out, files, wall, root)
    change_plot(cmp, Path(files["change_plot"]), f"head {b.commit[:7]} vs base {a.commit[:7]}")
    repeats_plot({"base": load_run(base_run, root), "head": load_run(head_run, root)}, Path(files["repeats_plot"]))
    Path(files["comment"]).write_text(ab_comment(result_facts(result)))
    write_json(Path(files["summary"]), result.to_dict())
    return result


def result_facts(result: AbResult) -> dict[str, Any]:
    """What the comment needs, as plain data (``perfci.comment`` knows no runs)."""
    rows = result.comparison.rows.merge(result.limits, on=KEY, how="left") if not result.comparison.rows.empty \
        else result.comparison.rows.assign(limited_base="", limited_head="")
    return {"verdict": result.verdict, "headline": result.headline(), "threshold_pct": result.comparison.threshold_pct,
            "base": side_dict(result.base, result.base_run_id), "head": side_dict(result.head, result.head_run_id),
            "repeats": result.repeats, "caveats": list(result.comparison.caveats),
            "provenance": provenance_line(result),
            **({"root": str(result.root)} if result.root else {}),
            "rows": [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                     for r in rows.to_dict("records")],
            "plots": [Path(result.files["change_plot"]).name, Path(result.files["repeats_plot"]).name]}
