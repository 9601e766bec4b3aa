"""The pull-request comment of ``perfkit ab``: verdict, table, what limited each figure, the plots.

The first line is a hidden marker (``COMMENT_MARKER``): the CI jobs find the comment they posted
before by it and update that one, so a pull request keeps one perf comment however often it runs.
"""
from __future__ import annotations

from typing import Any

from perfkit.compare import MARKS

#: The hidden first line the CI jobs look for to update their own comment.
COMMENT_MARKER = "<!-- perfkit-ab -->"
#: What each limit word means for the figure, in a comment.
LIMIT_WORDS = {"dut": "DUT", "generator": "generator (lower bound)", "host stalls": "host stalls (lower bound)",
               "testbed": "testbed (lower bound)", "max rate": "max rate asked (lower bound)"}


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _limit(text: Any) -> str:
    if not text:
        return "-"
    return "/".join(LIMIT_WORDS.get(w, w) for w in str(text).split("/"))


def ab_comment(facts: dict[str, Any]) -> str:
    """Markdown from ``ab.result_facts`` (module doc); with ``facts["root"]`` (the runs directory), a
    regressed scenario's three functions that moved most (``perfkit.explain.top_movers``)."""
    from perfkit.explain import top_movers   # perf stacks and scipy: imported for a comment that needs them
    from perfkit.explain.movers import movers_text

    base, head = facts["base"], facts["head"]
    marks = MARKS["github"]
    verdict = facts["verdict"]
    icon = {"regression": ":red_circle:", "improvement": ":green_circle:"}.get(verdict, ":white_check_mark:")
    lines = [COMMENT_MARKER, f"### perfkit ab: `{head['commit'][:7]}` (head) vs `{base['commit'][:7]}` (base)", "",
             f"{icon} **{facts['headline']}**", "",
             f"Both revisions built in worktrees of their own and measured interleaved on one testbed, "
             f"{facts['repeats']} repeat(s) per unit and side (runs `{base['run_id']}`, `{head['run_id']}`).", ""]
    lines += [facts["provenance"], ""] if facts.get("provenance") else []
    lines += [f"> :warning: {c}" for c in facts.get("caveats", [])]
    lines += [""] if facts.get("caveats") else []
    header = ["", "scenario", "method", "figure", "base [Mpps]", "head [Mpps]", "change", "band",
              "limited by (base / head)"]
    lines += ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if 4 <= i <= 7 else "---"
                                                               for i in range(len(header))) + " |"]
    order = {"regression": 0, "missing": 1, "improvement": 2, "new": 3, "within noise": 4}
    for r in sorted(facts["rows"], key=lambda r: (order.get(r["verdict"], 9), r.get("change_pct") or 0.0)):
        change = _fmt(r.get("change_pct"), "+.1f") + (" %" if r.get("change_pct") is not None else "")
        lines.append("| " + " | ".join([
            marks.get(r["verdict"], ""), f"`{r['scenario_key']}`", str(r["label"]), str(r["metric"]),
            _fmt(r.get("baseline_mpps"), ".4g"), _fmt(r.get("current_mpps"), ".4g"), change,
            "±" + _fmt(r.get("band_pct"), ".1f") + " %",
            f"{_limit(r.get('limited_base'))} / {_limit(r.get('limited_head'))}"]) + " |")
    for key in dict.fromkeys(r["scenario_key"] for r in facts["rows"] if r["verdict"] == "regression"):
        moved = movers_text(top_movers(head["run_id"], base["run_id"], key, facts["root"])) if facts.get("root") else ""
        lines += [f"- `{key}`: moved most, ns per packet head - base: {moved}"] if moved else []
    lines += ["", f"_band = max(threshold {facts['threshold_pct']:g} %, noise of the repeats and search brackets "
                  "of both sides); a figure limited by anything but the DUT is a lower bound of its capacity._",
              "", "Plots (artifacts of this job): " + ", ".join(f"`{p}`" for p in facts["plots"]) + "."]
    return "\n".join(lines) + "\n"
