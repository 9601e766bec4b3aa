"""``perfkit jupyter``: JupyterLab on notebooks/ (``make jupyter``), on 127.0.0.1 with a token made for this start.

It prints the URL to open (with the token) once the server answers, and runs until Ctrl-C or
SIGTERM; then busy kernels are interrupted (an experiment that is measuring stops cleanly and can be
resumed), the server is stopped and nothing of it is left running. Exit status 0 after such a stop;
2 if the server could not start (e.g. the port is taken).
"""
from __future__ import annotations

import argparse
import json
import sys

from perfkit.cli.options import add_json, integer
from perfkit.jupyter import NOTEBOOKS, serve


def cmd_jupyter(args: argparse.Namespace) -> int:
    def ready(lab) -> None:
        if args.json:
            print(json.dumps(lab.to_dict()), flush=True)
        else:
            print(f"JupyterLab serves {lab.root_dir} at {lab.base_url} (127.0.0.1 only); open:\n\n    {lab.url}\n\n"
                  "Ctrl-C stops it (a running experiment is interrupted and can be resumed).", flush=True)

    def say(msg: str) -> None:
        print(f"perfkit jupyter: {msg}", file=sys.stderr, flush=True)

    return serve(args.port, on_ready=ready, say=say, root_dir=args.root_dir or NOTEBOOKS)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jupyter", help="start JupyterLab on notebooks/ (127.0.0.1, with a token)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=integer(1, 65535, "a TCP port"), default=None,
                   help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--root-dir", default=None, help="directory served (default notebooks/ of the repository)")
    add_json(p)
    p.set_defaults(func=cmd_jupyter)
