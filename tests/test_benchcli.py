"""The benches' start-up (``perfkit.benchcli``): every bench uses it and imports perfkit as
installed, and a bench's bad input is one line and exit 2, as with the ``perfkit`` command."""
from __future__ import annotations

import ast
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
