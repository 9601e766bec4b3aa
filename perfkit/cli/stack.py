"""``perfkit stack up|down|status``: the local Prometheus + Pushgateway + node-exporter."""
from __future__ import annotations

import argparse
import os

from perfkit.cli.options import add_json, emit, integer, seconds
from perfkit.errors import ConfigError
from perfkit.metrics import stack


def _human(st: dict) -> str:
    if not st["components"]:
        return f"no stack recorded in {st['dir']}"
    lines = [f"stack in {st['dir']}: " + ("healthy" if st["healthy"] else "NOT healthy")]
    for c in st["components"]:
        state = "healthy" if c["running"] and c["healthy"] else ("running" if c["running"] else "down")
        lines.append(f"  {c['name']:<14} pid {c['pid']!s:<8} {c['url']:<28} {state:<8} {c['detail']}")
    if st["started"]:
        lines.append("  this call: " + ", ".join(st["started"]))
    return "\n".join(lines)


def _human_down(st: dict) -> str:
    if not st["components"]:
        return f"nothing to stop in {st['dir']}"
    return "\n".join([f"stack in {st['dir']}:"] + [f"  {c['name']:<14} pid {c['pid']!s:<8} {c['detail']}"
                                                   for c in st["components"]])


def cmd_up(args: argparse.Namespace) -> int:
    auth = None
    if args.basic_auth_user:
        password = os.environ.get("PERFKIT_METRICS_PASSWORD", "")
        if not password:
            raise ConfigError("PERFKIT_METRICS_PASSWORD", "", "the password for --basic-auth-user, in the environment")
        auth = (args.basic_auth_user, password)
    st = stack.up(args.stack_dir, args.host, prometheus_port=args.prometheus_port,
                  pushgateway_port=args.pushgateway_port, node_exporter_port=args.node_exporter_port,
                  basic_auth=auth, retention=args.retention, timeout=args.timeout)
    emit(st.to_dict(), args.json, _human)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    st = stack.down(args.stack_dir, components=args.component)
    emit(st.to_dict(), args.json, _human_down)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    st = stack.status(args.stack_dir)
    emit(st.to_dict(), args.json, _human)
    return 0 if st.healthy else 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stack", help="start, stop or check the local Prometheus/Pushgateway/node-exporter",
                       description=__doc__)
    ssub = p.add_subparsers(dest="stack_command", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--stack-dir", default=None,
                        help="stack directory: state, config, data, logs (default $PERFKIT_HOME/stack)")
    add_json(common)
    up = ssub.add_parser("up", parents=[common], help="start the stack (idempotent)")
    up.add_argument("--host", default="127.0.0.1", help="address to bind to (default 127.0.0.1)")
    for name, std in (("prometheus", 9090), ("pushgateway", 9091), ("node-exporter", 9100)):
        up.add_argument(f"--{name}-port", type=integer(0, 65535, "a port"), default=None,
                        help=f"port (default {std} if free, else any free port; 0: any free port)")
    up.add_argument("--retention", default="15d", help="Prometheus TSDB retention (default 15d)")
    up.add_argument("--basic-auth-user", default=None,
                    help="protect the servers with HTTP basic auth (password from $PERFKIT_METRICS_PASSWORD)")
    up.add_argument("--timeout", type=seconds, default=60.0, help="seconds to wait for each server to be ready")
    up.set_defaults(func=cmd_up)
    down = ssub.add_parser("down", parents=[common], help="stop the servers `up` started")
    down.add_argument("--component", action="append", choices=stack.COMPONENTS, default=None,
                      help="stop only this one (repeatable); `up` restarts it on the same port")
    down.set_defaults(func=cmd_down)
    ssub.add_parser("status", parents=[common],
                    help="which servers run and are healthy (exit 2 if not all)").set_defaults(func=cmd_status)
