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

The pieces: the server processes (``perfkit.metrics.servers``), the configuration files
(``perfkit.metrics.promconfig``) and the recorded state and registry (``perfkit.metrics.stackstate``).
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from perfkit import owners as _owners
from perfkit import stop
from perfkit.errors import ConfigError, MetricsError
from perfkit.metrics.config import Endpoints, STACK_ENDPOINTS_FILE, default_stack_dir, write_endpoints_file
from perfkit.metrics.promconfig import (SCRAPE_INTERVAL, add_dataplane_job, remove_web_config, scrape_auth,
                                       targets_dir, write_prometheus_config, write_web_config)
from perfkit.metrics.servers import (HEALTH_PATHS, check_health, find_binary, free_port, is_ours, port_in_use, spawn,
                                     stop_pid, wait_healthy)
from perfkit.metrics.stackstate import adopt, forget, locked, read_state, state_path, write_state

#: Start order (stop order is the reverse): Prometheus last, so its first scrapes find the others.
COMPONENTS: tuple[str, ...] = ("node-exporter", "pushgateway", "prometheus")
#: The standard ports, taken when free.
DEFAULT_PORTS: dict[str, int] = {"prometheus": 9090, "pushgateway": 9091, "node-exporter": 9100}
#: node-exporter collectors the stack enables (few, to keep the DUT quiet at a 1 s scrape).
NODE_COLLECTORS: tuple[str, ...] = ("cpu", "stat", "loadavg", "meminfo", "netdev", "softnet",
                                    "interrupts", "pressure", "schedstat")


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
    with locked(d):
        state = read_state(d)
        if state.get("components"):
            given = {"prometheus": prometheus_port, "pushgateway": pushgateway_port,
                     "node-exporter": node_exporter_port}
            healed = _heal(d, state, given, timeout)
            _upgrade_config(d, state)
            adopt(d, state, owner, healed.started)
            return healed
        ports = _resolve_ports(host, {"prometheus": prometheus_port, "pushgateway": pushgateway_port,
                                      "node-exporter": node_exporter_port})
        paths = {name: find_binary(name, binaries) for name in COMPONENTS}
        (d / "logs").mkdir(parents=True, exist_ok=True)
        (d / "prometheus").mkdir(exist_ok=True)
        targets_dir(d).mkdir(exist_ok=True)
        target_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        web_args: list[str] = []
        pw_file: Path | None = None
        username = None
        if basic_auth:
            username, password = basic_auth
            if not username or ":" in username or not password:
                raise ConfigError("basic_auth", username, "a user name without ':' and a non-empty password")
            web_cfg, pw_file = write_web_config(d, username, password)
            web_args = [f"--web.config.file={web_cfg}"]
        else:
            remove_web_config(d)
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
                rec = spawn(name, argv[name], d, host, ports[name])
                state["components"][name] = rec
                write_state(d, state)
                started.append(name)
                wait_healthy(name, rec, host, ports[name], auth, timeout)
            _wait_scraped(state["components"]["prometheus"], auth, timeout)
            write_endpoints_file(d / STACK_ENDPOINTS_FILE, Endpoints(
                prometheus_url=f"http://{target_host}:{ports['prometheus']}",
                pushgateway_url=f"http://{target_host}:{ports['pushgateway']}",
                scrape_interval=SCRAPE_INTERVAL, source=str(d)))
        except BaseException:
            for name in reversed(started):
                rec = state["components"][name]
                if is_ours(rec):
                    stop_pid(rec["pid"], 10)
            forget(d)
            raise
        adopt(d, state, owner, started)
        result = _status(d, state)
        result.started = started
        return result


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
    auth = scrape_auth(d, state)
    started: list[str] = []
    try:
        for name in COMPONENTS:
            rec = recs[name]
            if is_ours(rec):
                continue
            if not Path(rec["argv"][0]).exists():
                find_binary(name)   # raises with the package name
            new = spawn(name, rec["argv"], d, state["host"], rec["port"])
            recs[name] = {**rec, **new}
            write_state(d, state)
            started.append(name)
            wait_healthy(name, recs[name], state["host"], rec["port"], auth, timeout)
        if started:
            _wait_scraped(recs["prometheus"], auth, timeout)
    except BaseException:
        for name in reversed(started):
            if is_ours(recs[name]):
                stop_pid(recs[name]["pid"], 10)
            recs[name].update(pid=None, start_ticks=None)
        write_state(d, state)
        raise
    result = _status(d, state)
    result.started = started
    return result


def _upgrade_config(d: Path, state: Mapping[str, Any]) -> None:
    """A stack started by an older perfkit: add the ``dataplane`` job to its prometheus.yml and have
    its Prometheus reload it (SIGHUP)."""
    targets_dir(d).mkdir(exist_ok=True)
    rec = state.get("components", {}).get("prometheus", {})
    if add_dataplane_job(d / "prometheus.yml") and is_ours(rec):
        os.kill(int(rec["pid"]), signal.SIGHUP)


def _wait_scraped(rec: Mapping[str, Any], auth: tuple[str, str] | None, timeout: float) -> None:
    """Wait until Prometheus has scraped node-exporter and the Pushgateway successfully once."""
    import requests   # here: only ``stack up`` waits for Prometheus (``perfkit clean`` imports this module)

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
    auth = scrape_auth(d, state)
    out = StackStatus(dir=str(d))
    for name in COMPONENTS:
        rec = state.get("components", {}).get(name)
        if rec is None:
            continue
        c = ComponentStatus(name=name, pid=rec.get("pid"), port=rec["port"], url=rec["url"], log=rec.get("log", ""))
        c.running = is_ours(rec)
        if not c.running:
            c.detail = "stopped" if c.pid is None else f"pid {c.pid} is not running (see {c.log})"
        else:
            c.healthy, c.detail = check_health(rec["url"] + HEALTH_PATHS[name], auth)
        out.components.append(c)
    return out


def status(stack_dir: str | Path | None = None) -> StackStatus:
    """Which components of the stack in ``stack_dir`` run and answer their health URL."""
    d = Path(stack_dir or default_stack_dir()).absolute()
    return _status(d, read_state(d))


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
    with locked(d):
        state = read_state(d)
        before = _status(d, state)
        for name in reversed(COMPONENTS):
            rec = state.get("components", {}).get(name)
            if rec is None or name not in names:
                continue
            comp = before.component(name)
            if is_ours(rec):
                comp.detail = stop_pid(int(rec["pid"]), timeout)
                before.started.append(name)
            elif rec.get("pid"):
                comp.detail = f"pid {rec.get('pid')} is no longer the process perfkit started; left alone"
            rec.update(pid=None, start_ticks=None)
        if components is None or not any(is_ours(r) for r in state.get("components", {}).values()):
            forget(d)
        else:
            write_state(d, state)
        return before


def release(stack_dir: str | Path | None, owner: Mapping[str, Any]) -> StackStatus:
    """``owner`` no longer uses the stack; with no live owner left, stop the components started for
    runs. Returns the status, ``started`` listing the components stopped."""
    d = Path(stack_dir or default_stack_dir()).absolute()
    with locked(d, wait=60.0):
        state = read_state(d)
        if not state.get("components"):
            return StackStatus(dir=str(d))
        live = [o for o in state.get("owners", []) if _owners.alive(o) and not _owners.same(o, owner)]
        state["owners"] = live
        if live:
            write_state(d, state)
            return _status(d, state)
        return _stop_locked(d, state, state.get("auto_started", []))


def clean(stack_dir: str | Path | None = None, run_id: str | None = None) -> tuple[list[str], str | None]:
    """``perfkit clean``: stop the stack in ``stack_dir`` if no live process owns it (with ``run_id``:
    if that run owns it and no other live process does). Returns (components stopped, why the stack
    was left alone or None)."""
    d = Path(stack_dir or default_stack_dir()).absolute()
    if not state_path(d).exists():
        return [], None
    try:
        lock = locked(d)
        lock.__enter__()
    except MetricsError:
        return [], "another perfkit command is starting or stopping it right now"
    try:
        state = read_state(d)
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
        if is_ours(rec):
            before.component(name).detail = stop_pid(int(rec["pid"]), timeout)
            before.started.append(name)
        rec.update(pid=None, start_ticks=None)
    state["auto_started"] = [n for n in state.get("auto_started", []) if n not in names]
    if not any(is_ours(r) for r in state.get("components", {}).values()):
        forget(d)
    else:
        write_state(d, state)
    return before
