"""``perfkit agent``: perfkit's side of a lab host, reached over SSH.

The controller starts it in an SSH session (``<perfkit_root>/venv/bin/python -m perfkit.lab.agent
--config <perfkit_root>/etc/lab.json``) and speaks JSON lines with it on the session's stdin and
stdout, so the agent opens no port on the host. One request per line, one answer per request::

    -> {"id": 1, "op": "load", "args": {"dataplane": "pgwu", "frame_size": 64, "flows": 4,
                                        "params": {}, "interfaces": ["a0", "b0"], "cores": [1]}}
    <- {"id": 1, "ok": true, "result": {"mode": "native", "programs": [...], "packet_threads": [...]}}
    <- {"id": 2, "ok": false, "error": "interface of host dut1: 'eth9' is not ..."}

Operations (``OPS``): ``hello`` (the host's name, perfkit's source id and the host's facts),
``load`` (the dataplane on two of the host's interfaces, native XDP preferred: a fall-back to
generic XDP is in the answer's ``mode``), ``counters`` (the dataplane's counters and its programs'
run counts and times), ``unload`` and ``bye``. Nothing else runs: an unknown ``op`` is refused.

The agent refuses an interface the inventory does not name for its host (``--config``, written by
``perfkit lab provision``). What it attaches it takes down on ``unload``, on ``bye``, at the end of
its stdin (the SSH session closed or cut, the controller killed) and on SIGHUP, SIGTERM or SIGINT.
Its owner record (``$PERFKIT_STATE_DIR/agents/<pid>.json``, written before it attaches anything)
names the programs it attached, so that ``perfkit clean`` on the host (or ``python -m
perfkit.lab.agent --clean``, on a host where provisioning installed only the agent's dependencies)
detaches them if the agent itself was killed.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Callable, TextIO

from perfkit import owners
from perfkit.errors import BpfError, ConfigError, PerfkitError
from perfkit.libbpf import BpfStats, prog_info, xdp_attach, xdp_detach, xdp_prog_id

#: The operations the protocol defines.
OPS = ("hello", "load", "counters", "unload", "bye")


def record_dir() -> Path:
    return owners.STATE_DIR / "agents"


class Agent:
    """The state of one agent: the host's configuration and what it loaded."""

    def __init__(self, config: dict[str, Any]):
        self.host = str(config.get("host", socket.gethostname()))
        self.interfaces = [str(i) for i in config.get("interfaces", [])]
        self.source_id = str(config.get("source_id", ""))
        self.nf: Any = None
        self.attached: dict[str, tuple[int, str, int]] = {}   # interface -> (ifindex, mode, prog id)
        self.record = record_dir() / f"{os.getpid()}.json"

    # -- operations --------------------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        from perfkit.lab.hostsetup import facts
        return {"host": self.host, "perfkit": self.source_id, "pid": os.getpid(), "interfaces": self.interfaces,
                "facts": facts(self.interfaces), "ops": list(OPS)}

    def check_interface(self, name: Any) -> str:
        if name not in self.interfaces:
            raise ConfigError(f"interface of host {self.host}", name,
                              f"an interface the inventory names for it: {', '.join(self.interfaces) or 'none'}")
        return str(name)

    def load(self, dataplane: str, frame_size: int, flows: int, interfaces: list[str], params: dict | None = None,
             cores: list[int] | None = None) -> dict[str, Any]:
        from perfkit.scenario import Scenario
        if self.nf is not None:
            raise PerfkitError(f"host {self.host}: a dataplane is loaded already (unload it first)")
        if not isinstance(interfaces, list) or len(interfaces) != 2:
            raise ConfigError("interfaces", interfaces, "the DUT's two interfaces, [a, b]")
        a, b = (self.check_interface(i) for i in interfaces)
        scenario = Scenario(dataplane=dataplane, frame_size=frame_size, flows=flows, params=params or {})
        ifindex = {i: socket.if_nametoindex(i) for i in (a, b)}
        owners.write_json(self.record, {"owner": owners.me(), "netns": _netns(), "attached": {}})
        self.nf = scenario.dp.load(scenario.traffic(), ifindex[a], ifindex[b])
        modes = []
        for name in (a, b):
            mode = _attach(ifindex[name], self.nf.program.fd)
            self.attached[name] = (ifindex[name], mode, prog_info(self.nf.program.fd).id)
            owners.write_json(self.record, {"owner": owners.me(), "netns": _netns(), "attached": {
                k: {"ifindex": v[0], "mode": v[1], "prog_id": v[2]} for k, v in self.attached.items()}})
            modes.append(mode)
        threads = _threaded_napi([a, b], cores or [])
        return {"mode": "native" if all(m == "native" for m in modes) else "generic", "modes": dict(zip((a, b), modes)),
                "program": self.nf.program.name, "packet_threads": threads}

    def counters(self) -> dict[str, Any]:
        if self.nf is None:
            raise PerfkitError(f"host {self.host}: no dataplane is loaded")
        info = prog_info(self.nf.program.fd)
        return {"counters": self.nf.counters(), "run_cnt": info.run_cnt, "run_time_ns": info.run_time_ns}

    def unload(self) -> dict[str, Any]:
        """Detach what this agent attached (only its own programs) and close the dataplane. Idempotent."""
        detached = []
        for name, (ifindex, mode, prog_id) in list(self.attached.items()):
            try:
                if xdp_prog_id(ifindex, mode) == prog_id:
                    xdp_detach(ifindex, mode)
                    detached.append(name)
            except BpfError:
                pass   # the interface is gone: so is its program
            del self.attached[name]
        if self.nf is not None:
            self.nf.close()
            self.nf = None
        self.record.unlink(missing_ok=True)
        return {"detached": detached}

    # -- the protocol ------------------------------------------------------------------------------
    def handle(self, line: str) -> tuple[dict[str, Any], bool]:
        """The answer to one request line, and whether the session ends."""
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as err:
            return {"id": None, "ok": False, "error": f"request: not a JSON object ({err})"}, False
        rid, op, args = req.get("id"), req.get("op"), req.get("args") or {}
        if op not in OPS:
            return {"id": rid, "ok": False, "error": f"op: {op!r} is not one of {', '.join(OPS)}"}, False
        if not isinstance(args, dict):
            return {"id": rid, "ok": False, "error": "args: not an object"}, False
        fn: Callable[..., Any] = {"hello": self.hello, "load": self.load, "counters": self.counters,
                                  "unload": self.unload, "bye": self.unload}[op]
        try:
            with BpfStats() if op == "counters" else _nothing():
                result = fn(**args)
        except TypeError as err:
            return {"id": rid, "ok": False, "error": f"args of {op}: {err}"}, False
        except (PerfkitError, OSError) as err:
            return {"id": rid, "ok": False, "error": " ".join(str(err).split())}, False
        return {"id": rid, "ok": True, "result": result}, op == "bye"


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _attach(ifindex: int, fd: int) -> str:
    """Attach natively, else generically; returns the mode."""
    try:
        xdp_attach(ifindex, fd, "native")
        return "native"
    except BpfError:
        xdp_attach(ifindex, fd, "generic")
        return "generic"


def _threaded_napi(ifaces: list[str], cores: list[int]) -> list[int]:
    """Threaded NAPI on ``ifaces``, their threads pinned to ``cores`` with SCHED_FIFO as on the
    local testbed; returns the threads' pids (none where the driver has no threaded NAPI)."""
    pids = []
    for iface in ifaces:
        path = Path(f"/sys/class/net/{iface}/threaded")
        try:
            path.write_text("1")
        except OSError:
            continue
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    continue
                if comm.startswith(f"napi/{iface}-"):
                    if cores:
                        os.sched_setaffinity(int(pid), set(cores))
                    os.sched_setscheduler(int(pid), os.SCHED_FIFO, os.sched_param(50))
                    pids.append(int(pid))
    return pids


def serve(agent: Agent, inp: TextIO, out: TextIO) -> None:
    """Answer requests until ``bye`` or the end of ``inp``; whatever ends it, unload."""
    try:
        for line in inp:
            if not line.strip():
                continue
            answer, done = agent.handle(line)
            out.write(json.dumps(answer, default=str) + "\n")
            out.flush()
            if done:
                break
    finally:
        agent.unload()


def _netns() -> int:
    """The inode of this process's network namespace: interface indexes mean something only in it."""
    return os.stat("/proc/self/ns/net").st_ino


def clean() -> list[str]:
    """Detach the XDP programs that agents killed before their clean-up left (``perfkit clean``),
    in this network namespace: only where the program attached is still the one the record names."""
    removed = []
    d = record_dir()
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        rec = owners.read_json(f) or {}
        if owners.alive(rec.get("owner")) or rec.get("netns", _netns()) != _netns():
            continue
        for name, a in (rec.get("attached") or {}).items():
            try:
                if xdp_prog_id(int(a["ifindex"]), a["mode"]) == a["prog_id"]:
                    xdp_detach(int(a["ifindex"]), a["mode"])
                    removed.append(f"XDP program {a['prog_id']} on {name}")
            except (BpfError, KeyError, ValueError, TypeError):
                pass
        f.unlink(missing_ok=True)
    return removed


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfkit.lab.agent", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, help="the host's lab.json (perfkit lab provision writes it)")
    p.add_argument("--clean", action="store_true", help="detach what killed agents left attached (as perfkit clean "
                   "does), print it as JSON, and exit")
    args = p.parse_args(argv)
    if args.clean:
        print(json.dumps(clean()))
        return 0
    if args.config is None:
        p.error("--config is required")
    try:
        config = json.loads(args.config.read_text())
    except (OSError, ValueError) as err:
        print(f"perfkit agent: error: config: {args.config}: {err}", file=sys.stderr)
        return 2
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    serve(Agent(config), sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
