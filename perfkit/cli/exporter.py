"""``perfkit exporter``: serve a loaded dataplane's counters to Prometheus at ``/metrics`` on loopback,
while it is loaded (``perfkit.metrics.exporter``).

On a lab's DUT host the agent runs it as ``python -m perfkit.cli.exporter`` (the host's virtualenv has
only what the agent needs, not every command's imports) with ``--lab-config``: it may then listen on
the host's management address, the one the lab's Prometheus scrapes; on no other non-loopback one. On
a lab with basic auth (an inventory's ``metrics_auth``), it asks for it there as node-exporter does:
the user and bcrypt hash of the host's ``web-config.yml``, which ``lab.json`` names."""
from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import time
from pathlib import Path

from perfkit import stop
from perfkit.errors import ConfigError, PerfkitError
from perfkit.metrics import exporter, webauth

#: How often the exporter checks that the dataplane is still loaded [s].
WATCH_INTERVAL = 0.5


def parse_listen(text: str, lab_address: str | None = None) -> tuple[str, int]:
    """``HOST:PORT`` on loopback or ``lab_address`` (a lab host's management address; port 0: a free
    one); ``ConfigError`` naming ``listen``."""
    allowed = "a loopback address and port, e.g. 127.0.0.1:9435 (port 0: a free one)" + (
        f", or the lab host's address {lab_address}" if lab_address else "")
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        ip = ipaddress.ip_address(host)
        lab = lab_address is not None and ip == ipaddress.ip_address(lab_address)
        if not sep or not (ip.is_loopback or lab) or not 0 <= int(port) < 65536:
            raise ValueError
    except ValueError:
        raise ConfigError("listen", text, allowed) from None
    return host, int(port)


def lab_config(path: str | None) -> dict:
    """A lab host's ``lab.json`` (``perfkit lab provision``): its management ``address`` and, on a lab
    with basic auth, its ``web_config``; ``{}`` without one."""
    if path is None:
        return {}
    try:
        config = json.loads(Path(path).read_text())
        str(config["address"])
        return config
    except (OSError, ValueError, KeyError, TypeError):
        raise ConfigError("lab-config", path, "a lab host's lab.json that names its address "
                          "(written by perfkit lab provision)") from None


def cmd_exporter(args: argparse.Namespace) -> int:
    lab = lab_config(args.lab_config)
    host, port = parse_listen(args.listen, lab.get("address"))
    web_config = args.web_config or lab.get("web_config")
    users = webauth.load_users(web_config) if web_config else None
    descs = [exporter.load(p) for p in args.dut or [exporter.find(args.testbed)]]
    desc = descs[0]
    server = exporter.serve(descs, host, port, users)
    registered = None
    try:
        if args.register:
            registered = exporter.register(args.register, desc, host, server.port)
        d = {"url": server.url, "basic_auth": bool(users), "dataplane": desc.dataplane, "testbed": ",".join(x.testbed for x in descs),
             "series": sum(len(x.cells) for x in descs), "registered": str(registered) if registered else None}
        # one line, JSON or not, and at once: whoever started the exporter reads its address from it
        print(json.dumps(d, sort_keys=True) if args.json else
              f"serving {d['series']} series of {d['dataplane']} on testbed {d['testbed']} at {d['url']}"
              + (" with basic auth" if users else "")
              + (f" (registered in {d['registered']})" if d["registered"] else ""), flush=True)
        while server.collector.loaded():
            stop.check()   # SIGTERM or Ctrl-C: KeyboardInterrupt, and the finally below cleans up
            time.sleep(WATCH_INTERVAL)
        print(f"the {desc.dataplane} dataplane on testbed {d['testbed']} is unloaded; the exporter stops",
              file=sys.stderr)
    finally:
        if registered:
            exporter.unregister(args.register, desc)
        server.close()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("exporter", help="serve a loaded dataplane's counters to Prometheus (/metrics on loopback)",
                       description=__doc__)
    add_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                   help="loopback address and port to serve on (default 127.0.0.1:0: a free port, printed)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--testbed", default=None, metavar="ID",
                       help="the testbed whose dataplane to serve (default: the only one loaded)")
    where.add_argument("--dut", default=None, metavar="FILE", action="append",
                       help=f"a loaded dataplane's description (default: {exporter.DUT_DIR}/<testbed>.json); "
                            "repeated: serve each")
    p.add_argument("--register", default=None, metavar="DIR",
                   help="write a file_sd target file there while serving (a metrics stack's targets/ directory)")
    p.add_argument("--lab-config", default=None, metavar="FILE",
                   help="a lab host's lab.json: --listen may then be the host's management address it names, "
                        "and its web config (if any) is the default of --web-config")
    p.add_argument("--web-config", default=None, metavar="FILE",
                   help="serve only with basic auth as a user of this web config (basic_auth_users: {user: "
                        "bcrypt hash}, the format of node-exporter's --web.config.file)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=cmd_exporter)


def main(argv: list[str] | None = None) -> int:
    """``python -m perfkit.cli.exporter``: the command without the rest of perfkit's CLI."""
    from perfkit.cli._signals import stop_on_signals
    p = argparse.ArgumentParser(prog="python -m perfkit.cli.exporter", description=__doc__)
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        with stop_on_signals(then_default=True):
            return cmd_exporter(args)
    except PerfkitError as err:
        print(f"perfkit exporter: error: {' '.join(str(err).split())}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
