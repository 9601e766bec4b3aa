"""JupyterLab on the notebooks (``make jupyter``, ``perfkit jupyter``): 127.0.0.1 only, a fresh token, a clean stop.

``Lab.start(port)`` runs ``python -m jupyterlab`` (the .venv's JupyterLab) serving ``notebooks/`` on
127.0.0.1 with a token generated for this start (``secrets.token_urlsafe``; given to Jupyter in
``$JUPYTER_TOKEN``, never on its command line, where ``ps`` would show it), waits until its API
answers with the token and returns the URL to open. Jupyter runs in a session of its own so that a
terminal's Ctrl-C reaches only perfkit, which then stops it in order (``Lab.stop``): kernels still
busy (an experiment measuring) are interrupted first -- the campaign runner then takes its testbed
down and marks the run ``interrupted`` --, then the server gets SIGTERM (it shuts its kernels down),
and what is left of its process group after ``STOP_SECONDS`` is killed.

The kernels see ``$PERFKIT_HOME`` and ``$PERFKIT_REPORTS`` as the absolute paths of perfkit's home
and reports directory as this process has them (``paths.data_dir``, ``paths.reports_dir``): a
kernel's working directory is its notebook's directory, and runs should land where ``perfkit run``
from here puts them.
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from perfkit.errors import ConfigError, PerfkitError
from perfkit.metrics.servers import free_port
from perfkit.paths import NOTEBOOKS_DIR, data_dir, reports_dir

NOTEBOOKS = NOTEBOOKS_DIR
HOST = "127.0.0.1"
#: Seconds to wait for the server to answer after it started.
READY_SECONDS = 120.0
#: Seconds busy kernels get to stop after an interrupt, and the server after SIGTERM.
INTERRUPT_SECONDS = 60.0
STOP_SECONDS = 30.0
#: The notebook the printed URL opens.
START_NOTEBOOK = "experiment.ipynb"


@dataclass
class Lab:
    """A running JupyterLab server."""

    proc: subprocess.Popen
    port: int
    token: str = field(repr=False)
    root_dir: Path = NOTEBOOKS

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The URL to open: the experiment notebook, with the token."""
        return f"{self.base_url}/lab/tree/{START_NOTEBOOK}?token={self.token}"

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "base_url": self.base_url, "port": self.port, "token": self.token,
                "pid": self.proc.pid, "root_dir": str(self.root_dir)}

    # -- starting -------------------------------------------------------------------------------
    @classmethod
    def start(cls, port: int | None = None, root_dir: str | Path = NOTEBOOKS, log: Any = None,
              ready_seconds: float = READY_SECONDS) -> Lab:
        """Start JupyterLab on ``port`` (None: a free one) and wait until it answers with the token.
        ``log``: a file for the server's output (default: our stderr)."""
        root = Path(root_dir).absolute()
        if not root.is_dir():
            raise ConfigError("--root-dir", str(root), "an existing directory of notebooks")
        if port is None:
            port = free_port(HOST)
        elif not 1 <= port <= 65535:
            raise ConfigError("--port", port, "a TCP port, 1 .. 65535")
        token = secrets.token_urlsafe(32)
        env = dict(os.environ, JUPYTER_TOKEN=token)
        env["PERFKIT_HOME"] = str(data_dir().absolute())
        env["PERFKIT_REPORTS"] = str(reports_dir().absolute())
        argv = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ip={HOST}", f"--port={port}",
                "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}"]
        if os.geteuid() == 0:
            argv.append("--allow-root")
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log or sys.stderr,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=str(root))
        lab = cls(proc, port, token, root)
        try:
            lab._wait_ready(ready_seconds)
        except BaseException:
            lab.stop()
            raise
        return lab

    def _wait_ready(self, seconds: float) -> None:
        import requests

        deadline = time.monotonic() + seconds
        while True:
            if self.proc.poll() is not None:
                raise PerfkitError(f"JupyterLab exited with status {self.proc.returncode} before it answered on "
                                   f"{self.base_url} (its log says why; is port {self.port} in use?)")
            try:
                r = requests.get(f"{self.base_url}/api/status", headers=self.auth(), timeout=5)
                if r.status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise PerfkitError(f"JupyterLab did not answer on {self.base_url} within {seconds:g} s")
            time.sleep(0.25)

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    # -- stopping -------------------------------------------------------------------------------
    def busy_kernels(self) -> list[dict[str, Any]]:
        import requests

        try:
            kernels = requests.get(f"{self.base_url}/api/kernels", headers=self.auth(), timeout=5).json()
        except (requests.RequestException, ValueError):
            return []
        return [k for k in kernels if isinstance(k, dict) and k.get("execution_state") == "busy"]

    def stop(self, say: Callable[[str], None] = lambda msg: None) -> int | None:
        """Interrupt busy kernels, SIGTERM the server, kill what is left; returns its exit status."""
        import requests

        if self.proc.poll() is None:
            busy = self.busy_kernels()
            if busy:
                say(f"interrupting {len(busy)} busy kernel(s) (a measuring experiment takes its testbed down)")
                for k in busy:
                    try:
                        requests.post(f"{self.base_url}/api/kernels/{k['id']}/interrupt", headers=self.auth(),
                                      timeout=5)
                    except requests.RequestException:
                        pass
                deadline = time.monotonic() + INTERRUPT_SECONDS
                while self.busy_kernels() and time.monotonic() < deadline:
                    time.sleep(0.5)
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                say(f"JupyterLab did not stop within {STOP_SECONDS:g} s: killing it")
                self.proc.kill()
                self.proc.wait()
        try:      # the server's own session: whatever it left (a kernel it could not stop)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.proc.returncode


def serve(port: int | None = None, *, on_ready: Callable[[Lab], None], say: Callable[[str], None],
          root_dir: str | Path = NOTEBOOKS) -> int:
    """Start the lab, call ``on_ready``, and wait until Ctrl-C or SIGTERM (or the server exits);
    then stop it in order. Returns 0 after a stop, the server's status if it ended by itself."""
    stopping: list[int] = []

    def handler(signum: int, frame: object) -> None:
        if stopping:
            say(f"{signal.Signals(signum).name} again: still stopping JupyterLab, please wait")
            return
        stopping.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    lab: Lab | None = None
    try:
        try:
            lab = Lab.start(port, root_dir)
            on_ready(lab)
            status = lab.proc.wait()
            say(f"JupyterLab exited by itself (status {status})")
            return status or 0
        except KeyboardInterrupt:
            say("stopping JupyterLab")
            return 0
        finally:
            if lab is not None:
                lab.stop(say)
                say("JupyterLab stopped")
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
