"""perfkit's side of the TRex worker: spawn it, call it, close it.

TRex's client library cannot be imported into perfkit's process (it swaps scapy for its bundled
2.4.3; see ``worker.py``), so ``TRexWorker`` runs ``worker.py`` with the TRex environment's Python
and exchanges JSON lines with it. The worker's stderr (TRex's chatter, tracebacks) goes to a log
file; perfkit raises one-line ``PerfkitError``/``ConfigError`` from the worker's answers.

Which Python: ``PERFKIT_TREX_PYTHON`` if set, else ``build/trex-venv/bin/python`` (``make setup``
installs the pinned ``lbr-trex-client`` there). Which library: ``TREX_HOME``'s client if set (a
lab's TRex installation), else ``lbr_trex_client``.
"""
from __future__ import annotations

import atexit
import base64
import json
import os
import selectors
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from perfkit.errors import ConfigError, PerfkitError
from perfkit.paths import TREX_VENV

ENV_PYTHON = "PERFKIT_TREX_PYTHON"
ENV_TREX_HOME = "TREX_HOME"
ENV_DIE_WITH_PARENT = "PERFKIT_TREX_DIE_WITH_PARENT"
"""Set for the worker: 1 asks it to die with perfkit's process (``worker.die_with_parent``)."""
#: Where ``make setup`` installs the TRex client (Makefile ``trex-venv``).
DEFAULT_VENV = TREX_VENV
WORKER = Path(__file__).resolve().parent / "worker.py"
PROTOCOL = 1
"""Must equal ``worker.PROTOCOL`` (not imported: worker.py is the other process's code)."""
START_TIMEOUT = 60.0
"""Seconds the worker may take to import TRex (about 1 s here; a cold disk in a lab is slower)."""
CLOSE_TIMEOUT = 15.0
"""Seconds ``close`` waits for the worker to disconnect from TRex before it is killed (the worker
gives its disconnect 10 s: ``worker.DISCONNECT_SECONDS``)."""
LOG_TAIL = 2000


class WorkerError(PerfkitError):
    """The worker failed or died (not the user's input): says what it was doing, and its log."""


def trex_python() -> Path:
    """The Python that runs the worker, or a PerfkitError saying how to get one."""
    env = os.environ.get(ENV_PYTHON)
    path = Path(env) if env else DEFAULT_VENV / "bin" / "python"
    if not os.access(path, os.X_OK):
        how = (f"env {ENV_PYTHON}={env} is not an executable" if env else
               f"{path} is missing: run `make setup` (or set {ENV_PYTHON} to a Python with TRex's client)")
        raise PerfkitError(f"the TRex client library is not installed: {how}")
    return path


class TRexWorker:
    """One worker process: ``call(method, **params)`` -> its result. A context manager.

    Calls are serialised (one request in flight); the worker holds at most one TRex session.
    """

    def __init__(self, python: str | Path | None = None, *, trex_home: str | Path | None = None,
                 start_timeout: float = START_TIMEOUT):
        self.python = Path(python) if python else trex_python()
        env = dict(os.environ)
        home = trex_home if trex_home is not None else env.get(ENV_TREX_HOME)
        env.pop(ENV_TREX_HOME, None)
        if home:
            env[ENV_TREX_HOME] = str(home)
        # PR_SET_PDEATHSIG fires when the *thread* that forked the worker ends: only the main thread's
        # lifetime is the process's. Other workers end at EOF on stdin when perfkit goes.
        env[ENV_DIE_WITH_PARENT] = "1" if threading.current_thread() is threading.main_thread() else "0"
        self.log = tempfile.NamedTemporaryFile(prefix="perfkit-trex-worker-", suffix=".log", delete=False)
        self._lock = threading.Lock()
        self._next_id = 0
        self._buf = b""
        self._keep_log = False
        self.owner_pid = os.getpid()
        # -I: no PYTHONPATH, no user site, no script directory: only the TRex environment's packages
        self.proc = subprocess.Popen([str(self.python), "-I", str(WORKER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=os.getcwd(),
                                     start_new_session=True)  # Ctrl-C is perfkit's; it closes the worker
        _LIVE.add(self)
        try:
            self.info = self.call("hello", timeout=start_timeout)
        except BaseException:
            self.close()
            raise
        if self.info.get("wire_version") != PROTOCOL:
            self.close()
            raise WorkerError(f"TRex worker wire version {self.info.get('wire_version')} != {PROTOCOL}: {WORKER} "
                              "and perfkit/trex/client.py are from different versions")

    # -- calls -------------------------------------------------------------------------------------
    def call(self, method: str, timeout: float | None = None, **params: Any) -> Any:
        """Send one request and wait (at most ``timeout`` s) for its answer."""
        with self._lock:
            if self.proc.poll() is not None or self.proc.stdin is None:
                raise WorkerError(self._died(f"{method}: the TRex worker is not running"))
            self._next_id += 1
            request = {"id": self._next_id, "method": method, "params": params}
            try:
                self.proc.stdin.write((json.dumps(request) + "\n").encode())
                self.proc.stdin.flush()
            except BrokenPipeError:
                raise WorkerError(self._died(f"{method}: the TRex worker exited")) from None
            try:
                reply = self._read_reply(method, timeout)
            except BaseException:
                # Ctrl-C or a timeout mid-request: its answer would come as the next one's; a worker
                # out of step is no use, so it goes (disconnecting from TRex as it exits)
                self.kill()
                raise
        if reply.get("id") != request["id"]:
            raise WorkerError(f"{method}: the TRex worker answered request {reply.get('id')}, "
                              f"not {request['id']}")
        if "error" in reply:
            raise self._error(method, reply["error"])
        return reply.get("result")

    def _read_reply(self, method: str, timeout: float | None) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.kill()
                    raise WorkerError(self._died(f"{method}: no answer from the TRex worker in {timeout:g} s; "
                                                 "it was stopped"))
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.proc.wait()
                    raise WorkerError(self._died(f"{method}: the TRex worker exited (status "
                                                 f"{self.proc.returncode})"))
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            raise WorkerError(f"{method}: the TRex worker answered something else than JSON: {line[:200]!r}"
                              ) from None

    def _error(self, method: str, err: dict[str, Any]) -> PerfkitError:
        kind, message = err.get("kind"), err.get("message", "")
        self._keep_log = self._keep_log or kind not in ("config", "error")  # its traceback is there
        if kind == "config":
            return ConfigError(err["field"], err.get("value"), err.get("allowed", ""))
        if kind == "trex":
            return PerfkitError(f"TRex: {message}")
        if kind == "error":
            return PerfkitError(message)
        return WorkerError(f"TRex worker, {method}: {message} (log: {self.log.name})")

    def _died(self, what: str) -> str:
        try:
            tail = Path(self.log.name).read_text(errors="replace")[-LOG_TAIL:]
        except OSError:
            tail = ""
        last = [ln for ln in tail.splitlines() if ln.strip()]
        return f"{what}; last words: {last[-1].strip()} (log: {self.log.name})" if last else what

    # -- life cycle --------------------------------------------------------------------------------
    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """End the worker: EOF on its stdin lets it disconnect from TRex (ports released) and exit;
        SIGTERM, then SIGKILL, if it does not. Idempotent."""
        _LIVE.discard(self)
        if self.owner_pid != os.getpid():  # a forked child does not own its parent's worker
            return
        proc = self.proc
        if proc.poll() is None:
            try:
                if proc.stdin:
                    proc.stdin.close()
                proc.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        for f in (proc.stdin, proc.stdout):
            if f:
                try:
                    f.close()
                except OSError:
                    pass
        self.log.close()
        if proc.returncode in (0, -15, 143) and not self._keep_log:
            Path(self.log.name).unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGTERM (the worker disconnects), then SIGKILL after a grace period."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(CLOSE_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def __enter__(self) -> TRexWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_LIVE: set[TRexWorker] = set()


@atexit.register
def _close_all() -> None:
    """Workers left open at exit (an exception before a ``with``) still disconnect from TRex."""
    for worker in list(_LIVE):
        worker.close(timeout=2.0)


# -- profiles --------------------------------------------------------------------------------------
_shared: TRexWorker | None = None
_shared_lock = threading.Lock()


def shared_worker() -> TRexWorker:
    """A worker kept for this process's profile loads (TRex's import costs about a second)."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.alive or _shared.owner_pid != os.getpid():
            _shared = TRexWorker()
        return _shared


def load_profile(path: str | Path, tunables: Iterable[str] | dict[str, Any] = (), port_id: int = 0,
                 port_parity: int = 0, *, worker: TRexWorker | None = None) -> list[dict[str, Any]]:
    """A TRex STL profile loaded by TRex's own ``STLProfile.load_py``, as its console does for
    ``start -f PATH --port PORT_ID -t TUNABLES``: the streams' ``to_json()``, i.e. what a TRex server
    receives (``packet.binary`` base64, ``mode``, ``vm.instructions`` with resolved offsets ...).

    ``tunables``: ``["--flows", "100"]`` (argparse words), ``["flows=100,dir=dl"]`` (the old
    ``-t k=v,...`` form) or a dict. A missing file or a bad tunable is a ``ConfigError``; an error
    inside the profile a ``PerfkitError`` with its one-line message and line.
    """
    if not (isinstance(port_id, int) and port_id >= 0):
        raise ConfigError("port_id", port_id, "a TRex port number (an integer >= 0)")
    if port_parity not in (0, 1):  # TRex calls it direction: the port's number modulo 2
        raise ConfigError("port_parity", port_parity, (0, 1))
    if isinstance(tunables, str):
        raise ConfigError("tunables", tunables, "a list of words (['--flows', '100']) or a dict")
    plain: list[str] | dict[str, Any] = dict(tunables) if isinstance(tunables, dict) else [str(t) for t in tunables]
    return (worker or shared_worker()).call("load_profile", path=str(Path(path).resolve()), tunables=plain,
                                            port_id=port_id, port_parity=port_parity)


def build_streams_json(specs: list[dict[str, Any]], *, worker: TRexWorker | None = None) -> list[dict[str, Any]]:
    """perfkit's stream specs made into TRex ``STLStream`` objects by TRex, as JSON (no server)."""
    return (worker or shared_worker()).call("build_streams", streams=specs)


def stream_frame(stream_json: dict[str, Any]) -> bytes:
    """The frame bytes of one stream's JSON (``packet.binary``)."""
    return base64.b64decode(stream_json["packet"]["binary"])


def int_keys(value: Any) -> Any:
    """Undo JSON's string keys: TRex keys ports, pg_ids and histogram buckets by number."""
    if isinstance(value, dict):
        return {(int(k) if isinstance(k, str) and k.lstrip("-").isdigit() else k): int_keys(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [int_keys(v) for v in value]
    return value
