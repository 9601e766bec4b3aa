"""What every ``perfkit`` command pays before it does anything: parsing a command imports that
command's module (``perfkit.cli.COMMANDS``), and every parser may be built (``perfkit.cli.build_parser``,
tests and docs checks), so a command's heavy work (plotting, statistics, the MLRsearch library,
notebooks) is imported by the command that runs it, not at its module's top."""
from __future__ import annotations

import json
import subprocess
import sys

#: Libraries no parser needs: each costs 0.3-1.3 s of CPU at every start.
HEAVY = ("matplotlib", "seaborn", "scipy", "sklearn", "MLRsearch", "papermill", "nbconvert", "trex")


def test_building_the_parser_imports_no_plotting_statistics_or_notebook_library():
    code = ("import json, sys; from perfkit.cli import build_parser; "
            "c = build_parser()._subparsers._group_actions[0].choices; [c[n] for n in c]; "
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_building_the_parser_imports_no_commands_module():
    """``perfkit --help`` and ``perfkit clean`` pay for no other command's imports: a command's
    module is imported when its command is parsed."""
    code = ("import json, sys; from perfkit.cli import build_parser; p = build_parser(); p.format_help(); "
            "p.parse_args(['clean']); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('perfkit.cli.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["perfkit.cli._signals", "perfkit.cli.options", "perfkit.cli.testbed"]


def test_the_command_table_is_what_the_modules_register():
    """``perfkit.cli.COMMANDS`` names every command each module of ``perfkit.cli`` adds, in the order
    of the modules' names, each with the help its module gives it (what ``perfkit --help`` lists)."""
    import argparse
    import importlib
    import pkgutil

    import perfkit.cli as cli

    def shape(parser: argparse.ArgumentParser) -> tuple:   # what a module adding to a command changes
        return tuple((a.dest, tuple(a.choices) if isinstance(a, argparse._SubParsersAction) else ())
                     for a in parser._actions)

    sub = argparse.ArgumentParser().add_subparsers()
    owner: dict[str, list[str]] = {}
    for info in sorted(pkgutil.iter_modules(cli.__path__), key=lambda i: i.name):
        if info.name.startswith("_") or info.name == "options":
            continue
        before = {n: shape(p) for n, p in sub.choices.items()}
        importlib.import_module(f"perfkit.cli.{info.name}").register(sub)
        for name, parser in sub.choices.items():
            if before.get(name) != shape(parser):
                owner.setdefault(name, []).append(info.name)
    helps = {a.dest: a.help for a in sub._choices_actions}
    assert [(n, " ".join(m), helps.get(n)) for n, m in owner.items()] == list(cli.COMMANDS)


def test_import_perfkit_help_and_a_cheap_command_import_no_heavy_library():
    """``import perfkit``, ``perfkit --help`` and ``perfkit clean`` before it runs: no numpy, pandas,
    pyarrow, scapy or requests (0.1-0.4 s each at every start)."""
    code = ("import json, sys; import perfkit; from perfkit.cli import build_parser; p = build_parser(); "
            "p.format_help(); p.parse_args(['clean']); "
            "print(json.dumps(sorted(m for m in ('numpy', 'pandas', 'pyarrow', 'scapy', 'requests') if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_every_parsers_help_formats():
    """``--help`` of every command and subcommand (a ``%`` in a help string must be ``%%``)."""
    import argparse

    from perfkit.cli import build_parser

    def walk(parser: argparse.ArgumentParser) -> None:
        assert parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name in action.choices:
                    walk(action.choices[name])

    walk(build_parser())
