"""``perfkit exporter``: serve a loaded dataplane's counters to Prometheus at ``/metrics`` on loopback,
while it is loaded (``perfkit.metrics.exporter``)."""
from __future__ import annotations

import argparse
import ipaddress
import json
import sys
import time

from perfkit import stop
from perfkit.cli.options import add_json
from perfkit.errors import ConfigError
from perfkit.metrics import exporter

#: How often the exporter checks that the dataplane is still loaded [s].
WATCH_INTERVAL = 0.5


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` on loopback (port 0: a free one); ``ConfigError`` naming ``listen``."""
    allowed = "a loopback address and port, e.g. 127.0.0.1:9435 (port 0: a free one)"
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        if not sep or not ipaddress.ip_address(host).is_loopback or not 0 <= int(port) < 65536:
            raise ValueError
    except ValueError:
        raise ConfigError("listen", text, allowed) from None
    return host, int(port)


def cmd_exporter(args: argparse.Namespace) -> int:
    host, port = parse_listen(args.listen)
    path = args.dut or exporter.find(args.testbed)
    desc = exporter.load(path)
    server = exporter.serve(desc, host, port)
    registered = None
    try:
        if args.register:
            registered = exporter.register(args.register, desc, host, server.port)
        d = {"url": server.url, "dataplane": desc.dataplane, "testbed": desc.testbed, "series": len(desc.cells),
             "registered": str(registered) if registered else None}
        # one line, JSON or not, and at once: whoever started the exporter reads its address from it
        print(json.dumps(d, sort_keys=True) if args.json else
              f"serving {d['series']} series of {d['dataplane']} on testbed {d['testbed']} at {d['url']}"
              + (f" (registered in {d['registered']})" if d["registered"] else ""), flush=True)
        while server.collector.loaded():
            stop.check()   # SIGTERM or Ctrl-C: KeyboardInterrupt, and the finally below cleans up
            time.sleep(WATCH_INTERVAL)
        print(f"the {desc.dataplane} dataplane on testbed {desc.testbed} is unloaded; the exporter stops",
              file=sys.stderr)
    finally:
        if registered:
            exporter.unregister(args.register, desc)
        server.close()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("exporter", help="serve a loaded dataplane's counters to Prometheus (/metrics on loopback)",
                       description=__doc__)
    p.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                   help="loopback address and port to serve on (default 127.0.0.1:0: a free port, printed)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--testbed", default=None, metavar="ID",
                       help="the testbed whose dataplane to serve (default: the only one loaded)")
    where.add_argument("--dut", default=None, metavar="FILE",
                       help=f"a loaded dataplane's description (default: {exporter.DUT_DIR}/<testbed>.json)")
    p.add_argument("--register", default=None, metavar="DIR",
                   help="write a file_sd target file there while serving (a metrics stack's targets/ directory)")
    add_json(p)
    p.set_defaults(func=cmd_exporter)
