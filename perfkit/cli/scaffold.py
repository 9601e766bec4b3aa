"""``perfkit dataplane new NAME --dir DIR [--plugin]``: a project of your own (``perfkit.scaffold``)."""
from __future__ import annotations

import argparse

from perfkit import scaffold


def cmd_new(args: argparse.Namespace) -> int:
    project = scaffold.new(args.name, args.dir, plugin=args.plugin)
    kind = "a plugin package" if project.plugin else "a description"
    then = f" && perfkit dataplane check {project.name}" if project.plugin else ""
    print(f"{project.name}: {len(project.files)} files in {project.dir}, {kind} (git: one commit); "
          f"next: cd {project.dir} && make && make test{then}")
    return 0


def _group(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The subcommands of ``perfkit dataplane`` (made here when no other module made the group)."""
    parser = sub.choices.get("dataplane") or sub.add_parser("dataplane", help="work on one dataplane")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return parser.add_subparsers(dest="dataplane_command", required=True, metavar="COMMAND")


def register(sub: argparse._SubParsersAction) -> None:
    p = _group(sub).add_parser("new", help="write a project of your own: an XDP program, its description or plugin package, tests",
                               description=scaffold.__doc__.splitlines()[0])
    p.add_argument("name", metavar="NAME", help="the dataplane's name (a lower-case identifier)")
    p.add_argument("--dir", required=True, help="where (a directory that does not exist or is empty)")
    p.add_argument("--plugin", action="store_true",
                   help="a Python package that registers the dataplane NAME (entry point perfkit.dataplanes) with "
                        "a reference model, instead of a description file; make installs it (pip install -e) into "
                        "the Python environment that runs perfkit")
    p.set_defaults(func=cmd_new)
