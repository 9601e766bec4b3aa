"""``perfkit metrics check|cpu|trials|retire``: ask Prometheus about the endpoints, a run's CPU and its
pushed trials; retire old runs' trials from the Pushgateway once Prometheus has them."""
from __future__ import annotations

import argparse

import pandas as pd

from perfkit.cli.options import add_json, check_run, emit, number
from perfkit.cli.push import add_endpoint_options, endpoints_from_args
from perfkit.errors import ConfigError
from perfkit.metrics import query, retire
from perfkit.store import DEFAULT_ROOT, RUN_ID_PATTERN, RunStore, list_runs


def _records(frame: pd.DataFrame) -> list[dict]:
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def cmd_check(args: argparse.Namespace) -> int:
    ep = endpoints_from_args(args)
    checks = query.check_endpoints(ep)
    emit({"endpoints": ep.to_dict(), "checks": [c.__dict__ for c in checks]}, args.json,
         lambda d: "\n".join(f"{c['name']:<12} {c['url']:<32} {'ok' if c['ok'] else 'FAILED'}: {c['detail']}"
                             for c in d["checks"]) + f"\n(settings from {ep.source})")
    return 0 if all(c.ok for c in checks) else 2


def _cpus(text: str | None) -> set[int] | None:
    if not text:
        return None
    try:
        return {int(c) for c in text.split(",") if c.strip()}
    except ValueError:
        raise ConfigError("--dut-cpus", text, "comma-separated cpu numbers, e.g. 1,2") from None


def cmd_cpu(args: argparse.Namespace) -> int:
    check_run("--run", args.run, args.root)
    store = RunStore.open(args.run, args.root)
    trials = store.results()
    if args.trial:
        trials = [t for t in trials if t.trial_id in set(args.trial)]
        if not trials:
            raise ConfigError("--trial", args.trial, f"trial ids of run {args.run}")
    frame = query.cpu_frame(trials, endpoints_from_args(args), dut_cpus=_cpus(args.dut_cpus),
                            method=args.method, on_short="skip" if args.skip_short else "raise")
    if args.busy:
        frame = query.cpu_busy_frame(frame)
    emit(_records(frame), args.json, lambda _: frame.to_string(index=False))
    return 0


def _trials_frame(run_id: str, root: str, ep) -> pd.DataFrame:
    """A run in the local run store is read at its push times (also once retired from the
    Pushgateway); another run as Prometheus has it now."""
    if run_id not in list_runs(root):
        return query.trial_metrics_frame(run_id, ep)
    store = RunStore.open(run_id, root)
    times = store.push_times()
    if not times:       # pushes recorded without their time: the trials ended just before them
        pushed = store.pushed_trial_ids()
        times = {r.trial_id: r.end_time for r in store.results() if r.trial_id in pushed and r.end_time}
    return query.pushed_trials_frame(run_id, ep, times)


def cmd_trials(args: argparse.Namespace) -> int:
    frame = _trials_frame(args.run, args.root, endpoints_from_args(args))
    emit(_records(frame), args.json,
         lambda _: frame.to_string(index=False) if not frame.empty else f"no pushed trials of run {args.run}")
    return 0


def _run_id(text: str) -> str:
    """An argparse type: a run id as the run store allows them."""
    if not RUN_ID_PATTERN.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: a run id (letters, digits, '_', '.', "
                                         "'-'; starting with a letter or digit)")
    return text


def cmd_retire(args: argparse.Namespace) -> int:
    res = retire.retire_runs(endpoints_from_args(args), args.keep or (), min_age=args.min_age)
    emit(res.to_dict(), args.json, lambda _: res.describe())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("metrics", help="query Prometheus: endpoint health, a run's CPU, its pushed trials",
                       description=__doc__)
    msub = p.add_subparsers(dest="metrics_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    add_endpoint_options(common)
    add_json(common)
    msub.add_parser("check", parents=[common], help="are Prometheus and the Pushgateway reachable and ready?"
                    ).set_defaults(func=cmd_check)
    cpu = msub.add_parser("cpu", parents=[common],
                          help="CPU time per trial x cpu x mode from node_cpu_seconds_total")
    cpu.add_argument("--run", required=True, metavar="RUN_ID")
    cpu.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    cpu.add_argument("--trial", action="append", default=None, metavar="TRIAL_ID", help="only this trial (repeatable)")
    cpu.add_argument("--dut-cpus", default=None, help="DUT cpus, e.g. 1,2 (default: those each trial recorded)")
    cpu.add_argument("--method", choices=("inner", "interpolate"), default="inner")
    cpu.add_argument("--busy", action="store_true", help="one row per trial x cpu with its busy fraction")
    cpu.add_argument("--skip-short", action="store_true", help="skip trials too short to query, with a warning")
    cpu.set_defaults(func=cmd_cpu)
    tr = msub.add_parser("trials", parents=[common], help="the pushed figures of a run, one row per trial")
    tr.add_argument("--run", required=True, metavar="RUN_ID",
                    help="a run of --root is read at its push times (also once retired), another one as now")
    tr.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    tr.set_defaults(func=cmd_trials)
    rt = msub.add_parser("retire", parents=[common],
                         help="delete from the Pushgateway the trials of runs Prometheus has scraped")
    rt.add_argument("--keep", action="append", type=_run_id, default=None, metavar="RUN_ID",
                    help="leave this run's trials on the Pushgateway (repeatable)")
    rt.add_argument("--min-age", type=number(0.0, "a number of seconds"), default=0.0, metavar="SECONDS",
                    help="also leave runs that pushed within this many seconds (still going; default 0)")
    rt.set_defaults(func=cmd_retire)
