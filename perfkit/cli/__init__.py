"""The ``perfkit`` command line: each module of this package adds its subcommands.

A module defines ``register(subparsers)``; it adds its parsers and sets ``func`` on each to a function
``(args) -> int``. Command functions only merge options and call one library function.
Exit codes: 0 ok, 1 a regression was found (``compare``), 2 bad input or a failed operation,
130 interrupted.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys

from perfkit.errors import PerfkitError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfkit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name == "options":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `perfkit ... | head` ends quietly
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PerfkitError as err:
        print(f"perfkit: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("perfkit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
