"""The ``perfkit`` command line: each module of this package adds its subcommands.

A module defines ``register(subparsers)``; it adds its parsers and sets ``func`` on each to a function
``(args) -> int``. Command functions only merge options and call one library function. ``COMMANDS``
names every command, the module that adds it and its line in ``perfkit --help``: the parser imports
a command's module only when that command is parsed (or its parser asked for), so a command pays
for its own imports only, and ``perfkit --help`` for none.
Exit codes: 0 ok, 1 a regression was found (``compare``), 2 bad input or a failed operation,
130 interrupted (Ctrl-C or SIGTERM: ``perfkit.cli._signals``).

Errors are one line on stderr: a user's mistake (``PerfkitError``, a bad option) names the option or
field, the value and what is allowed; anything else is a bug, printed as one line that says so, and
``--debug`` (anywhere on the command line) prints its traceback.
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
import traceback
from typing import Iterator, Mapping, NoReturn

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


#: Every command, in the order ``perfkit --help`` lists them: (its name, the modules of this package
#: that add it, in the order they register, its line in ``perfkit --help``; None: not listed). A
#: module's ``register`` may add several commands; their lines here are the help it gives them
#: (tests/test_startup.py checks both).
COMMANDS: tuple[tuple[str, str, str | None], ...] = (
    ("ab", "ab", "build two revisions, measure them interleaved, compare (exit 1 on regression)"),
    ("agent", "agent", "perfkit's side of a lab host: JSON lines on stdin/stdout, over SSH"),
    ("bisect", "bisect", "find the commit that made a figure slower (git bisect run, measured steps)"),
    ("bisect-step", "bisect", None),
    ("ci", "ci", "CI files for a repository of your own (ci init)"),
    ("compare", "compare", "compare a run with a baseline run (exit 1 on regression)"),
    ("dataplanes", "dataplanes", "list the installed dataplanes, where each comes from, and broken ones"),
    ("dataplane", "dataplanes scaffold", "work on one dataplane (check: the conformance check)"),
    ("experiment", "experiment", "run notebooks/experiment.ipynb with papermill: measure, push, fit, plot"),
    ("explain", "explain", "where the ns per packet go between two scenarios, knob values or runs"),
    ("export", "export", "write a run's trials (one row each) as CSV or Parquet"),
    ("exporter", "exporter", "serve a loaded dataplane's counters to Prometheus (/metrics on loopback)"),
    ("history", "history", "a campaign's figures by commit: plot, page, steps"),
    ("host", "host", "check this host: stalls per core, tuning, fitness for zero-loss measurements"),
    ("jupyter", "jupyter", "start JupyterLab on notebooks/ (127.0.0.1, with a token)"),
    ("lab", "lab", "labs across hosts: an Ansible inventory"),
    ("metrics", "metrics", "query Prometheus: endpoint health, a run's CPU, its pushed trials"),
    ("prog-bench", "progbench", "kernel-timed ns per packet of a dataplane program vs an XDP_DROP baseline"),
    ("push", "push", "push a run's trials to the Pushgateway (those not pushed yet)"),
    ("report", "report", "write the HTML report of a run (papermill + nbconvert, no traffic)"),
    ("run", "run", "run a campaign (scenarios x methods) into the run store"),
    ("search", "search", "run a benchmark methodology (maxrate, sweep, ndr, pdr, ndrpdr ...)"),
    ("stack", "stack", "start, stop or check the local Prometheus/Pushgateway/node-exporter"),
    ("testbed", "testbed", "bring the local veth/netns testbed up or down, show it, clean leftovers"),
    ("clean", "testbed", "remove the leftovers of perfkit no live process owns: testbeds, lab sandboxes, "
                         "metrics servers, dataplane descriptions and exporter targets"),
    ("trace", "trace", "the path of a sample of the trial's packets through the DUT's kernel (bpftrace)"),
    ("trex-profile", "trexprofile", "TRex STL profiles on the local generator"),
    ("trial", "trial", "run one trial (offered rate for a duration or packet count)"),
)


class _Commands(argparse._SubParsersAction):
    """The subparsers of ``COMMANDS``, each made when first needed: when its command is parsed, or
    ``choices[name]`` asked for. Until then only its line in the help exists."""

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)
        self._modules = {name: modules.split() for name, modules, _ in COMMANDS}
        self._registered: set[str] = set()
        self._choices_actions = [self._ChoicesPseudoAction(name, (), help_) for name, _, help_ in COMMANDS
                                 if help_ is not None]
        self.choices = _LazyChoices(self)

    def add_parser(self, name: str, **kwargs: object) -> argparse.ArgumentParser:
        if name in self._modules:
            kwargs.pop("help", None)   # listed from COMMANDS already
        return super().add_parser(name, **kwargs)

    def parser(self, name: str) -> argparse.ArgumentParser:
        """The parser of command ``name``, its modules imported and registered now if not yet."""
        for module in self._modules.get(name, ()):
            if module not in self._registered:
                self._registered.add(module)   # first: a module may look its command up (scaffold)
                importlib.import_module(f"{__name__}.{module}").register(self)
        return self._name_parser_map[name]

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: list[str],
                 option_string: str | None = None) -> None:
        self.parser(values[0])
        super().__call__(parser, namespace, values, option_string)


class _LazyChoices(Mapping[str, argparse.ArgumentParser]):
    """``_Commands.choices``: every command's name, in order; a parser is made when looked up."""

    def __init__(self, action: _Commands):
        self._action = action

    def __getitem__(self, name: str) -> argparse.ArgumentParser:
        return self._action.parser(name)

    def __contains__(self, name: object) -> bool:   # argparse's check of a command: nothing imported
        return name in self._action._modules or name in self._action._name_parser_map

    def __iter__(self) -> Iterator[str]:
        yield from self._action._modules
        yield from (n for n in self._action._name_parser_map if n not in self._action._modules)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def build_parser() -> argparse.ArgumentParser:
    """The ``perfkit`` parser. A command's own parser is made when it is parsed or looked up
    (``choices[name]`` of the subparsers action), so building this imports no command's module."""
    parser = Parser(prog="perfkit", description=__doc__.splitlines()[0])
    parser.add_argument(DEBUG_FLAG, action="store_true",
                        help="print the traceback of an unexpected error (also accepted after the command)")
    parser.add_argument("--version", action=VersionAction, help="print perfkit's version and git commit, and exit")
    parser.register("action", "commands", _Commands)
    parser.add_subparsers(dest="command", required=True, metavar="COMMAND", action="commands")
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
