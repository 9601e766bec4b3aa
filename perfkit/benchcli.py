"""The start-up every bench (``bench/*.py``) shares, so that a bench is only its measurement: its
parser (described by the bench's docstring, with the options every bench has and errors in one line
as the ``perfkit`` command's), the recording of its figures, and the exit with its code.

Benches import perfkit as installed (``make setup`` installs the checkout's), never by path::

    from perfkit import benchcli

    def main(args: argparse.Namespace) -> int:
        ...

    if __name__ == "__main__":
        ap = benchcli.parser(__doc__, record="probe_cost")
        ap.add_argument("--rounds", type=integer(1), default=15)
        benchcli.run(main, ap)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

from perfkit import benchresults
from perfkit.cli import Parser
from perfkit.errors import PerfkitError


def parser(doc: str | None, record: str | None = None, json: bool = True) -> Parser:
    """A bench's parser: its description the first paragraph of ``doc`` (the module docstring), the
    rest (how to run it) the epilog; ``--json`` to print the figures as JSON (unless ``json`` is
    false: a bench that prints a report only), and for a bench whose runs are recorded as ``record``
    (``perfkit.benchresults``) ``--no-record``."""
    head, _, rest = (doc or "").strip().partition("\n\n")
    ap = Parser(prog=Path(sys.argv[0]).name, description=" ".join(head.split()), epilog=rest or None,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    if json:
        ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    if record:
        ap.add_argument("--no-record", action="store_true",
                        help=f"do not add this run to {benchresults.results_file(record)} and "
                             f"{benchresults.results_md()}")
    return ap


def print_json(figures: Any) -> None:
    """A bench's figures for ``--json``: indented, what is not JSON as its ``str``."""
    json.dump(figures, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def record(args: argparse.Namespace, bench: str, figures: dict[str, Any], summary: str,
           argv: Sequence[str] | None = None) -> None:
    """Record a run's figures (unless ``--no-record``) and say where, on stderr."""
    if getattr(args, "no_record", False):
        return
    rec = benchresults.record(bench, figures, summary, list(argv) if argv is not None else sys.argv)
    print(f"recorded in {benchresults.results_file(bench)} ({rec.date})", file=sys.stderr)


def run(main: Callable[[argparse.Namespace], int], ap: argparse.ArgumentParser,
        argv: Sequence[str] | None = None) -> NoReturn:
    """Parse the command line, run ``main`` and exit with its code; a ``PerfkitError`` (bad input, a
    failed operation) is one line on stderr and exit 2, as with the ``perfkit`` command."""
    args = ap.parse_args(argv)
    try:
        code = main(args)
    except PerfkitError as err:
        print(f"{ap.prog}: error: {err}", file=sys.stderr)
        code = 2
    sys.exit(code)
