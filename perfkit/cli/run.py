"""``perfkit run CAMPAIGN``: run a campaign into data/runs/<run_id>/ (and, with --report, its HTML report).

``perfkit run --resume RUN_ID`` continues an interrupted run with the campaign stored in it: done
units are skipped, an interrupted search replays its stored trials and goes on where it stopped.
Exit status: 0 every unit done; 2 a unit failed (any error inside a unit fails only that unit; the
run goes on), the run is in use by another process (its lock), or bad input; 130 interrupted (Ctrl-C
or SIGTERM, at any moment: the testbed and the metrics servers the run started are taken down, the
run is marked ``interrupted`` and the last line says how to resume it; ``perfkit.cli._signals``). A
second Ctrl-C while stopping does not cut the clean-up short. After a crash or SIGKILL: ``perfkit
clean``, then ``perfkit run --resume RUN_ID``.
"""
from __future__ import annotations

import argparse

from perfkit.campaign import resume_campaign, run_campaign
from perfkit.campaign.schema import from_mapping, load_mapping, read_text
from perfkit.cli._signals import sigpipe_ignored
from perfkit.cli.options import add_json, add_run_store, check_run_args, emit
from perfkit.errors import ConfigError, PerfkitError
from perfkit.report import build_report


def _human(d: dict) -> str:
    lines = [f"run {d['run_id']}: {d['status']}, {d['units_done_before'] + d['units_done']} of {d['units_total']} "
             f"units done, {d['trials_written']} trials written in {d['wall_seconds']:.0f} s, data in {d['path']}"]
    for unit, err in d["units_failed"].items():
        lines.append(f"  failed: {unit}: {err}")
    if d["metrics"].get("push_failures"):
        lines.append(f"  {d['metrics']['push_failures']} pushes failed: perfkit push --run {d['run_id']}")
    if d.get("report"):
        lines.append(f"report: {d['report']}")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    with sigpipe_ignored():   # a metrics server that died is an error the push reports, not our death
        outcome, rep = _run(args)
    out = outcome.to_dict()
    if rep is not None:
        out["report"] = str(rep.index)
        out["report_ok"] = rep.ok
    emit(out, args.json, _human)
    if outcome.status != "complete":
        raise PerfkitError(f"{len(outcome.units_failed)} unit(s) failed; retry them with: "
                           f"perfkit run --resume {outcome.run_id}")
    if rep is not None and not rep.ok:
        failed = ", ".join(p.name for p in rep.pages if not p.ok)
        raise PerfkitError(f"report: notebook(s) failed: {failed}; see their pages in {rep.dir}")
    return 0


def _run(args: argparse.Namespace):
    check_run_args(args)
    common = {"root": args.root, "metrics": not args.no_metrics, "progress": not args.no_progress}
    if args.resume:
        if args.run:
            raise ConfigError("--run", args.run, "nothing with --resume (the run keeps its id)")
        if args.lab:
            raise ConfigError("--lab", args.lab, "nothing with --resume (the run keeps its campaign, lab included)")
        outcome = resume_campaign(args.resume, campaign_path=args.campaign, **common)
    else:
        if not args.campaign:
            raise ConfigError("CAMPAIGN", None, "a campaign file, e.g. campaigns/default.yaml (or --resume RUN_ID)")
        campaign = args.campaign
        if args.lab:   # the same campaign, in the lab of an inventory (its text records the lab)
            raw = {**load_mapping(read_text(campaign), str(campaign)), "lab": str(args.lab)}
            campaign = from_mapping(raw, source=str(campaign))
        outcome = run_campaign(campaign, run_id=args.run, **common)
    rep = None
    if args.report:
        rep = build_report(outcome.run_id, baseline_run_id=args.baseline, data_root=args.root,
                           reports_root=args.reports, progress=not args.no_progress)
    return outcome, rep


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a campaign (scenarios x methods) into the run store", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("campaign", nargs="?", default=None, metavar="CAMPAIGN",
                   help="campaign YAML file (with --resume: optional, must match the stored one)")
    add_run_store(p)
    p.add_argument("--no-metrics", action="store_true",
                   help="do not start the metrics stack nor push (trials are on disk; perfkit push --run later)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--lab", metavar="INVENTORY", default=None,
                   help="run the campaign in the lab of this Ansible inventory (the campaign key lab; docs/lab.md)")
    add_json(p)
    p.set_defaults(func=cmd_run)
