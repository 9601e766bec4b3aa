"""``perfkit testbed up|down|status|clean`` and ``perfkit clean``: the local testbed by hand, and
removal of leftovers (namespaces, links, XDP attachments, pins, metrics servers).

``clean`` removes only what no live process owns: the leftovers of killed or crashed runs, testbeds
and stacks kept up by hand (``perfkit testbed up``, ``perfkit stack up``). A run or a test suite
that is running keeps its testbed and its metrics servers (they are listed as kept, on stderr).
``--run RUN_ID`` removes only what that run owns, even while it runs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable

from perfkit.cli.options import add_json, emit
from perfkit.metrics import exporter, stack, stackstate
from perfkit.metrics.config import default_stack_dir
from perfkit.metrics.promconfig import targets_dir
from perfkit.testbed.topology import Testbed, clean, owned_by_live, running


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
    cl = tsub.add_parser("clean", help="remove the testbeds (namespaces, links, XDP attachments, pins) no live "
                                       "process owns")
    _run_option(cl)
    add_json(cl)
    cl.set_defaults(func=_clean)
    c = sub.add_parser("clean", help="remove the leftovers of perfkit no live process owns: testbeds, lab "
                                     "sandboxes, metrics servers, dataplane descriptions and exporter targets")
    c.add_argument("--stack-dir", default=None, help="also this metrics stack directory (default: data/stack and "
                                                     "every stack directory a run registered)")
    _run_option(c)
    add_json(c)
    c.set_defaults(func=_clean_all)


def _run_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", default=None, metavar="RUN_ID",
                   help="remove only what this run owns (also while it runs)")


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
    removed = clean(run_id=args.run)
    if args.run is None:
        _kept(f"testbed {rid}: owned by {who}" for rid, who in owned_by_live().items())
    emit(removed, args.json, lambda r: "\n".join(f"removed {x}" for x in r) or "nothing to clean")
    return 0


def _clean_all(args: argparse.Namespace) -> int:
    from perfkit.lab import agent, sandbox
    removed = clean(run_id=args.run) + sandbox.clean(run_id=args.run) + ([] if args.run else agent.clean())
    kept = [] if args.run else [f"testbed {rid}: owned by {who}" for rid, who in owned_by_live().items()]
    kept += [] if args.run else [f"lab sandbox {rid}: owned by {who}" for rid, who in sandbox.owned_by_live().items()]
    dirs = [Path(args.stack_dir or default_stack_dir()).absolute(), *stackstate.registered_dirs()]
    # before the stacks: a target file of a dead exporter, whatever becomes of its stack
    removed += exporter.clean([targets_dir(d) for d in dict.fromkeys(dirs)], run_id=args.run)
    for d in dict.fromkeys(dirs):   # only the processes perfkit recorded starting, pid and start time checked
        stopped, why = stack.clean(d, run_id=args.run)
        removed += [f"metrics server {name} ({d})" for name in stopped]
        if why:
            kept.append(f"metrics stack {d}: {why}")
    _kept(kept)
    emit(removed, args.json, lambda r: "\n".join(f"removed {x}" for x in r) or "nothing to clean")
    return 0


def _kept(lines: Iterable[str]) -> None:
    for line in lines:
        print(f"kept {line}", file=sys.stderr)
