"""``python -m perfkit`` ends without tearing the interpreter down (``perfkit.__main__.exit_now``): its
exit status, its whole output and its ``atexit`` functions are those of a normal exit, and a thread
the interpreter would wait for is still waited for. Real processes, not forked ones."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_exit_now_runs_the_atexit_functions_flushes_and_keeps_the_status():
    out = python("import atexit, sys\n"
                 "from perfkit.__main__ import exit_now\n"
                 "atexit.register(lambda: print('atexit ran'))\n"
                 "sys.stdout.write('x' * 100000)\n"          # more than a pipe buffer, not flushed yet
                 "print('to stderr', file=sys.stderr)\n"
                 "exit_now(3)\n")
    assert out.returncode == 3, out.stderr
    assert out.stdout == "x" * 100000 + "atexit ran\n" and out.stderr == "to stderr\n"


def test_exit_now_waits_for_a_thread_the_interpreter_would_wait_for():
    out = python("import threading, time\n"
                 "from perfkit.__main__ import exit_now\n"
                 "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
                 "threading.Thread(target=lambda: time.sleep(60), daemon=True).start()\n"
                 "exit_now(4)\n")
    assert out.returncode == 4 and out.stdout == "thread done\n", out.stderr


def test_a_command_exits_with_its_status_and_all_its_output():
    ok = subprocess.run([sys.executable, "-P", "-m", "perfkit", "trial", "--generator", "sim", "--rate", "1Mpps",
                         "--duration", "0.1", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["generator"] == "sim"
    bad = subprocess.run([sys.executable, "-P", "-m", "perfkit", "trial", "--generator", "sim", "--rate", "-1"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.startswith("perfkit: error: rate"), bad.stderr
    usage = subprocess.run([sys.executable, "-P", "-m", "perfkit", "no-such-command"], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
    assert usage.returncode == 2 and "no-such-command" in usage.stderr   # argparse's SystemExit: the usual exit
