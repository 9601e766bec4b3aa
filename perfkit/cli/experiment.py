"""``perfkit experiment [CAMPAIGN]``: execute notebooks/experiment.ipynb with papermill (it drives the traffic).

The notebook's parameters are a campaign's keys (``perfkit.experiment``): CAMPAIGN (a campaign file)
gives them all, ``-p NAME=VALUE`` sets one (VALUE is YAML: ``-p frame_sizes=[64,1518]``, ``-p
generator=sim``); without either the notebook's defaults apply. Every parameter is checked before
the kernel starts. The notebook runs the campaign with the runner ``perfkit run`` uses (trials in
``data/runs/<run_id>/``, pushed to the Pushgateway), pulls node-exporter CPU back from Prometheus,
fits the CPU models and the DUT load model and saves them with its figures in
``data/runs/<run_id>/experiment/`` (``--json`` prints the models too, ``models``: each with its
in-sample and cross-validated R²). The executed notebook is kept with the run
(``data/runs/<run_id>/experiment.ipynb``) and rendered to ``reports/<run_id>/experiment.html``;
``--report`` also writes the report set (``perfkit report``), whose index links the experiment's
page.

Exit status: 0 every unit done (and every page rendered); 2 bad input, a unit or the notebook
failed; 130 interrupted (Ctrl-C or SIGTERM: the kernel is interrupted, the run's testbed and servers
are taken down, and ``perfkit experiment --resume RUN_ID`` continues it).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, Iterator

from perfkit import experiment as ex
from perfkit import stop
from perfkit.cli.options import add_json, add_run_store, check_run, emit
from perfkit.durable import atomic_write
from perfkit.errors import ConfigError, PerfkitError
from perfkit.experiment import KEPT_NOTEBOOK, Experiment, stored_experiment
from perfkit.report import build_report
from perfkit.store import new_run_id


def _human(d: dict) -> str:
    lines = []
    if d.get("run_id") and d.get("status"):
        lines.append(f"run {d['run_id']}: {d['status']}, {d['units_done_before'] + d['units_done']} of "
                     f"{d['units_total']} units done, {d['trials_written']} trials written in "
                     f"{d['wall_seconds']:.0f} s, data in {d['path']}")
        for unit, err in d.get("units_failed", {}).items():
            lines.append(f"  failed: {unit}: {err}")
        if d.get("metrics", {}).get("push_failures"):
            lines.append(f"  {d['metrics']['push_failures']} pushes failed: perfkit push --run {d['run_id']}")
    lines.append(f"notebook: {d['notebook']} ({d['notebook_html']})")
    if d.get("outputs"):
        lines.append(f"outputs: {d['outputs']}")
    if d.get("report"):
        lines.append(f"report: {d['report']}")
    return "\n".join(lines)


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """``-p NAME=VALUE`` items -> {name: YAML value}; a malformed one names itself."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError("-p", item, "NAME=VALUE, VALUE in YAML (e.g. -p frame_sizes=[64,1518])")
        try:
            out[name.strip()] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as err:
            raise ConfigError(f"-p {name.strip()}", text, f"a YAML value ({' '.join(str(err).split())[:80]})") from None
    return out


def _experiment(args: argparse.Namespace):
    overrides = parse_assignments(args.param)
    if args.resume:
        if args.campaign or overrides:
            raise ConfigError("CAMPAIGN" if args.campaign else "-p", args.campaign or args.param,
                              "nothing with --resume (the run keeps the parameters it started with)")
        if args.run:
            raise ConfigError("--run", args.run, "nothing with --resume (the run keeps its id)")
        exp = stored_experiment(args.resume, args.root)
    else:
        if args.campaign and not Path(args.campaign).is_file():
            raise ConfigError("CAMPAIGN", args.campaign, "a campaign file that exists, e.g. campaigns/default.yaml")
        base = Experiment.from_campaign(args.campaign).parameters() if args.campaign else {}
        exp = Experiment.from_parameters({**base, **overrides})
    exp.check()
    return exp


def cmd_experiment(args: argparse.Namespace) -> int:
    root = Path(args.root).absolute()
    if args.resume:
        check_run("--resume", args.resume, root)
    if args.baseline is not None:
        if not args.report:
            raise ConfigError("--baseline", args.baseline, "only with --report (it is the report's baseline)")
        if args.baseline != "auto":
            check_run("--baseline", args.baseline, root)
    exp = _experiment(args)
    run_id = args.resume or args.run or new_run_id()
    if not args.resume and (root / run_id).exists():
        raise ConfigError("--run", run_id, f"a new run id (run {run_id} exists in {root}; "
                          f"continue it with --resume {run_id})")
    out_dir = Path(args.reports).absolute() / run_id
    (out_dir / "notebooks").mkdir(parents=True, exist_ok=True)
    executed = out_dir / "notebooks" / "experiment.ipynb"
    params = {**exp.parameters(), "run_id": run_id, "resume": bool(args.resume), "data_root": str(root),
              "progress": not args.no_progress, "report": False, "reports_root": str(out_dir.parent)}
    error, ename, stopped = execute(ex.NOTEBOOK, executed, params, relay=not args.no_progress)
    interrupted = stopped or ename == "KeyboardInterrupt"
    page = ex.render_page(executed, out_dir, error)
    kept = _keep(executed, root / run_id)
    outcome = ex.outcome_of(run_id, root) or {"run_id": run_id}
    result: dict[str, Any] = {**outcome, "notebook": str(kept or executed), "notebook_html": str(out_dir / page.file),
                              "notebook_ok": error is None, "notebook_error": error}
    if (root / run_id / ex.OUTPUTS_DIR).is_dir():
        result["outputs"] = str(root / run_id / ex.OUTPUTS_DIR)
        models = root / run_id / ex.OUTPUTS_DIR / "models.json"
        if models.is_file():
            result["models"] = json.loads(models.read_text())
    if interrupted:
        emit(result, args.json, _human)
        print(f"perfkit: interrupted; resume with: perfkit experiment --resume {run_id}", file=sys.stderr)
        return 130
    rep = None
    if args.report and (root / run_id / "metadata.json").exists():   # the run's pages even if the analysis failed
        rep = build_report(run_id, baseline_run_id=args.baseline, data_root=root, reports_root=out_dir.parent,
                           progress=not args.no_progress, extra_pages=[page])
        result.update(report=str(rep.index), report_ok=rep.ok)
    emit(result, args.json, _human)
    if error is not None:
        raise PerfkitError(f"the experiment notebook failed: {error}; see {out_dir / page.file}")
    if outcome.get("status") != "complete":
        raise PerfkitError(f"{len(outcome.get('units_failed', {}))} unit(s) failed; retry them with: "
                           f"perfkit experiment --resume {run_id}")
    if rep is not None and not rep.ok:
        failed = ", ".join(p.name for p in rep.pages if not p.ok)
        raise PerfkitError(f"report: notebook(s) failed: {failed}; see their pages in {rep.dir}")
    return 0


def execute(notebook: Path, output: Path, params: dict[str, Any], relay: bool = True,
            kernel_name: str = "python3") -> tuple[str | None, str | None, bool]:
    """Execute ``notebook`` into ``output`` with papermill; returns (error or None, the exception's
    name or None, whether a signal stopped it).

    The kernel's stderr (the runner's progress bars and messages) is relayed to ours with ``relay``.
    Ctrl-C and SIGTERM are forwarded to the kernel as an interrupt (the runner then stops cleanly);
    the kernel runs in a session of its own, so a terminal's Ctrl-C would not reach it otherwise.
    """
    import papermill
    from jupyter_client.manager import AsyncKernelManager
    from papermill.exceptions import PapermillExecutionError

    km = AsyncKernelManager(kernel_name=kernel_name)
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


def _keep(executed: Path, run_dir: Path) -> Path | None:
    """Copy the executed notebook into the run directory (durably); None if there is no run."""
    if not executed.exists() or not (run_dir / "metadata.json").exists():
        return None
    atomic_write(run_dir / KEPT_NOTEBOOK, executed.read_bytes(), point="experiment.notebook")
    return run_dir / KEPT_NOTEBOOK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiment", help="run notebooks/experiment.ipynb with papermill: measure, push, fit, plot",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("campaign", nargs="?", default=None, metavar="CAMPAIGN",
                   help="a campaign file whose keys become the notebook's parameters (e.g. campaigns/default.yaml)")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                   help="set one of the notebook's parameters (VALUE is YAML); repeatable")
    add_run_store(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_json(p)
    p.set_defaults(func=cmd_experiment)
