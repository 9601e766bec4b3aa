"""Run a console script (``.venv/bin/perfkit``) or ``python -m perfkit`` many times without paying the
interpreter's imports each time.

A ``ScriptForks`` starts one server process (the script's own interpreter, from its ``#!`` line, or
``sys.executable`` for a module) that imports the third-party libraries perfkit imports (numpy,
pandas, pyarrow, scapy, ... about 1.3 s of CPU a start on this VM) and nothing of perfkit. For each
``run`` it forks a child, which takes the case's environment, working directory, argv and files for
stdin/stdout/stderr, then executes the script's file (``runpy.run_path``) or the module
(``runpy.run_module``) as ``__main__``, with ``sys.argv`` and ``sys.path[0]`` as the interpreter
would set them: perfkit is imported there, after the environment is set (``PERFKIT_DATA`` and the
like are read at import), and the child ends the way the command's process would (``sys.exit``, an
uncaught exception, a signal). ``run`` returns a ``subprocess.CompletedProcess`` with the child's
exit status (negative: killed by that signal), its stdout and its stderr.

The server lives in this file too (``python script_forks.py -s SCRIPT|-m MODULE PRELOAD...``): it
reads one JSON request a line on stdin and answers two lines on stdout: the child's pid once forked,
its exit status once reaped. It handles one request at a time: use one ``ScriptForks`` per thread.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Third-party modules perfkit's CLI imports (not perfkit: it reads its environment when imported).
PRELOAD = ("numpy", "pandas", "pyarrow", "pyarrow.parquet", "scapy.packet", "scapy.layers.l2", "scapy.layers.inet",
           "scapy.contrib.gtp", "scapy.utils", "requests", "yaml", "tqdm", "prometheus_client", "prometheus_api_client",
           "dateutil")


class ScriptForks:
    """Processes of ``script`` (a console script: its ``#!`` interpreter runs it) or, with
    ``module=True``, of ``python -m script`` (``sys.executable``), forked from one server."""

    def __init__(self, script: Path | str, *, module: bool = False, preload: tuple[str, ...] = PRELOAD) -> None:
        self.script, self.module = str(script), module
        if module:
            interpreter = sys.executable
        else:
            interpreter = Path(script).read_text().splitlines()[0].removeprefix("#!").strip()
        self.proc = subprocess.Popen([interpreter, __file__, "-m" if module else "-s", self.script, *preload],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._buf = b""
        ready = self._line(120)
        if ready != {"ready": True}:
            self.close()
            raise RuntimeError(f"script fork server did not start: {ready}")

    def _line(self, timeout: float) -> dict | None:
        """The server's next answer; None if none within ``timeout`` s or the server is gone."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def run(self, argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | str | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
        """One process; ``env`` and ``cwd`` default to this process's, as for ``subprocess.run``."""
        env = dict(os.environ) if env is None else env
        cwd = os.getcwd() if cwd is None else cwd
        args = [*([sys.executable, "-m"] if self.module else []), self.script, *argv]
        with tempfile.TemporaryDirectory(prefix="script-forks-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            self.proc.stdin.write((json.dumps({"argv": argv, "env": env, "cwd": str(cwd), "stdout": str(out),
                                               "stderr": str(err)}) + "\n").encode())
            self.proc.stdin.flush()
            started = self._line(60)
            if not started or "pid" not in started:
                raise RuntimeError(f"script fork server did not fork: {started}")
            done = self._line(timeout)
            if done is None:                      # as subprocess.run's timeout: kill the child, then fail
                os.kill(started["pid"], signal.SIGKILL)
                self._line(60)
                raise subprocess.TimeoutExpired(args, timeout)
            return subprocess.CompletedProcess(args, done["returncode"], out.read_text(), err.read_text())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()

    def __enter__(self) -> ScriptForks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the server -------------------------------------------------------------------------------------
def _child(kind: str, script: str, req: dict) -> None:
    """In the forked child: become the script's process for this request, then run the script (``-s``)
    or the module (``-m``) as ``__main__``."""
    import runpy

    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        f = os.open(path, flags, 0o600)
        os.dup2(f, fd)
        os.close(f)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    if kind == "-m":
        sys.argv = [script, *req["argv"]]             # run_module puts the module's file in argv[0]
        sys.path[0] = os.getcwd()                     # what the interpreter puts first for -m
        runpy.run_module(script, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [script, *req["argv"]]
        sys.path[0] = os.path.dirname(script)         # what the interpreter puts first for a script
        runpy.run_path(script, run_name="__main__")
    sys.exit(0)                                       # it returned: the interpreter would exit 0


def _serve(kind: str, script: str, preload: list[str]) -> None:
    import gc
    import importlib

    for name in preload:
        importlib.import_module(name)
    gc.freeze()            # the children's collections and exits leave the server's objects (and pages) alone
    reply = sys.stdout
    print(json.dumps({"ready": True}), file=reply, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:                                  # sys.std* (flushed) now write to the case's files
            _child(kind, script, req)                 # never returns: SystemExit ends the child
        print(json.dumps({"pid": pid}), file=reply, flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)}), file=reply, flush=True)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], sys.argv[3:])
