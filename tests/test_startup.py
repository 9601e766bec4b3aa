"""What every ``perfkit`` command pays before it does anything: building the parser imports every
command's module (``perfkit.cli.build_parser``), so a command's heavy work (plotting, statistics,
the MLRsearch library, notebooks) is imported by the command that runs it, not at its module's top."""
from __future__ import annotations

import json
import subprocess
import sys

#: Libraries no parser needs: each costs 0.3-1.3 s of CPU at every start.
HEAVY = ("matplotlib", "seaborn", "scipy", "sklearn", "MLRsearch", "papermill", "nbconvert", "trex")


def test_building_the_parser_imports_no_plotting_statistics_or_notebook_library():
    code = ("import json, sys; from perfkit.cli import build_parser; build_parser(); "
            f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
