"""``perfkit agent --config LAB_JSON``: perfkit's side of a lab host, speaking JSON lines on stdin
and stdout (the controller runs it in an SSH session; see ``perfkit.lab.agent`` for the protocol).
``perfkit agent --clean`` detaches what killed agents left attached, as ``perfkit clean`` does."""
from __future__ import annotations

import argparse


def cmd_agent(args: argparse.Namespace) -> int:
    from perfkit.lab import agent
    return agent.main(["--clean"] if args.clean else ["--config", args.config])


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("agent", help="perfkit's side of a lab host: JSON lines on stdin/stdout, over SSH",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--config", help="the host's lab.json, written by perfkit lab provision")
    g.add_argument("--clean", action="store_true", help="detach what killed agents left attached, and exit")
    p.set_defaults(func=cmd_agent)
