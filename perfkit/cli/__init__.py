"""The ``perfkit`` command line: each module of this package adds its subcommands.

A module defines ``register(subparsers)``; it adds its parsers and sets ``func`` on each to a function
``(args) -> int``. Command functions only merge options and call one library function.
Exit codes: 0 ok, 1 a regression was found (``compare``), 2 bad input or a failed operation,
130 interrupted (Ctrl-C or SIGTERM: ``perfkit.cli._signals``).

Errors are one line on stderr: a user's mistake (``PerfkitError``, a bad option) names the option or
field, the value and what is allowed; anything else is a bug, printed as one line that says so, and
``--debug`` (anywhere on the command line) prints its traceback.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
import traceback
from typing import NoReturn

from perfkit import stop
from perfkit.cli._signals import stop_on_signals
from perfkit.errors import PerfkitError
from perfkit.version import describe

#: The global flag that turns an unexpected error's one line into its traceback.
DEBUG_FLAG = "--debug"


class VersionAction(argparse.Action):
    """``--version``: perfkit's version and git commit (git runs only when asked), then exit 0."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(describe())
        parser.exit(0)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (the usage is a ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="perfkit", description=__doc__.splitlines()[0])
    parser.add_argument(DEBUG_FLAG, action="store_true",
                        help="print the traceback of an unexpected error (also accepted after the command)")
    parser.add_argument("--version", action=VersionAction, help="print perfkit's version and git commit, and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name == "options":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `perfkit ... | head` ends quietly
    try:   # first, before build_parser's imports: Ctrl-C or SIGTERM exit 130
        with stop_on_signals(then_default=argv is None):
            code = _main(argv)
            sys.stdout.flush()    # the result is out before a signal may end the exiting process
            return code
    except KeyboardInterrupt:     # a stop in the block's last moments, after _main's own handling
        print("perfkit: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    end = argv.index("--") if "--" in argv else len(argv)
    debug = DEBUG_FLAG in argv[:end]
    argv = [a for i, a in enumerate(argv) if a != DEBUG_FLAG or i >= end]
    try:
        args = build_parser().parse_args(argv)
        code = int(args.func(args) or 0)
        if stop.requested() and code != 130:   # raised where something dropped it: a stop all the same
            raise KeyboardInterrupt
        return code
    except PerfkitError as err:
        if debug:
            traceback.print_exc()
        print(f"perfkit: error: {' '.join(str(err).split())}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("perfkit: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - a bug: one line, the traceback on request
        # Ctrl-C inside a class's creation (Python wraps it in a RuntimeError), or while a compiled
        # module imports numpy (Cython's import_array replaces it with an ImportError): a stop all the same
        if _caused_by_interrupt(err) or stop.requested():
            print("perfkit: interrupted", file=sys.stderr)
            return 130
        if debug:
            traceback.print_exc()
            return 2
        where = traceback.extract_tb(err.__traceback__)[-1]
        print(f"perfkit: internal error: {type(err).__name__}: {' '.join(str(err).split())} "
              f"(at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}); run with {DEBUG_FLAG} for the traceback",
              file=sys.stderr)
        return 2


def _caused_by_interrupt(err: BaseException) -> bool:
    """Whether ``err`` wraps a ``KeyboardInterrupt`` (Python turns one raised in ``__set_name__``,
    while an imported module creates a dataclass, into ``RuntimeError`` from it)."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
