"""What the experiment notebook leaves: its outputs in ``<run>/experiment/``, its page, the report set.

``save_outputs`` writes the outcome, the throughput table, the fitted models and the figures
(``outcome.json``, ``throughput.csv``, ``models.json``, ``figures/*.png``); ``outcome_of`` reads the
outcome back; ``render_page`` makes the executed notebook the report's ``experiment.html``;
``write_report`` writes the run's report set (``perfkit report``).
"""
from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any, Mapping

from perfkit.durable import atomic_write
from perfkit.experiment.measure import ExperimentRun
from perfkit.experiment.models import Fits
from perfkit.report import DEFAULT_REPORTS, Page, _error_page, build_report, export_html

#: Subdirectory of the run directory the notebook's outputs go to.
OUTPUTS_DIR = "experiment"


def write_report(exp_run: ExperimentRun, reports: str | Path | None = None) -> str:
    """The run's HTML report set (``perfkit report``) in ``reports/<run_id>/`` (None:
    ``perfkit.report.DEFAULT_REPORTS``, as ``--reports``' default), as markdown saying where it is."""
    rep = build_report(exp_run.run_id, data_root=exp_run.root,
                       reports_root=reports if reports is not None else DEFAULT_REPORTS, progress=False)
    failed = [p.name for p in rep.pages if not p.ok]
    return f"report: `{rep.index}`" + (f" (failed pages: {', '.join(failed)})" if failed else "")


def save_outputs(exp_run: ExperimentRun, fits: Fits, figs: Mapping[str, Any]) -> dict[str, str]:
    """Write the outcome, the figures of the throughput table, the fitted models and the figures
    (PNG) into ``<run>/experiment/``; returns name -> path."""
    out = exp_run.path / OUTPUTS_DIR
    (out / "figures").mkdir(parents=True, exist_ok=True)
    paths: dict[str, str] = {}

    def put(name: str, data: bytes) -> None:
        atomic_write(out / name, data, point="experiment.output")
        paths[name] = str(out / name)

    put("outcome.json", json.dumps({**exp_run.outcome.to_dict(), "messages": exp_run.messages},
                                   indent=1, default=str).encode())
    put("throughput.csv", fits.throughput.to_csv(index=False).encode())
    put("models.json", json.dumps(fits.to_dict(), indent=1, default=_json_default).encode())
    for name, fig in figs.items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        put(f"figures/{name}.png", buf.getvalue())
    return paths


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def render_page(executed: Path, out_dir: Path, error: str | None = None) -> Page:
    """``out_dir/experiment.html`` from the executed notebook (an error page if it is missing); the
    ``perfkit.report.Page`` the report's index lists first."""
    page = Page("experiment", "Experiment", "the notebook that drove this run: parameters, run, metrics, models",
                "experiment.html", ok=error is None, error=error)
    html = export_html(executed, page.title) if executed.exists() else _error_page(page.title, error or "not run")
    (out_dir / page.file).write_text(html)
    return page


def outcome_of(run_id: str, root: str | Path) -> dict[str, Any] | None:
    """The outcome the notebook saved for a run (``<run>/experiment/outcome.json``), or None."""
    p = Path(root) / run_id / OUTPUTS_DIR / "outcome.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None
