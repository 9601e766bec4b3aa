"""``perfkit dataplane new NAME --dir DIR``: a project of your own (``perfkit.scaffold``)."""
from __future__ import annotations

import argparse

from perfkit import scaffold


def cmd_new(args: argparse.Namespace) -> int:
    project = scaffold.new(args.name, args.dir)
    print(f"{project.name}: {len(project.files)} files in {project.dir} (git: one commit); "
          f"next: cd {project.dir} && make && make test")
    return 0


def _group(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The subcommands of ``perfkit dataplane`` (made here when no other module made the group)."""
    parser = sub.choices.get("dataplane") or sub.add_parser("dataplane", help="work on one dataplane")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return parser.add_subparsers(dest="dataplane_command", required=True, metavar="COMMAND")


def register(sub: argparse._SubParsersAction) -> None:
    p = _group(sub).add_parser("new", help="write a project of your own: an XDP program, its description, tests",
                               description=scaffold.__doc__.splitlines()[0])
    p.add_argument("name", metavar="NAME", help="the dataplane's name (a lower-case identifier)")
    p.add_argument("--dir", required=True, help="where (a directory that does not exist or is empty)")
    p.set_defaults(func=cmd_new)
