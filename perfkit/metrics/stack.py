"""The local metrics stack: Prometheus, Pushgateway and node-exporter as plain processes.

``up()`` starts the real binaries (Debian packages ``prometheus``, ``prometheus-pushgateway``,
``prometheus-node-exporter``), each in its own session, bound to ``host`` (127.0.0.1 by default) on
the given ports (by default the standard port 9090/9091/9100 if free, else any free port), and
waits until each answers its health URL. Prometheus scrapes node-exporter and the Pushgateway
(``honor_labels: true``) every second. ``down()`` stops exactly the processes ``up()`` recorded
(checked by pid *and* process start time, so a recycled pid is never killed); ``status()`` says
which are running and healthy. A start that fails says why (binary missing, port in use, bad
config: read from the process log) and stops whatever it had already started, also on Ctrl-C.

Everything lives in the stack directory (``$PERFKIT_HOME/stack`` by default)::

    state.json          pids, start times, ports, argv of the running components
    endpoints.json      the URLs of this stack; ``config.load_endpoints()`` picks it up
    prometheus.yml      the scrape configuration
    web-config.yml      basic-auth users (only with ``basic_auth``), scrape-password next to it
    prometheus/         the TSDB          pushgateway.db    the Pushgateway's persistence file
    logs/<component>.log

Owners. ``up()`` records the calling process among the stack's owners in ``state.json``
(``perfkit.owners``; for ``perfkit stack up`` that process ends at once, so the stack counts as
unowned). ``up(owner=...)`` is a campaign run's: the components it had to start are started *for
runs*, ``release(dir, owner)`` removes the owner again and, once no live owner is left, stops those
components (never a stack started by hand), and the directory is listed under
``$PERFKIT_STATE_DIR/stacks/`` (``registered_dirs``) so that ``perfkit clean`` finds stacks that
runs started in directories of their own. ``clean(dir)`` -- ``perfkit clean`` -- stops a stack only
when none of its owners is alive (or, with ``run_id``, when that run owns it and no other live
process does).

Binaries are found on ``PATH`` (also under their upstream names ``pushgateway``, ``node_exporter``)
or taken from ``$PERFKIT_PROMETHEUS_BIN``, ``$PERFKIT_PUSHGATEWAY_BIN``, ``$PERFKIT_NODE_EXPORTER_BIN``.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import requests
import yaml

from perfkit import owners as _owners
from perfkit import stop
from perfkit.errors import ConfigError, MetricsError
from perfkit.metrics.config import Endpoints, default_stack_dir, write_endpoints_file, STACK_ENDPOINTS_FILE

#: Start order (stop order is the reverse): Prometheus last, so its first scrapes find the others.
COMPONENTS: tuple[str, ...] = ("node-exporter", "pushgateway", "prometheus")
DEFAULT_PORTS: dict[str, int] = {"prometheus": 9090, "pushgateway": 9091, "node-exporter": 9100}
BINARIES: dict[str, tuple[str, ...]] = {
    "prometheus": ("prometheus",),
    "pushgateway": ("prometheus-pushgateway", "pushgateway"),
    "node-exporter": ("prometheus-node-exporter", "node_exporter"),
}
BINARY_ENV: dict[str, str] = {"prometheus": "PERFKIT_PROMETHEUS_BIN", "pushgateway": "PERFKIT_PUSHGATEWAY_BIN",
                              "node-exporter": "PERFKIT_NODE_EXPORTER_BIN"}
DEBIAN_PACKAGES: dict[str, str] = {"prometheus": "prometheus", "pushgateway": "prometheus-pushgateway",
                                   "node-exporter": "prometheus-node-exporter"}
HEALTH_PATHS: dict[str, str] = {"prometheus": "/-/ready", "pushgateway": "/-/ready", "node-exporter": "/metrics"}
#: node-exporter collectors the stack enables (few, to keep the DUT quiet at a 1 s scrape).
NODE_COLLECTORS: tuple[str, ...] = ("cpu", "stat", "loadavg", "meminfo", "netdev", "softnet",
                                    "interrupts", "pressure", "schedstat")
SCRAPE_INTERVAL = 1.0
_LOG_MARKER = "--- perfkit stack up"


@dataclass
class ComponentStatus:
    """One server of the stack."""

    name: str
    pid: int | None
    port: int
    url: str
    running: bool = False
    """The recorded pid is alive and is still the process ``up`` started."""
    healthy: bool = False
    """Its health URL answered 200."""
    detail: str = ""
    """Why it is not running/healthy, or what it is."""
    log: str = ""


@dataclass
class StackStatus:
    """The stack in one directory."""

    dir: str
    components: list[ComponentStatus] = field(default_factory=list)
    started: list[str] = field(default_factory=list)
    """Components this call started (``up``) or stopped (``down``)."""

    @property
    def running(self) -> bool:
        return bool(self.components) and all(c.running for c in self.components)

    @property
    def healthy(self) -> bool:
        return bool(self.components) and all(c.running and c.healthy for c in self.components)

    def component(self, name: str) -> ComponentStatus:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    def endpoints(self, username: str | None = None, password: str | None = None) -> Endpoints:
        """``Endpoints`` pointing at this stack."""
        return Endpoints(prometheus_url=self.component("prometheus").url,
                         pushgateway_url=self.component("pushgateway").url,
                         username=username, password=password, scrape_interval=SCRAPE_INTERVAL,
                         source=f"stack in {self.dir}")

    def to_dict(self) -> dict[str, Any]:
        return {"dir": self.dir, "running": self.running, "healthy": self.healthy, "started": self.started,
                "components": [asdict(c) for c in self.components]}


# -- ports and processes -------------------------------------------------------------------------
def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at ``host`` right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
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


def _proc_start(pid: int) -> int | None:
    """Start time [ticks after boot] of a live, non-zombie process; None if there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = text[text.rfind(")") + 2:].split()
    if rest[0] in ("Z", "X"):
        _reap(pid)
        return None
    return int(rest[19])


def _reap(pid: int) -> None:
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


def _ours(rec: Mapping[str, Any]) -> bool:
    """The recorded process is alive and is the very one we started (pid not recycled)."""
    pid, start = rec.get("pid"), rec.get("start_ticks")
    return bool(pid) and start is not None and _proc_start(int(pid)) == start


def _stop_pid(pid: int, timeout: float) -> str:
    """SIGTERM, wait, then SIGKILL one process; returns how it ended."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "already gone"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if _proc_start(pid) is None:
            return "stopped (SIGTERM)"
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        _reap(pid)
        if _proc_start(pid) is None:
            break
        time.sleep(0.05)
    return f"killed (SIGKILL after {timeout:g} s)"


# -- files ---------------------------------------------------------------------------------------
def _bcrypt_hash(password: str) -> str:
    try:
        import bcrypt
    except ImportError:
        raise MetricsError("basic auth for the local stack needs the Python package bcrypt "
                           "(pip install bcrypt) to write the web config's password hash") from None
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()


def write_prometheus_config(path: Path, node_targets: Sequence[str], pushgateway_target: str,
                            password_file: Path | None = None, username: str | None = None,
                            retention_note: str = "") -> Path:
    """prometheus.yml: 1 s scrapes of node-exporter (job ``node``) and the Pushgateway (honor_labels)."""
    interval = f"{SCRAPE_INTERVAL:g}s"
    auth = {"basic_auth": {"username": username, "password_file": str(password_file)}} if username else {}
    cfg = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": "node", "static_configs": [{"targets": list(node_targets)}], **auth},
            {"job_name": "pushgateway", "honor_labels": True,
             "static_configs": [{"targets": [pushgateway_target]}], **auth},
        ],
    }
    path.write_text("# written by perfkit stack up" + retention_note + "\n" + yaml.safe_dump(cfg, sort_keys=False))
    return path


def _state_path(d: Path) -> Path:
    return d / "state.json"


def _read_state(d: Path) -> dict[str, Any]:
    p = _state_path(d)
    if not p.exists():
        return {}
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise MetricsError(f"stack state {p} is corrupt ({err}); remove it after checking "
                           "`pgrep -a prometheus` for servers to stop by hand") from None


def _write_state(d: Path, state: Mapping[str, Any]) -> None:
    tmp = _state_path(d).with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(state, indent=2))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, _state_path(d))


def _registry_file(d: Path) -> Path:
    return _owners.STATE_DIR / "stacks" / (hashlib.sha1(str(d).encode()).hexdigest()[:16] + ".json")


def _register(d: Path) -> None:
    f = _registry_file(d)
    if not f.exists():
        with contextlib.suppress(OSError):
            _owners.write_json(f, {"dir": str(d)})


def _forget(d: Path) -> None:
    """The stack in ``d`` has no state any more: remove its state files and its registry entry."""
    _state_path(d).unlink(missing_ok=True)
    (d / STACK_ENDPOINTS_FILE).unlink(missing_ok=True)
    _registry_file(d).unlink(missing_ok=True)


def registered_dirs() -> list[Path]:
    """Stack directories with a state (``up`` registers them; a directory removed since is skipped)."""
    out = []
    reg = _owners.STATE_DIR / "stacks"
    for f in sorted(reg.glob("*.json")) if reg.is_dir() else []:
        rec = _owners.read_json(f)
        d = Path(rec["dir"]) if rec and isinstance(rec.get("dir"), str) else None
        if d is not None and _state_path(d).exists():
            out.append(d)
        else:
            f.unlink(missing_ok=True)
    return out


def server_pids() -> set[int]:
    """The pids of the running servers of every registered stack (``perfkit.housekeeping`` keeps
    them off the DUT cores: perfkit started them, whichever process that was)."""
    pids = set()
    for d in registered_dirs():
        try:
            state = _read_state(d)
        except MetricsError:
            continue
        pids |= {int(rec["pid"]) for rec in state.get("components", {}).values() if _ours(rec)}
    return pids


def _adopt(d: Path, state: dict[str, Any], owner: Mapping[str, Any] | None, started: Sequence[str]) -> None:
    """Record the owner in the state: ``owner`` (a run; the components started for it are stopped by
    ``release``, and the directory is registered for ``perfkit clean``), else this process."""
    me = dict(owner) if owner is not None else _owners.me()
    live = [o for o in state.get("owners", []) if _owners.alive(o) and not _owners.same(o, me)]
    state["owners"] = live + [me]
    if owner is not None:
        state["auto_started"] = sorted(set(state.get("auto_started", [])) | set(started))
        _register(d)
    _write_state(d, state)


@contextlib.contextmanager
def _locked(d: Path, wait: float = 0.0) -> Iterator[None]:
    """The stack directory's lock; ``wait``: seconds to wait for it before giving up."""
    d.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait
    with open(d / ".lock", "w") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise MetricsError(f"another perfkit stack command is working on {d}; try again") from None
                time.sleep(0.1)
        yield


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def _log_section(path: Path) -> str:
    """What the server logged since the last ``perfkit stack up`` marker (at most 64 KiB)."""
    try:
        text = path.read_text(errors="replace")[-65536:]
    except FileNotFoundError:
        return ""
    i = text.rfind(_LOG_MARKER)
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


# -- the commands --------------------------------------------------------------------------------
def _health(url: str, auth: tuple[str, str] | None, timeout: float = 2.0) -> tuple[bool, str]:
    try:
        r = requests.get(url, auth=auth, timeout=timeout)
    except requests.RequestException as err:
        return False, f"{url}: {type(err).__name__}"
    if r.status_code == 200:
        return True, f"{url}: 200"
    return False, f"{url}: HTTP {r.status_code} {r.text.strip()[:100]}"


def _stack_auth(d: Path, state: Mapping[str, Any]) -> tuple[str, str] | None:
    user = state.get("username")
    pw_file = d / "scrape-password"
    if user and pw_file.exists():
        return user, pw_file.read_text()
    return None


def _resolve_ports(host: str, ports: Mapping[str, int | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in COMPONENTS:
        port = ports.get(name)
        if port is None or port == 0:
            std = DEFAULT_PORTS[name]
            port = std if std not in out.values() and not port_in_use(host, std) else free_port(host)
            while port in out.values():
                port = free_port(host)
        elif not (isinstance(port, int) and 0 < port < 65536):
            raise ConfigError(f"{name} port", port, "1..65535, or 0 for any free port")
        out[name] = int(port)
    if len(set(out.values())) != len(out):
        raise ConfigError("ports", out, "three different ports")
    return out


def up(stack_dir: str | Path | None = None, host: str = "127.0.0.1", *,
       prometheus_port: int | None = None, pushgateway_port: int | None = None,
       node_exporter_port: int | None = None, basic_auth: tuple[str, str] | None = None,
       retention: str = "15d", binaries: Mapping[str, str] | None = None,
       node_collectors: Sequence[str] = NODE_COLLECTORS, timeout: float = 60.0,
       owner: Mapping[str, Any] | None = None) -> StackStatus:
    """Start the stack; idempotent: running components are left alone, stopped ones restarted.

    A directory that already has a stack keeps its ports and settings: only the components that
    are not running are started again, with their recorded command lines.

    Ports: None or 0 means the standard port if free, else any free port; an explicit port is used
    as given (if taken, the start fails with "port ... is in use"). ``basic_auth=(user, password)``
    protects all three servers (web-config.yml with a bcrypt hash) and makes Prometheus scrape with
    it. Raises ``MetricsError`` saying which server failed and why; nothing is left running then.
    ``owner``: record this owner (``perfkit.owners.me()``) in the state (see module doc).
    """
    d = Path(stack_dir or default_stack_dir()).absolute()
    if not host or any(c in host for c in "/ :"):
        raise ConfigError("host", host, "an IPv4 address or host name to bind to, e.g. 127.0.0.1")
    with _locked(d):
        state = _read_state(d)
        if state.get("components"):
            given = {"prometheus": prometheus_port, "pushgateway": pushgateway_port,
                     "node-exporter": node_exporter_port}
            healed = _heal(d, state, given, timeout)
            _adopt(d, state, owner, healed.started)
            return healed
        ports = _resolve_ports(host, {"prometheus": prometheus_port, "pushgateway": pushgateway_port,
                                      "node-exporter": node_exporter_port})
        paths = {name: find_binary(name, binaries) for name in COMPONENTS}
        (d / "logs").mkdir(parents=True, exist_ok=True)
        (d / "prometheus").mkdir(exist_ok=True)
        target_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        web_args: list[str] = []
        pw_file: Path | None = None
        username = None
        if basic_auth:
            username, password = basic_auth
            if not username or ":" in username or not password:
                raise ConfigError("basic_auth", username, "a user name without ':' and a non-empty password")
            web_cfg = d / "web-config.yml"
            web_cfg.write_text(yaml.safe_dump({"basic_auth_users": {username: _bcrypt_hash(password)}}))
            pw_file = d / "scrape-password"
            pw_file.touch(mode=0o600)
            pw_file.write_text(password)
            os.chmod(pw_file, 0o600)
            web_args = [f"--web.config.file={web_cfg}"]
        else:
            for stale in ("web-config.yml", "scrape-password"):
                (d / stale).unlink(missing_ok=True)
        prom_cfg = write_prometheus_config(d / "prometheus.yml", [f"{target_host}:{ports['node-exporter']}"],
                                           f"{target_host}:{ports['pushgateway']}", pw_file, username)
        argv = {
            "node-exporter": [paths["node-exporter"], f"--web.listen-address={host}:{ports['node-exporter']}",
                              "--collector.disable-defaults",
                              *(f"--collector.{c}" for c in node_collectors), *web_args],
            "pushgateway": [paths["pushgateway"], f"--web.listen-address={host}:{ports['pushgateway']}",
                            f"--persistence.file={d / 'pushgateway.db'}", "--persistence.interval=30s",
                            *web_args],
            "prometheus": [paths["prometheus"], f"--config.file={prom_cfg}",
                           f"--storage.tsdb.path={d / 'prometheus'}",
                           f"--storage.tsdb.retention.time={retention}",
                           f"--web.listen-address={host}:{ports['prometheus']}", *web_args],
        }
        auth = basic_auth if basic_auth else None
        state = {"host": host, "username": username, "started_at": time.time(), "components": {}}
        started: list[str] = []
        try:
            for name in COMPONENTS:
                rec = _start(name, argv[name], d, host, ports[name])
                state["components"][name] = rec
                _write_state(d, state)
                started.append(name)
                _wait_healthy(name, rec, host, ports[name], auth, timeout)
            _wait_scraped(state["components"]["prometheus"], auth, timeout)
            write_endpoints_file(d / STACK_ENDPOINTS_FILE, Endpoints(
                prometheus_url=f"http://{target_host}:{ports['prometheus']}",
                pushgateway_url=f"http://{target_host}:{ports['pushgateway']}",
                scrape_interval=SCRAPE_INTERVAL, source=str(d)))
        except BaseException:
            for name in reversed(started):
                rec = state["components"][name]
                if _ours(rec):
                    _stop_pid(rec["pid"], 10)
            _forget(d)
            raise
        _adopt(d, state, owner, started)
        result = _status(d, state)
        result.started = started
        return result


#: Servers this Python process spawned: pid -> exit status once reaped (None while it runs).
_SPAWNED: dict[int, int | None] = {}


def _heal(d: Path, state: dict[str, Any], given: Mapping[str, int | None], timeout: float) -> StackStatus:
    """Restart the recorded components that are not running, with their recorded argv and ports."""
    recs = state["components"]
    for name, port in given.items():
        if port and name in recs and port != recs[name]["port"]:
            raise ConfigError(f"{name} port", port, f"{recs[name]['port']}, the port of the stack in {d} "
                              "(run `perfkit stack down` first to change it)")
    missing = [n for n in COMPONENTS if n not in recs]
    if missing:
        raise MetricsError(f"the stack state in {d} lacks {', '.join(missing)}; run `perfkit stack down` first")
    auth = _stack_auth(d, state)
    started: list[str] = []
    try:
        for name in COMPONENTS:
            rec = recs[name]
            if _ours(rec):
                continue
            if not Path(rec["argv"][0]).exists():
                find_binary(name)   # raises with the package name
            new = _start(name, rec["argv"], d, state["host"], rec["port"])
            recs[name] = {**rec, **new}
            _write_state(d, state)
            started.append(name)
            _wait_healthy(name, recs[name], state["host"], rec["port"], auth, timeout)
        if started:
            _wait_scraped(recs["prometheus"], auth, timeout)
    except BaseException:
        for name in reversed(started):
            if _ours(recs[name]):
                _stop_pid(recs[name]["pid"], 10)
            recs[name].update(pid=None, start_ticks=None)
        _write_state(d, state)
        raise
    result = _status(d, state)
    result.started = started
    return result


def _start(name: str, argv: list[str], d: Path, host: str, port: int) -> dict[str, Any]:
    log_path = d / "logs" / f"{name}.log"
    with open(log_path, "ab") as log:
        log.write(f"{_LOG_MARKER} {time.strftime('%Y-%m-%dT%H:%M:%S')}: {' '.join(argv)}\n".encode())
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
        start = _proc_start(pid)
        if start is not None or _SPAWNED.get(pid) is not None:
            break
        time.sleep(0.01)
    return {"pid": pid, "start_ticks": start, "port": port, "argv": argv, "log": str(log_path),
            "url": f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"}


def _wait_healthy(name: str, rec: Mapping[str, Any], host: str, port: int,
                  auth: tuple[str, str] | None, timeout: float) -> None:
    url = rec["url"] + HEALTH_PATHS[name]
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        pid = rec["pid"]
        _reap(pid)
        exited = _SPAWNED[pid] is not None if pid in _SPAWNED else not _ours(rec)
        if exited:
            time.sleep(0.1)   # let the log be flushed
            log = _log_section(Path(rec["log"]))
            code = f" with status {_SPAWNED[pid]}" if _SPAWNED.get(pid) is not None else ""
            raise MetricsError(f"{name} exited during start{code}: {explain_log(log, host, port)} "
                               f"(log: {rec['log']})")
        ok, last = _health(url, auth)
        if ok:
            return
        stop.check()   # a stop pending (perfkit.stop) ends the wait; the caller stops what started
        time.sleep(0.2)
    raise MetricsError(f"{name} did not become ready within {timeout:g} s ({last}); log: {rec['log']}\n"
                       + _log_tail(Path(rec["log"]), 5))


def _wait_scraped(rec: Mapping[str, Any], auth: tuple[str, str] | None, timeout: float) -> None:
    """Wait until Prometheus has scraped node-exporter and the Pushgateway successfully once."""
    url = rec["url"] + "/api/v1/targets"
    deadline = time.monotonic() + timeout
    health: dict[str, str] = {}
    while time.monotonic() < deadline:
        try:
            targets = requests.get(url, auth=auth, timeout=5).json()["data"]["activeTargets"]
            health = {t["labels"].get("job", "?"): t["health"] + (f" ({t['lastError']})" if t.get("lastError") else "")
                      for t in targets}
        except (requests.RequestException, ValueError, KeyError) as err:
            health = {"prometheus": f"{url}: {type(err).__name__}"}
        if health.get("node") == "up" and health.get("pushgateway") == "up":
            return
        stop.check()
        time.sleep(0.25)
    raise MetricsError(f"Prometheus did not scrape its targets within {timeout:g} s: {health} "
                       f"(log: {rec['log']})")


def _status(d: Path, state: Mapping[str, Any]) -> StackStatus:
    auth = _stack_auth(d, state)
    out = StackStatus(dir=str(d))
    for name in COMPONENTS:
        rec = state.get("components", {}).get(name)
        if rec is None:
            continue
        c = ComponentStatus(name=name, pid=rec.get("pid"), port=rec["port"], url=rec["url"], log=rec.get("log", ""))
        c.running = _ours(rec)
        if not c.running:
            c.detail = "stopped" if c.pid is None else f"pid {c.pid} is not running (see {c.log})"
        else:
            c.healthy, c.detail = _health(rec["url"] + HEALTH_PATHS[name], auth)
        out.components.append(c)
    return out


def status(stack_dir: str | Path | None = None) -> StackStatus:
    """Which components of the stack in ``stack_dir`` run and answer their health URL."""
    d = Path(stack_dir or default_stack_dir()).absolute()
    return _status(d, _read_state(d))


def down(stack_dir: str | Path | None = None, timeout: float = 10.0,
         components: Sequence[str] | None = None) -> StackStatus:
    """Stop the processes ``up`` recorded in ``stack_dir`` (only those: pid and start time must match).

    ``components`` stops only those (``up`` restarts them later with the same ports); by default all,
    and the state is removed. The data (TSDB, Pushgateway file, logs) stays. Returns the status before
    stopping, with ``started`` listing the components actually stopped.
    """
    d = Path(stack_dir or default_stack_dir()).absolute()
    names = list(COMPONENTS if components is None else components)
    for name in names:
        if name not in COMPONENTS:
            raise ConfigError("component", name, COMPONENTS)
    with _locked(d):
        state = _read_state(d)
        before = _status(d, state)
        for name in reversed(COMPONENTS):
            rec = state.get("components", {}).get(name)
            if rec is None or name not in names:
                continue
            comp = before.component(name)
            if _ours(rec):
                comp.detail = _stop_pid(int(rec["pid"]), timeout)
                before.started.append(name)
            elif rec.get("pid"):
                comp.detail = f"pid {rec.get('pid')} is no longer the process perfkit started; left alone"
            rec.update(pid=None, start_ticks=None)
        if components is None or not any(_ours(r) for r in state.get("components", {}).values()):
            _forget(d)
        else:
            _write_state(d, state)
        return before


def release(stack_dir: str | Path | None, owner: Mapping[str, Any]) -> StackStatus:
    """``owner`` no longer uses the stack; with no live owner left, stop the components started for
    runs. Returns the status, ``started`` listing the components stopped."""
    d = Path(stack_dir or default_stack_dir()).absolute()
    with _locked(d, wait=60.0):
        state = _read_state(d)
        if not state.get("components"):
            return StackStatus(dir=str(d))
        live = [o for o in state.get("owners", []) if _owners.alive(o) and not _owners.same(o, owner)]
        state["owners"] = live
        if live:
            _write_state(d, state)
            return _status(d, state)
        return _stop_locked(d, state, state.get("auto_started", []))


def clean(stack_dir: str | Path | None = None, run_id: str | None = None) -> tuple[list[str], str | None]:
    """``perfkit clean``: stop the stack in ``stack_dir`` if no live process owns it (with ``run_id``:
    if that run owns it and no other live process does). Returns (components stopped, why the stack
    was left alone or None)."""
    d = Path(stack_dir or default_stack_dir()).absolute()
    if not _state_path(d).exists():
        return [], None
    try:
        lock = _locked(d)
        lock.__enter__()
    except MetricsError:
        return [], "another perfkit command is starting or stopping it right now"
    try:
        state = _read_state(d)
        if not state.get("components"):
            return [], None
        recorded = state.get("owners", [])
        live = [o for o in recorded if _owners.alive(o)]
        if run_id is not None:
            if not any(o.get("run_id") == run_id for o in recorded):
                return [], None
            others = [o for o in live if o.get("run_id") != run_id]
            if others:
                return [], f"also used by {', '.join(_owners.describe(o) for o in others)}"
        elif live:
            return [], f"in use by {', '.join(_owners.describe(o) for o in live)}"
        return _stop_locked(d, state, COMPONENTS).started, None
    finally:
        lock.__exit__(None, None, None)


def _stop_locked(d: Path, state: dict[str, Any], names: Sequence[str], timeout: float = 10.0) -> StackStatus:
    before = _status(d, state)
    for name in reversed(COMPONENTS):
        rec = state.get("components", {}).get(name)
        if rec is None or name not in names:
            continue
        if _ours(rec):
            before.component(name).detail = _stop_pid(int(rec["pid"]), timeout)
            before.started.append(name)
        rec.update(pid=None, start_ticks=None)
    state["auto_started"] = [n for n in state.get("auto_started", []) if n not in names]
    if not any(_ours(r) for r in state.get("components", {}).values()):
        _forget(d)
    else:
        _write_state(d, state)
    return before
