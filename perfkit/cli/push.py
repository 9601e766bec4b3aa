"""``perfkit push --run RUN_ID``: push a run's trials that are not on the Pushgateway yet (backfill)."""
from __future__ import annotations

import argparse
import sys

from perfkit.cli.options import add_json, check_run, emit
from perfkit.metrics.config import Endpoints, load_endpoints
from perfkit.metrics.push import backfill
from perfkit.store import DEFAULT_ROOT, RunStore


def add_endpoint_options(parser: argparse.ArgumentParser) -> None:
    """--metrics-config --prometheus-url --pushgateway-url --metrics-user --metrics-password-file --tls-verify"""
    g = parser.add_argument_group("metrics endpoints (else $PERFKIT_METRICS_CONFIG, $PERFKIT_PROMETHEUS_URL ..., "
                                  "the local stack)")
    g.add_argument("--metrics-config", default=None, help="YAML/JSON file with prometheus_url, pushgateway_url ...")
    g.add_argument("--prometheus-url", default=None)
    g.add_argument("--pushgateway-url", default=None)
    g.add_argument("--metrics-user", default=None,
                   help="basic-auth user (password: $PERFKIT_METRICS_PASSWORD or --metrics-password-file)")
    g.add_argument("--metrics-password-file", default=None)
    g.add_argument("--tls-verify", default=None, metavar="true|false|CA_FILE",
                   help="verify HTTPS certificates (default true)")


def endpoints_from_args(args: argparse.Namespace) -> Endpoints:
    return load_endpoints(args.metrics_config, prometheus_url=args.prometheus_url,
                          pushgateway_url=args.pushgateway_url, username=args.metrics_user,
                          password_file=args.metrics_password_file, verify_tls=args.tls_verify)


def cmd_push(args: argparse.Namespace) -> int:
    check_run("--run", args.run, args.root)
    store = RunStore.open(args.run, args.root)
    store.check()          # a corrupt file: one line naming it, before anything is pushed
    res = backfill(store, endpoints_from_args(args), force=args.force)
    torn = store.pushes_torn_lines()
    if torn:
        print(f"note: {store.path / 'pushes.jsonl'}: torn line(s) {', '.join(map(str, torn))} ignored (a process "
              "died while writing them); their trials were pushed again", file=sys.stderr)
    emit({"run_id": res.run_id, "pushgateway_url": res.url, "pushed": res.pushed, "already_pushed": res.skipped,
          "lost_by_pushgateway": res.lost, "retired_in_prometheus": res.retired},
         args.json, lambda d: f"run {d['run_id']}: pushed {len(d['pushed'])} trial(s) to {d['pushgateway_url']}, "
                              f"{len(d['already_pushed'])} were already pushed"
                              + (f" ({len(d['lost_by_pushgateway'])} pushed again: the Pushgateway had lost them)"
                                 if d["lost_by_pushgateway"] else "")
                              + (f" ({len(d['retired_in_prometheus'])} retired from the Pushgateway: Prometheus has "
                                 "them)" if d["retired_in_prometheus"] else ""))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("push", help="push a run's trials to the Pushgateway (those not pushed yet)",
                       description=__doc__)
    p.add_argument("--run", required=True, metavar="RUN_ID")
    p.add_argument("--root", default=str(DEFAULT_ROOT), help=f"runs directory (default {DEFAULT_ROOT})")
    p.add_argument("--force", action="store_true", help="push every trial again, also those already pushed")
    add_endpoint_options(p)
    add_json(p)
    p.set_defaults(func=cmd_push)
