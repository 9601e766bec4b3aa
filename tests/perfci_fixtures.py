"""A scratch repository of the project with eight commits, one of which makes the calibrated DUT slower.

``scratch_repo(dest)`` clones the checkout (its HEAD) and adds eight small commits. Seven change only
a notes file; the fifth (``PLANTED``, in the middle) adds ``PLANTED_WORK`` iterations of the
calibrated DUT's ``bpf_loop`` work to every packet (``bpf/calib.bpf.c``): at the perf-ci campaign's
N = 200 the program does three times the work, so its max-rate figure falls by about half.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from perfkit.paths import CHECKOUT

#: The planted commit's position (1-based) among the eight.
PLANTED = 5
COMMITS = 8
#: bpf_loop iterations the planted commit adds per packet.
PLANTED_WORK = 400
_WORK_LINE = "\tdone = bpf_loop(work, work_step, &st, 0);\n"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def scratch_repo(dest: Path) -> list[str]:
    """Clone the checkout into ``dest`` and add the eight commits; their full ids, oldest first."""
    assert CHECKOUT is not None
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(CHECKOUT), str(dest)], check=True)
    _git(dest, "config", "user.email", "perfci@example.invalid")
    _git(dest, "config", "user.name", "perfci test")
    notes = dest / "SCRATCH-NOTES.md"
    commits = []
    for i in range(1, COMMITS + 1):
        if i == PLANTED:
            src = dest / "bpf" / "calib.bpf.c"
            text = src.read_text()
            assert _WORK_LINE in text, "bpf/calib.bpf.c changed: update tests/perfci_fixtures.py"
            src.write_text(text.replace(_WORK_LINE, f"\twork += {PLANTED_WORK};   /* planted: more work per packet */\n"
                                                    + _WORK_LINE))
            msg = f"Give the calibrated DUT {PLANTED_WORK} more work iterations per packet"
        else:
            with notes.open("a") as f:
                f.write(f"scratch commit {i}\n")
            msg = f"Add scratch note {i}"
        _git(dest, "add", "-A")
        _git(dest, "commit", "--quiet", "-m", msg)
        commits.append(_git(dest, "rev-parse", "HEAD"))
    return commits
