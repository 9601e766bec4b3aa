"""The server processes of a metrics stack: ports, binaries, spawning, identity, health, stopping, and
what a server's log says when it fails.

A server is spawned in a session of its own (it outlives the command that started it) and known by
its pid *and* its start time (``proc_start``), so that a recycled pid is never taken for it
(``is_ours``) nor killed. The stack's commands (``perfkit.metrics.stack``) decide which to start
and stop; this module only knows one process at a time.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any, Mapping

from perfkit import stop
from perfkit.errors import MetricsError

#: Binary names of each server (Debian's first, then upstream's), the variables that override them, and
#: the Debian packages that have them.
BINARIES: dict[str, tuple[str, ...]] = {
    "prometheus": ("prometheus",),
    "pushgateway": ("prometheus-pushgateway", "pushgateway"),
    "node-exporter": ("prometheus-node-exporter", "node_exporter"),
}
BINARY_ENV: dict[str, str] = {"prometheus": "PERFKIT_PROMETHEUS_BIN", "pushgateway": "PERFKIT_PUSHGATEWAY_BIN",
                              "node-exporter": "PERFKIT_NODE_EXPORTER_BIN"}
DEBIAN_PACKAGES: dict[str, str] = {"prometheus": "prometheus", "pushgateway": "prometheus-pushgateway",
                                   "node-exporter": "prometheus-node-exporter"}
#: What each server answers 200 on once it is ready.
HEALTH_PATHS: dict[str, str] = {"prometheus": "/-/ready", "pushgateway": "/-/ready", "node-exporter": "/metrics"}
#: The line ``spawn`` writes into a server's log before each start.
LOG_MARKER = "--- perfkit stack up"
#: Servers this Python process spawned: pid -> exit status once reaped (None while it runs).
_SPAWNED: dict[int, int | None] = {}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at ``host`` right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """Something listens on ``host:port`` (it cannot be bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def find_binary(name: str, binaries: Mapping[str, str] | None = None) -> str:
    """Path of a component's binary; ``MetricsError`` naming the package when it is missing."""
    wanted = (binaries or {}).get(name) or os.environ.get(BINARY_ENV[name])
    candidates = (wanted,) if wanted else BINARIES[name]
    for cand in candidates:
        path = shutil.which(cand)
        if path:
            return path
    raise MetricsError(f"{name}: binary {' or '.join(candidates)} not found (PATH={os.environ.get('PATH', '')}); "
                       f"install the Debian package {DEBIAN_PACKAGES[name]} or set ${BINARY_ENV[name]}")


def proc_start(pid: int) -> int | None:
    """Start time [ticks after boot] of a live, non-zombie process; None if there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = text[text.rfind(")") + 2:].split()
    if rest[0] in ("Z", "X"):
        reap(pid)
        return None
    return int(rest[19])


def reap(pid: int) -> None:
    """Collect the exit status of a server this process spawned (so it does not stay a zombie)."""
    if _SPAWNED.get(pid, 0) is not None:
        return                     # not ours (init reaps it) or already reaped
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        _SPAWNED[pid] = -1
        return
    if done:
        _SPAWNED[pid] = os.waitstatus_to_exitcode(status)


def is_ours(rec: Mapping[str, Any]) -> bool:
    """The recorded process is alive and is the very one we started (pid not recycled)."""
    pid, start = rec.get("pid"), rec.get("start_ticks")
    return bool(pid) and start is not None and proc_start(int(pid)) == start


def stop_pid(pid: int, timeout: float) -> str:
    """SIGTERM, wait, then SIGKILL one process; returns how it ended."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "already gone"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap(pid)
        if proc_start(pid) is None:
            return "stopped (SIGTERM)"
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        reap(pid)
        if proc_start(pid) is None:
            break
        time.sleep(0.05)
    return f"killed (SIGKILL after {timeout:g} s)"


def spawn(name: str, argv: list[str], d: Path, host: str, port: int) -> dict[str, Any]:
    """Start one server (its log in ``d/logs/<name>.log``); returns its record for the state file."""
    log_path = d / "logs" / f"{name}.log"
    with open(log_path, "ab") as log:
        log.write(f"{LOG_MARKER} {time.strftime('%Y-%m-%dT%H:%M:%S')}: {' '.join(argv)}\n".encode())
    # posix_spawn, not Popen: the server outlives this process (``perfkit stack up`` returns at once)
    # in a session of its own, stdin from /dev/null, stdout and stderr into its log.
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, str(log_path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644),
               (os.POSIX_SPAWN_DUP2, 1, 2)]
    try:
        pid = os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions, setsid=True,
                             setsigmask=(), setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT))
    except OSError as err:
        raise MetricsError(f"{name}: cannot run {argv[0]}: {err}") from None
    _SPAWNED[pid] = None
    start = None
    for _ in range(50):
        start = proc_start(pid)
        if start is not None or _SPAWNED.get(pid) is not None:
            break
        time.sleep(0.01)
    return {"pid": pid, "start_ticks": start, "port": port, "argv": argv, "log": str(log_path),
            "url": f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"}


def wait_healthy(name: str, rec: Mapping[str, Any], host: str, port: int,
                 auth: tuple[str, str] | None, timeout: float) -> None:
    """Wait until the server answers its health URL; ``MetricsError`` with the reason from its log if
    it exits first, or with its log's tail after ``timeout`` seconds."""
    url = rec["url"] + HEALTH_PATHS[name]
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        pid = rec["pid"]
        reap(pid)
        exited = _SPAWNED[pid] is not None if pid in _SPAWNED else not is_ours(rec)
        if exited:
            time.sleep(0.1)   # let the log be flushed
            log = log_section(Path(rec["log"]))
            code = f" with status {_SPAWNED[pid]}" if _SPAWNED.get(pid) is not None else ""
            raise MetricsError(f"{name} exited during start{code}: {explain_log(log, host, port)} "
                               f"(log: {rec['log']})")
        ok, last = check_health(url, auth)
        if ok:
            return
        stop.check()   # a stop pending (perfkit.stop) ends the wait; the caller stops what started
        time.sleep(0.2)
    raise MetricsError(f"{name} did not become ready within {timeout:g} s ({last}); log: {rec['log']}\n"
                       + log_tail(Path(rec["log"]), 5))


def check_health(url: str, auth: tuple[str, str] | None, timeout: float = 2.0) -> tuple[bool, str]:
    """(the health URL answered 200, what it answered)."""
    import requests   # here: a lab host's agent imports this module (its own servers' pids) without it
    try:
        r = requests.get(url, auth=auth, timeout=timeout)
    except requests.RequestException as err:
        return False, f"{url}: {type(err).__name__}"
    if r.status_code == 200:
        return True, f"{url}: 200"
    return False, f"{url}: HTTP {r.status_code} {r.text.strip()[:100]}"


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a server's log."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def log_section(path: Path) -> str:
    """What the server logged since the last ``perfkit stack up`` marker (at most 64 KiB)."""
    try:
        text = path.read_text(errors="replace")[-65536:]
    except FileNotFoundError:
        return ""
    i = text.rfind(LOG_MARKER)
    return text[text.find("\n", i) + 1:] if i >= 0 else text


def explain_log(log: str, host: str, port: int) -> str:
    """A one-line reason from a server's log after it failed to start."""
    low = log.lower()
    if "address already in use" in low:
        return f"port {port} on {host} is in use by another process"
    if "cannot assign requested address" in low:
        return f"address {host} does not belong to this machine"
    if "permission denied" in low:
        return "permission denied (" + _first_error(log) + ")"
    if "error loading config" in low or "couldn't load configuration" in low or "parsing yaml" in low:
        return "bad configuration: " + _first_error(log)
    if "lock" in low and "dir" in low and "resource temporarily unavailable" in low:
        return "its data directory is locked by another running instance"
    return _first_error(log) or "exited without a message"


def _first_error(log: str) -> str:
    for line in log.splitlines():
        if "level=error" in line or "err=" in line or "error" in line.lower() or "level=fatal" in line:
            return line.strip()[:400]
    return log.strip().splitlines()[-1][:400] if log.strip() else ""
