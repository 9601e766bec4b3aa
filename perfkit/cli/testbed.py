"""``perfkit testbed up|down|status|clean`` and ``perfkit clean``: the local testbed by hand, and
removal of every leftover (namespaces, links, XDP attachments, pins, metrics servers)."""
from __future__ import annotations

import argparse

from perfkit.cli.options import add_json, emit
from perfkit.testbed.topology import Testbed, clean, running


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("testbed", help="bring the local veth/netns testbed up or down, show it, clean leftovers",
                       description=__doc__)
    tsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = tsub.add_parser("up", help="create a testbed and leave it up")
    up.add_argument("--testbed-id", default=None, help="6 hex digits naming its namespaces (default: random)")
    up.add_argument("--mtu", type=int, default=1500)
    add_json(up)
    up.set_defaults(func=_up)
    down = tsub.add_parser("down", help="remove one testbed")
    down.add_argument("--testbed-id", required=True, help="as `testbed status` lists it")
    down.set_defaults(func=_down)
    st = tsub.add_parser("status", help="list the testbeds on this machine")
    add_json(st)
    st.set_defaults(func=_status)
    cl = tsub.add_parser("clean", help="remove every perfkit namespace, link, XDP attachment and pin")
    add_json(cl)
    cl.set_defaults(func=_clean)
    c = sub.add_parser("clean", help="remove every leftover of perfkit: testbeds and metrics servers")
    c.add_argument("--stack-dir", default=None, help="the local metrics stack's directory (default data/stack)")
    add_json(c)
    c.set_defaults(func=_clean_all)


def _up(args: argparse.Namespace) -> int:
    tb = Testbed(testbed_id=args.testbed_id, mtu=args.mtu).up(keep=True)
    emit(tb.status(), args.json, lambda s: f"testbed {s['testbed_id']} up: namespaces {', '.join(s['namespaces'])}")
    return 0


def _down(args: argparse.Namespace) -> int:
    Testbed(testbed_id=args.testbed_id).down()
    return 0


def _status(args: argparse.Namespace) -> int:
    beds = [Testbed(testbed_id=rid).status() for rid in running()]
    emit(beds, args.json, lambda b: "\n".join(f"{s['testbed_id']}: {', '.join(s['namespaces'])}" for s in b)
         or "no perfkit testbed")
    return 0


def _clean(args: argparse.Namespace) -> int:
    removed = clean()
    emit(removed, args.json, lambda r: "\n".join(f"removed {x}" for x in r) or "nothing to clean")
    return 0


def _clean_all(args: argparse.Namespace) -> int:
    from perfkit.metrics import stack

    removed = clean()
    stopped = stack.down(args.stack_dir)  # only the processes perfkit recorded starting
    removed += [f"metrics server {name} ({stopped.dir})" for name in stopped.started]
    emit(removed, args.json, lambda r: "\n".join(f"removed {x}" for x in r) or "nothing to clean")
    return 0
