"""``perfkit experiment [CAMPAIGN] [-p KEY=VALUE ...]``: execute notebooks/experiment.ipynb with papermill.

The notebook's parameter ``campaign`` is a mapping with a campaign file's keys: CAMPAIGN (a file,
e.g. campaigns/default.yaml; without it the notebook's own) gives it, ``-p KEY=VALUE`` sets one key
(dots for nested keys, an index for a list item; VALUE is YAML): ``-p generator.backend=sim``, ``-p
frame_sizes=[64,1518]``, ``-p methods[1].params.relative_width=0.05``. The campaign is checked before
the kernel starts; a key it does not have, or a value it does not allow, is exit 2 in one line.

The notebook runs the campaign with the runner ``perfkit run`` uses (trials in
``data/runs/<run_id>/``, pushed to the Pushgateway), pulls node-exporter CPU back from Prometheus,
fits the CPU models and the DUT load model and saves them with its figures in
``data/runs/<run_id>/experiment/`` (``--json`` prints the models too, ``models``: each with its
in-sample and cross-validated R²). The executed notebook is kept with the run
(``data/runs/<run_id>/experiment.ipynb``) and rendered to ``reports/<run_id>/experiment.html``;
``--report`` also writes the report set (``perfkit report``), whose index links the experiment's
page. Python: ``perfkit.experiment.run_notebook(campaign, edits={KEY: VALUE}, run_id=, resume=,
root=, reports=, report=, baseline=, progress=)``, the same options in the same words.

Exit status: 0 every unit done (and every page rendered); 2 bad input, a unit or the notebook
failed; 130 interrupted (Ctrl-C or SIGTERM: the kernel is interrupted, the run's testbed and servers
are taken down, and ``perfkit experiment --resume RUN_ID`` continues it).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfkit.campaign.edit import parse_edits
from perfkit.cli.options import add_json, add_run_store, check_run_args, emit
from perfkit.errors import ConfigError, PerfkitError
from perfkit.experiment import run_notebook


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


def cmd_experiment(args: argparse.Namespace) -> int:
    check_run_args(args)
    edits = parse_edits(args.edit)
    if args.resume:
        if args.campaign or edits:
            raise ConfigError("CAMPAIGN" if args.campaign else "-p", args.campaign or args.edit,
                              "nothing with --resume (the run keeps the campaign it started with)")
        if args.run:
            raise ConfigError("--run", args.run, "nothing with --resume (the run keeps its id)")
    elif args.run and (Path(args.root) / args.run).exists():
        raise ConfigError("--run", args.run, f"a new run id (run {args.run} exists in {Path(args.root).absolute()}; "
                          f"continue it with --resume {args.run})")
    result = run_notebook(args.campaign, edits=edits, run_id=args.run, resume=args.resume, root=args.root,
                          reports=args.reports, report=args.report, baseline=args.baseline,
                          progress=not args.no_progress)
    emit(result.to_dict(), args.json, _human)
    if result.interrupted:
        print(f"perfkit: interrupted; resume with: perfkit experiment --resume {result.run_id}", file=sys.stderr)
        return 130
    if result.error is not None:
        raise PerfkitError(f"the experiment notebook failed: {result.error}; see {result.notebook_html}")
    if result.outcome.get("status") != "complete":
        raise PerfkitError(f"{len(result.outcome.get('units_failed', {}))} unit(s) failed; retry them with: "
                           f"perfkit experiment --resume {result.run_id}")
    if result.failed_pages:
        raise PerfkitError(f"report: notebook(s) failed: {', '.join(result.failed_pages)}; see their pages in "
                           f"{result.report.parent if result.report else args.reports}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiment", help="run notebooks/experiment.ipynb with papermill: measure, push, fit, plot",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("campaign", nargs="?", default=None, metavar="CAMPAIGN",
                   help="a campaign file: the notebook's campaign (default: the notebook's own)")
    p.add_argument("-p", "--edit", action="append", default=[], metavar="KEY=VALUE",
                   help="set a key of the campaign (generator.backend=sim, methods[0].params.duration=2; "
                        "VALUE is YAML); repeatable")
    add_run_store(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_json(p)
    p.set_defaults(func=cmd_experiment)
