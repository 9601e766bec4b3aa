"""``perfkit agent``: perfkit's side of a lab host, reached over SSH.

The controller starts it in an SSH session (``<perfkit_root>/venv/bin/python -m perfkit.lab.agent
--config <perfkit_root>/etc/lab.json``) and speaks JSON lines with it on the session's stdin and
stdout, so the agent opens no port on the host. One request per line, one answer per request::

    -> {"id": 1, "op": "load", "args": {"dataplane": NAME, "frame_size": 64, "flows": 4,
                                        "params": {}, "interfaces": ["a0", "b0"], "cores": [1]}}
    <- {"id": 1, "ok": true, "result": {"mode": "native", "modes": {...}, "program": "xdp_NAME",
                                        "packet_threads": [...], "objects": {PATH: SHA256}}}
    <- {"id": 2, "ok": false, "error": "interface of host dut1: 'eth9' is not ..."}

Operations (``OPS``; the roles' parts are ``perfkit.lab.hostroles``'s):

- ``hello``: the host's name, perfkit's source id, the host's facts and the dataplanes installed
  in its environment (with the package each comes from: a plugin must be installed there);
- ``describe``: a dataplane description and its files (``perfkit.lab.descriptions``), written on
  the host; the answer's ``dataplane`` is its path there, which ``load`` and ``tester`` then take
  (no other path loads as a description);
- DUT: ``load`` (the dataplane on a pair of the host's interfaces, or one instance per pair; native
  XDP preferred, a fall-back to generic XDP is in the answer's ``mode``; ``knobs``: system knobs set
  on those interfaces, read back, and restored on ``unload``), ``counters``, ``begin``
  and ``end`` of a trial (drops, the program's run time and the packet threads' CPU time per packet),
  ``perf_start`` and ``perf_stop`` (``perf record`` of the DUT cores; ``perf script``'s output back);
- tester: ``tester`` (perfkit's XDP generator and sink on a pair of interfaces, sending the slice
  ``part`` of ``parts`` of the flows: several testers share them disjointly) and ``send`` (one
  trial's frames, from a common start time, and what came back);
- ``unload`` and ``bye``.

Nothing else runs: an unknown ``op`` is refused.

While a dataplane is loaded, the DUT host's agent runs ``perfkit exporter`` (off the DUT cores) for
it: each instance's counters (label ``testbed``: ``<host>-<interface a>``) at
``http://<the host's management address>:<exporter_port>/metrics``, where the lab's Prometheus
scrapes them (job ``dataplane``; both from ``lab.json``, ``perfkit.lab.provision``). ``load``'s answer
says where (``exporter``); it stops on ``unload`` and with the agent, however it ends.

The agent refuses an interface the inventory does not name for its host (``--config``, written by
``perfkit lab provision``). What it attaches it takes down on ``unload``, on ``bye``, at the end of
its stdin (the SSH session closed or cut, the controller killed) and on SIGHUP, SIGTERM or SIGINT.
Its owner record (``$PERFKIT_STATE_DIR/agents/<pid>.json``, written before it attaches anything)
names the programs it attached, and its knob record (``knobs/agent<pid>.json``) the settings it
changed, so that ``perfkit clean`` on the host (or ``python -m perfkit.lab.agent --clean``, on a
host where provisioning installed only the agent's dependencies) restores the knobs and detaches
the programs if the agent itself was killed.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, TextIO

from perfkit import knobs as knobs_mod, owners
from perfkit.dataplane import PortMacs
from perfkit.errors import BpfError, ConfigError, PerfkitError
from perfkit.lab.hostroles import DutSide, TesterSide
from perfkit.lab.inventory import MAC_RE
from perfkit.libbpf import BpfStats, xdp_detach, xdp_prog_id
from perfkit.metrics import exporter
from perfkit.scenario import Scenario
from perfkit.stl.fieldengine import FlowSlice
from perfkit.testbed.exporterproc import DutExport

#: Why a lab's DUT host takes system knobs only (``perfkit.knobs.system_only``).
LAB_DUT = "a lab's DUT host is set up as provisioned: its NIC's RSS steers, XDP is native where the driver has it"
#: The operations the protocol defines.
OPS = ("hello", "describe", "load", "counters", "begin", "end", "perf_start", "perf_stop", "tester", "send", "unload", "bye")


def record_dir() -> Path:
    return owners.STATE_DIR / "agents"


class Agent:
    """The state of one agent: the host's configuration and what it set up."""

    def __init__(self, config: dict[str, Any], config_path: str | Path | None = None):
        """``config``: the host's lab.json, read from ``config_path`` (without it, or without an
        ``address`` and ``exporter_port`` in it, a loaded dataplane gets no exporter)."""
        self.host = str(config.get("host", socket.gethostname()))
        self.interfaces = [str(i) for i in config.get("interfaces", [])]
        self.source_id = str(config.get("source_id", ""))
        self.address: str | None = config.get("address")
        self.exporter_port: int | None = config.get("exporter_port")
        self.config_path = config_path
        self.dut: DutSide | None = None
        self.export: DutExport | None = None
        self.tester: TesterSide | None = None
        self.record = record_dir() / f"{os.getpid()}.json"
        #: Where ``describe`` writes descriptions: ``<perfkit_root>/dataplanes`` beside ``etc/lab.json``.
        self.descriptions_dir = (Path(config_path).absolute().parent.parent / "dataplanes" if config_path
                                 else owners.STATE_DIR / "descriptions")
        self.delivered: set[str] = set()

    # -- operations --------------------------------------------------------------------------------
    def hello(self) -> dict[str, Any]:
        from perfkit.lab.hostsetup import facts
        return {"host": self.host, "perfkit": self.source_id, "pid": os.getpid(), "interfaces": self.interfaces,
                "facts": facts(self.interfaces), "ops": list(OPS), "dataplanes": installed()}

    def check_interface(self, name: Any) -> str:
        if name not in self.interfaces:
            raise ConfigError(f"interface of host {self.host}", name,
                              f"an interface the inventory names for it: {', '.join(self.interfaces) or 'none'}")
        return str(name)

    def _pair(self, pair: Any) -> list[str]:
        if not isinstance(pair, list) or len(pair) != 2:
            raise ConfigError("interfaces", pair, "two interfaces, [a, b] in cabling order")
        return [self.check_interface(i) for i in pair]

    def describe(self, description: str, files: dict[str, str], streams: list | None = None) -> dict[str, Any]:
        """Write a description and its files on this host (``perfkit.lab.descriptions.unpack``) and
        read it; ``streams``: its profile's, as the controller's TRex library built them for the
        scenario. Its path here, for ``load`` and ``tester``."""
        from perfkit import describe
        from perfkit.lab.descriptions import give_streams, unpack
        path = unpack(self.descriptions_dir, description, files)
        give_streams(path.parent, streams or [])
        dp = describe.load(path)
        self.delivered.add(str(path))
        return {"dataplane": str(path), "name": dp.name, "by_nf": dp.desc.attach.by_nf}

    def _scenario(self, dataplane: str, frame_size: int, flows: int, params: dict | None,
                  knobs: dict | None = None) -> Scenario:
        from perfkit import dataplanes
        if dataplanes.is_path(str(dataplane)) and str(dataplane) not in self.delivered:
            raise ConfigError(f"dataplane of host {self.host}", dataplane,
                              f"a dataplane installed on it ({', '.join(dataplanes.names())}) or the path op "
                              "describe answered")
        return Scenario(dataplane=dataplane, frame_size=frame_size, flows=flows, params=params or {},
                        knobs=knobs or {})

    def _write_record(self, attached: dict[str, tuple[int, str, int]] | None = None) -> None:
        owners.write_json(self.record, {"owner": owners.me(), "netns": owners.netns_id(),
                                        "anchor": self.tester.anchor if self.tester else None,
                                        "attached": {k: {"ifindex": v[0], "mode": v[1], "prog_id": v[2]}
                                                     for k, v in (attached or {}).items()}})

    def load(self, dataplane: str, frame_size: int, flows: int, interfaces: list, params: dict | None = None,
             cores: list[int] | None = None, macs: list[dict] | None = None,
             knobs: dict | None = None) -> dict[str, Any]:
        """The dataplane on ``interfaces``: a pair ``[a, b]``, or a list of pairs (one instance each);
        ``macs``: each pair's ports' MAC addresses (``PortMacs`` fields; default: the testbed's);
        ``knobs``: system knobs (``perfkit.knobs``) set on those interfaces, read back, restored."""
        if self.dut is not None:
            raise PerfkitError(f"host {self.host}: a dataplane is loaded already (unload it first)")
        pairs = interfaces if interfaces and isinstance(interfaces[0], list) else [interfaces]
        pairs = [self._pair(p) for p in pairs]
        knobs_mod.system_only(knobs or {}, LAB_DUT)   # before the scenario, which judges steering by its cores
        scenario = self._scenario(dataplane, frame_size, flows, params, knobs)
        knobs_mod.check_measurable(scenario.knobs)
        from perfkit.describe import DescribedDataplane
        if isinstance(scenario.dp, DescribedDataplane):   # its own commands on the inventory's interfaces only
            from perfkit.lab.descriptions import check_commands
            check_commands(scenario.dp.desc, self.host, self.interfaces, [n for _, n in socket.if_nameindex()])
        self._write_record()
        self.dut = DutSide(scenario, pairs, cores or [], on_attach=self._write_record,
                           macs=[_macs(m) for m in macs] if macs else None)
        try:
            self.export = self._exporter(scenario, pairs, cores or [])
        except BaseException:   # no dataplane left loaded that nothing would report
            self.dut.close()
            self.dut = None
            raise
        modes = self.dut.modes
        return {"mode": "native" if all(m == "native" for m in modes.values()) else "generic", "modes": modes,
                "program": self.dut.instances[0].program.name, "packet_threads": self.dut.packet_threads,
                "exporter": self.export.url if self.export else None, "objects": self.dut.object_hashes()}

    def _exporter(self, scenario: Scenario, pairs: list[list[str]], cores: list[int]) -> DutExport | None:
        """``perfkit exporter`` for the loaded instances, off the DUT cores, where the lab's Prometheus
        scrapes it; None on a host provisioned without one."""
        assert self.dut is not None
        if not (self.address and self.exporter_port and self.config_path):
            return None
        descs = [exporter.describe(scenario.dp, nf, f"{self.host}-{a}") for nf, (a, _) in zip(self.dut.instances, pairs)]
        others = sorted(set(os.sched_getaffinity(0)) - set(cores))
        return DutExport.lab(descs, self.address, int(self.exporter_port), self.config_path, others or None)

    def _need_dut(self) -> DutSide:
        if self.dut is None:
            raise PerfkitError(f"host {self.host}: no dataplane is loaded")
        return self.dut

    def counters(self) -> dict[str, Any]:
        dut = self._need_dut()
        runs, ns = dut._runtime()
        return {"counters": dut.counters(), "run_cnt": runs, "run_time_ns": ns}

    def begin(self, start_at: float | None = None) -> None:
        self._need_dut().begin(start_at)

    def end(self) -> dict[str, Any]:
        return self._need_dut().end()

    def perf_start(self, frequency: int) -> None:
        self._need_dut().perf_start(frequency)

    def perf_stop(self) -> dict[str, Any]:
        return self._need_dut().perf_stop()

    def tester_setup(self, dataplane: str, frame_size: int, flows: int, interfaces: list, params: dict | None = None,
                     cores: list[int] | None = None, capture_count: int = 64, part: int = 0,
                     parts: int = 1, macs: dict | None = None) -> dict[str, Any]:
        """perfkit's generator and sink on the pair ``interfaces`` (cabled to the DUT's a and b),
        sending the slice ``part`` of ``parts`` of the scenario's flows; ``macs``: as ``load``'s, one pair's."""
        if self.tester is not None:
            raise PerfkitError(f"host {self.host}: a generator is set up already (unload it first)")
        pair = self._pair(interfaces)
        scenario = self._scenario(dataplane, frame_size, flows, params)
        self._write_record()
        self.tester = TesterSide(scenario, pair, cores or [], capture_count, FlowSlice(part, parts), _macs(macs or {}))
        self._write_record()
        return {"tx": self.tester.tx, "rx": self.tester.rx, "wire_frame_size": self.tester.gen.wire_frame_size}

    def send(self, rate_pps: float | None, duration: float, packets: int | None = None,
             start_at: float | None = None) -> dict[str, Any]:
        if self.tester is None:
            raise PerfkitError(f"host {self.host}: no generator is set up")
        return self.tester.send(rate_pps, duration, packets, start_at)

    def unload(self) -> dict[str, Any]:
        """Take down what this agent set up (only its own programs). Idempotent."""
        if self.export:
            self.export.close()
            self.export = None
        detached = self.dut.close() if self.dut else []
        self.dut = None
        if self.tester:
            self.tester.close()
            self.tester = None
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
        fn: Callable[..., Any] = {"hello": self.hello, "describe": self.describe, "load": self.load, "counters": self.counters,
                                  "begin": self.begin, "end": self.end, "perf_start": self.perf_start,
                                  "perf_stop": self.perf_stop, "tester": self.tester_setup,
                                  "send": self.send, "unload": self.unload, "bye": self.unload}[op]
        try:
            with BpfStats() if op == "counters" else nullcontext():
                result = fn(**args)
        except TypeError as err:
            return {"id": rid, "ok": False, "error": f"args of {op}: {err}"}, False
        except (PerfkitError, OSError) as err:
            return {"id": rid, "ok": False, "error": " ".join(str(err).split())}, False
        return {"id": rid, "ok": True, "result": result}, op == "bye"


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


def installed() -> dict[str, str | None]:
    """The dataplanes installed in this host's environment that load, and the package each comes
    from (``perfkit-demo-plugin 0.3.0``; None: perfkit's own source tree)."""
    from perfkit import dataplanes
    origins = dataplanes.origins()
    return {n: f"{origins[n].distribution} {origins[n].version}" if origins[n].distribution else None
            for n in dataplanes.names()}


def _macs(given: dict) -> PortMacs:
    """Ports' MAC addresses from a request (``a``, ``b``, ``p0``, ``p1``; missing ones the testbed's)."""
    unknown = sorted(set(given) - {"a", "b", "p0", "p1"})
    if unknown:
        raise ConfigError("macs", unknown[0], "a, b, p0, p1")
    for port, mac in given.items():
        if not isinstance(mac, str) or not MAC_RE.match(mac):
            raise ConfigError(f"macs.{port}", mac, "a MAC address, e.g. 02:00:00:00:01:01")
    return PortMacs(**given)


def clean() -> list[str]:
    """Restore the knobs and detach the XDP programs that agents killed before their clean-up left
    (``perfkit clean``), in this network namespace: only where the program attached is still the one
    the record names."""
    removed = [line for rid in knobs_mod.records() if rid.startswith("agent")
               and not owners.alive((owners.read_json(knobs_mod.record_path(rid)) or {}).get("owner"))
               for line in knobs_mod.clean(rid)]
    d = record_dir()
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        rec = owners.read_json(f) or {}
        if owners.alive(rec.get("owner")) or owners.elsewhere(rec):
            continue
        if rec.get("netns", owners.netns_id()) != owners.netns_id():   # its namespace is gone, and all it held
            f.unlink(missing_ok=True)
            removed.append(f"agent record {f} ({owners.describe(rec.get('owner'))}; its network namespace is gone)")
            continue
        if rec.get("anchor"):
            if subprocess.run(["ip", "link", "del", str(rec["anchor"])], capture_output=True).returncode == 0:
                removed.append(f"link {rec['anchor']}")
        for name, a in (rec.get("attached") or {}).items():
            try:
                if xdp_prog_id(int(a["ifindex"]), a["mode"]) == a["prog_id"]:
                    xdp_detach(int(a["ifindex"]), a["mode"])
                    removed.append(f"XDP program {a['prog_id']} on {name}")
            except (BpfError, KeyError, ValueError, TypeError):
                pass
        f.unlink(missing_ok=True)
    return removed + exporter.clean()


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfkit.lab.agent", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, help="the host's lab.json (perfkit lab provision writes it)")
    p.add_argument("--clean", action="store_true", help="restore the knobs and detach the programs killed agents "
                   "left (as perfkit clean does), print it as JSON, and exit")
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
    # a description's object is built on this host, into its perfkit_root (perfkit.describe.build)
    os.environ.setdefault("PERFKIT_CACHE", str(args.config.absolute().parent.parent / "cache"))
    serve(Agent(config, args.config), sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
