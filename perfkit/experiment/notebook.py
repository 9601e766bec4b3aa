"""Executing ``notebooks/experiment.ipynb`` with papermill: what ``perfkit experiment`` does.

The notebook's parameters are ``campaign``, a mapping with a campaign file's keys
(``perfkit.campaign.schema``), and the run parameters ``RUN_PARAMETERS``. ``run_notebook`` takes
the campaign (a file, a mapping, or the notebook's own ``default_campaign()``), makes the ``edits``
(``perfkit.campaign.edit``: ``{"generator.backend": "sim"}``, ``-p generator.backend=sim``), checks
it before any kernel starts, executes the notebook, keeps the executed notebook with the run
(``<run>/experiment.ipynb``), renders it to ``<reports>/<run_id>/experiment.html`` and, with
``report``, writes the report set whose index links that page first.

Ctrl-C and SIGTERM during the execution interrupt the kernel (the runner then takes the testbed
down and marks the run ``interrupted``); ``resume=RUN_ID`` continues the run with its stored campaign.
"""
from __future__ import annotations

import ast
import contextlib
import json
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from perfkit import stop
from perfkit.campaign.edit import apply_edits
from perfkit.campaign.schema import load_mapping, read_text
from perfkit.durable import atomic_write
from perfkit.errors import ConfigError
from perfkit.experiment.measure import check, runs_root, stored_campaign
from perfkit.experiment.outputs import OUTPUTS_DIR, outcome_of, render_page
from perfkit.paths import NOTEBOOKS_DIR
from perfkit.report import DEFAULT_REPORTS, Page, build_report, kernel_options
from perfkit.store import DEFAULT_ROOT, new_run_id

#: The notebook ``perfkit experiment`` executes.
NOTEBOOK = NOTEBOOKS_DIR / "experiment.ipynb"
#: The notebook's parameters besides ``campaign``: how to run it, in the words of ``perfkit experiment``'s
#: options (``--run RUN_ID``, ``--resume RUN_ID``, ``--root``, ``--no-progress``, ``--report``, ``--reports``).
RUN_PARAMETERS = ("run_id", "resume", "root", "progress", "report", "reports")
#: The executed notebook, kept in the run directory.
KEPT_NOTEBOOK = "experiment.ipynb"


def default_campaign(notebook: Path = NOTEBOOK) -> dict[str, Any]:
    """The notebook's own ``campaign`` (its parameters cell): what runs when no file is given."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    cell = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["campaign"]:
            return ast.literal_eval(node.value)
    raise ConfigError("notebook", str(notebook), "a parameters cell that assigns campaign = {...}")


@dataclass
class NotebookRun:
    """What ``run_notebook`` did."""

    run_id: str
    outcome: dict[str, Any]
    """The runner's outcome the notebook saved (``RunOutcome.to_dict``), or only ``run_id``."""
    notebook: Path
    """The executed notebook (kept in the run directory once the run exists)."""
    notebook_html: Path
    error: str | None = None
    """Why the notebook failed (the cell, the exception), or None."""
    interrupted: bool = False
    """Ctrl-C or SIGTERM stopped it (the run can be resumed)."""
    outputs: Path | None = None
    """``<run>/experiment/``: the models, the figures, the outcome."""
    models: dict[str, Any] | None = None
    """``models.json``: the CPU models and the DUT load model."""
    report: Path | None = None
    """The report set's index (``report=True``)."""
    failed_pages: list[str] = field(default_factory=list)
    """The report's pages whose notebooks failed."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.outcome, "notebook": str(self.notebook), "notebook_html": str(self.notebook_html),
                               "notebook_ok": self.error is None, "notebook_error": self.error}
        if self.outputs is not None:
            out["outputs"] = str(self.outputs)
        if self.models is not None:
            out["models"] = self.models
        if self.report is not None:
            out.update(report=str(self.report), report_ok=not self.failed_pages)
        return out


def run_notebook(campaign: str | Path | Mapping[str, Any] | None = None, *, edits: Mapping[str, Any] | None = None,
                 run_id: str | None = None, resume: str | None = None, root: str | Path = DEFAULT_ROOT,
                 reports: str | Path = DEFAULT_REPORTS, report: bool = False, baseline: str | None = None,
                 progress: bool = True) -> NotebookRun:
    """Execute the experiment notebook on ``campaign`` (a campaign file, a mapping with its keys, or
    None: the notebook's own) with ``edits`` made (KEY -> value), into ``root/<run_id>`` (``run_id``
    None: a time stamp); ``resume``: continue that run with its stored campaign instead. The
    campaign is checked before the kernel starts (a ``ConfigError`` names the key). ``report``:
    write the report set into ``reports/<run_id>/`` (``baseline``: the run to compare with, or
    ``auto``). ``progress``: progress bars (the kernel's, relayed to stderr)."""
    root = runs_root(root)
    if resume is not None:
        if campaign is not None or edits:
            raise ConfigError("campaign" if campaign is not None else "edits", campaign if campaign is not None
                              else dict(edits or {}), "nothing with resume (the run keeps the campaign it started with)")
        if run_id is not None:
            raise ConfigError("run_id", run_id, "None with resume (the run keeps its id)")
        base = stored_campaign(resume, root)
    elif campaign is None:
        base = default_campaign()
    elif isinstance(campaign, (str, os.PathLike)):
        base = load_mapping(read_text(campaign), str(campaign))
    else:
        base = dict(campaign)
    chosen = apply_edits(base, edits or {})
    check(chosen)
    run_id = resume or run_id or new_run_id()
    if resume is None and (root / run_id).exists():
        raise ConfigError("run_id", run_id, f"a new run id (run {run_id} exists in {root}; continue it with resume)")
    out_dir = Path(reports).absolute() / run_id
    (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    executed = out_dir / "notebooks" / KEPT_NOTEBOOK
    params = {"campaign": chosen, "run_id": None if resume else run_id, "resume": resume, "root": str(root),
              "progress": progress, "report": False, "reports": str(out_dir.parent)}
    error, ename, stopped = execute(NOTEBOOK, executed, params, relay=progress)
    page = render_page(executed, out_dir, error)
    kept = keep(executed, root / run_id)
    result = NotebookRun(run_id, outcome_of(run_id, root) or {"run_id": run_id}, kept or executed,
                         out_dir / page.file, error, stopped or ename == "KeyboardInterrupt")
    if (root / run_id / OUTPUTS_DIR).is_dir():
        result.outputs = root / run_id / OUTPUTS_DIR
        models = result.outputs / "models.json"
        if models.is_file():
            result.models = json.loads(models.read_text())
    if report and not result.interrupted and (root / run_id / "metadata.json").exists():
        _report(result, page, root, out_dir.parent, baseline, progress)   # the run's pages even if the analysis failed
    return result


def _report(result: NotebookRun, page: Page, root: Path, reports: Path, baseline: str | None, progress: bool) -> None:
    rep = build_report(result.run_id, baseline_run_id=baseline, data_root=root, reports_root=reports,
                       progress=progress, extra_pages=[page])
    result.report = rep.index
    result.failed_pages = [p.name for p in rep.pages if not p.ok]


def execute(notebook: Path, output: Path, params: dict[str, Any], relay: bool = True,
            kernel_name: str = "python3") -> tuple[str | None, str | None, bool]:
    """Execute ``notebook`` into ``output`` with papermill; returns (error or None, the exception's
    name or None, whether a signal stopped it).

    The kernel's stderr (the runner's progress bars and messages) is relayed to ours with ``relay``.
    Ctrl-C and SIGTERM are forwarded to the kernel as an interrupt (the runner then stops cleanly);
    the kernel runs in a session of its own, so a terminal's Ctrl-C would not reach it otherwise.
    """
    import papermill   # heavy (nbclient, jupyter): only executing needs them
    from jupyter_client.manager import AsyncKernelManager
    from papermill.exceptions import PapermillExecutionError

    km = AsyncKernelManager(kernel_name=kernel_name, **kernel_options())
    error: str | None = None
    ename: str | None = None
    with _forward_signals(km) as stopped:
        try:
            papermill.execute_notebook(str(notebook), str(output), parameters=params, kernel_name=kernel_name,
                                       progress_bar=False, cwd=os.getcwd(), km=km,
                                       stderr_file=sys.stderr if relay else None)
        except PapermillExecutionError as err:
            error = f"cell {err.cell_index}: {err.ename}: {' '.join(str(err.evalue).split())[:300]}"
            ename = err.ename
        except KeyboardInterrupt:
            error, ename = "KeyboardInterrupt: stopped before the kernel ran", "KeyboardInterrupt"
        finally:   # nbclient shuts down only the kernels of managers it made itself
            _shutdown(km)
    return error, ename, bool(stopped)


def _shutdown(km: Any) -> None:
    """Shut the kernel down (a shutdown request, then SIGKILL if it does not go) and wait for it."""
    from jupyter_core.utils import run_sync

    if km.has_kernel:
        run_sync(km.shutdown_kernel)(now=False)


@contextlib.contextmanager
def _forward_signals(km: Any) -> Iterator[list[int]]:
    """SIGINT/SIGTERM -> one interrupt of the kernel (its process group); further ones are told to wait."""
    stopped: list[int] = []

    def handler(signum: int, frame: object) -> None:
        pid = getattr(getattr(km, "provisioner", None), "pid", None)
        if stopped:
            print(f"perfkit: {signal.Signals(signum).name} again: still stopping cleanly (the kernel takes the "
                  "testbed down and writes what was measured), please wait", file=sys.stderr, flush=True)
            return
        stopped.append(signum)
        if pid is None:                       # no kernel yet: nothing runs, stop right here (raised
            stop.request(signum)              # where Python cannot drop it: perfkit.stop)
            return
        print("perfkit: stopping: interrupting the experiment (the testbed is taken down, the run kept)",
              file=sys.stderr, flush=True)
        try:
            os.killpg(pid, signal.SIGINT)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopped
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def keep(executed: Path, run_dir: Path) -> Path | None:
    """Copy the executed notebook into the run directory (durably); None if there is no run."""
    if not executed.exists() or not (run_dir / "metadata.json").exists():
        return None
    atomic_write(run_dir / KEPT_NOTEBOOK, executed.read_bytes(), point="experiment.notebook")
    return run_dir / KEPT_NOTEBOOK
