"""The benches' start-up (``perfkit.benchcli``): every bench uses it and imports perfkit as
installed, and a bench's bad input is one line and exit 2, as with the ``perfkit`` command."""
from __future__ import annotations

import ast
import runpy
import subprocess
import sys

import pytest

from tests.conftest import ROOT

BENCHES = sorted((ROOT / "bench").glob("*.py"))


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.name)
def test_every_bench_starts_through_benchcli_and_imports_perfkit_as_installed(path):
    tree = ast.parse(path.read_text())
    names = {f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
             and isinstance(n.value, ast.Name)}
    assert "sys.path" not in names, "benches import perfkit as installed, not by path"
    assert {"benchcli.parser", "benchcli.run"} <= names


def test_a_bench_refuses_bad_input_in_one_line():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "generator_program.py"), "--rounds", "0"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "generator_program.py: error: argument --rounds: '0' is not allowed; allowed: a round count >= 1 "
        "(see generator_program.py --help)"]
    helped = subprocess.run([sys.executable, str(ROOT / "bench" / "generator_program.py"), "--help"],
                            capture_output=True, text=True, cwd=ROOT)
    assert helped.returncode == 0 and "BPF_PROG_TEST_RUN" in helped.stdout and "--json" in helped.stdout


#: Benches that do not start yet, and why: the lead removes an entry when its mend is merged
#: (strict: a bench that starts again fails here until its entry goes).
#: Benches known not to start, with the reason (none now; a strict xfail fails once one starts again).
NOT_STARTING: dict[str, str] = {}


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.xfail(raises=ImportError, strict=True,
                                                                 reason=NOT_STARTING[p.name]))
                                  if p.name in NOT_STARTING else p for p in BENCHES], ids=lambda p: p.name)
def test_every_bench_starts_and_prints_its_help(path, capsys, monkeypatch):
    """Each bench as ``python bench/X.py --help`` runs it: its imports, its options, benchcli's parser.
    In this process (``runpy``): the imports they share are paid once, not 13 times (2-4 s each)."""
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    monkeypatch.syspath_prepend(str(path.parent))      # what ``python bench/X.py`` puts first
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(str(path), run_name="__main__")
    assert exit_.value.code in (0, None)
    assert capsys.readouterr().out.startswith(f"usage: {path.name}")
