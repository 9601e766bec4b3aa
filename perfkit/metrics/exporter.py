"""The dataplane's own counters in Prometheus: what ``perfkit exporter`` serves at ``/metrics``.

A loaded dataplane is described by an ``ExportedDut`` (``describe``): its counters
(``Dataplane.counter_specs``), where each series lives (``DutProgram.counter_cells``), the kernel ids
of those maps and of its entry program. The description is JSON (``save``/``load``), so the exporter
can be another process than the one that loaded the dataplane -- map ids are global, so it reads
them from the root namespace while the DUT ports live in the testbed's.

``DutCollector`` reads the maps at scrape time (no polling thread: a scrape is the only reader),
summing per-CPU maps over CPUs; ``serve`` puts it behind prometheus_client's HTTP server, with basic
auth when given users (``perfkit.metrics.webauth``: a lab's DUT host serves on its management
address). The exporter serves while the dataplane is loaded: ``loaded()`` is false once its program
is gone.

Prometheus finds exporters through file-based service discovery (``file_sd_configs``, job
``dataplane``, ``perfkit.metrics.promconfig``): ``register`` writes one target file into the stack's
``targets/`` directory, ``unregister`` removes it. Every series carries the labels ``dataplane`` and
``testbed`` itself (the job honors them). One exporter may serve several loaded dataplanes (a lab's
DUT host loads one instance per tester's pair of interfaces): each is its own ``testbed``.

Both files name their owner (``perfkit.owners``: the process that wrote them; a target file in the
label ``__perfkit_owner``, which Prometheus drops before it stores a series): ``clean`` removes those
of dead owners (``perfkit clean``), never a live one's.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app, start_http_server
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from perfkit import owners
from perfkit.owners import STATE_DIR
from perfkit.dataplane import CounterCell, CounterSpec, Dataplane, DutProgram
from perfkit.errors import BpfError, ConfigError
from perfkit.metrics.webauth import BasicAuth
from perfkit.libbpf import Map, prog_info, prog_loaded

_U64 = struct.Struct("=Q")
#: Where a testbed keeps the description of the dataplane it has loaded, ``<testbed>.json``, while
#: it is loaded: what ``perfkit exporter`` serves by default.
DUT_DIR = STATE_DIR / "dataplanes"


@dataclass(frozen=True)
class ExportedDut:
    """A loaded dataplane, as the exporter needs it."""

    dataplane: str
    testbed: str
    """The testbed (or lab DUT host) it is loaded on: a label of every series."""
    prog_id: int
    """Kernel id of its entry program: the exporter stops serving once it is unloaded."""
    map_ids: dict[str, int]
    specs: tuple[CounterSpec, ...]
    cells: tuple[CounterCell, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ExportedDut:
        return cls(dataplane=str(d["dataplane"]), testbed=str(d["testbed"]), prog_id=int(d["prog_id"]),
                   map_ids={str(k): int(v) for k, v in d["map_ids"].items()},
                   specs=tuple(CounterSpec(s["name"], s["help"], tuple(s["labels"]), s["unit"]) for s in d["specs"]),
                   cells=tuple(CounterCell(c["metric"], tuple(c["labels"]), c["map"], int(c["index"]),
                                           int(c["offset"])) for c in d["cells"]))


def describe(dataplane: Dataplane, program: DutProgram, testbed: str) -> ExportedDut:
    """What the exporter needs of ``program`` (``dataplane`` loaded on ``testbed``)."""
    cells = tuple(program.counter_cells())
    specs = dataplane.counter_specs()
    names = {s.name for s in specs}
    for c in cells:
        if c.metric not in names:   # a dataplane's cells and specs disagree: its bug, said plainly
            raise ConfigError("counter cell", c.metric, f"a counter {dataplane.name} declares: {sorted(names)}")
    return ExportedDut(dataplane.name, testbed, prog_info(program.program.fd).id, program.map_ids(), specs, cells)


def save(desc: ExportedDut, path: str | Path) -> Path:
    """Write ``desc`` as JSON with this process as its owner (atomically: a reader sees the old file
    or the new one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps({**desc.to_dict(), "owner": owners.me(), "netns": owners.netns_id()}, indent=1))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)   # (after the replace, there is none)
    return path


def dut_path(testbed: str) -> Path:
    """Where testbed ``testbed`` keeps its loaded dataplane's description."""
    return DUT_DIR / f"{testbed}.json"


def find(testbed: str | None = None) -> Path:
    """The description of the dataplane loaded on ``testbed`` or, without one, of the only loaded
    dataplane; ``ConfigError`` when there is none, or several to choose from."""
    if testbed is not None:
        path = dut_path(testbed)
        if not path.exists():
            raise ConfigError("testbed", testbed, f"a testbed with a dataplane loaded: {_loaded_names() or 'none'}")
        return path
    names = _loaded_names()
    if len(names) != 1:
        raise ConfigError("testbed", None, f"one of {', '.join(names)} (several dataplanes are loaded)" if names else
                          f"a testbed with a dataplane loaded (none is: no description in {DUT_DIR})")
    return dut_path(names[0])


def _loaded_names() -> list[str]:
    """Testbeds whose described dataplane is still loaded (stale descriptions of a crash ignored)."""
    out = []
    for path in sorted(DUT_DIR.glob("*.json")) if DUT_DIR.is_dir() else ():
        try:
            if prog_loaded(load(path).prog_id):
                out.append(path.stem)
        except (ConfigError, BpfError):
            continue
    return out


def load(path: str | Path) -> ExportedDut:
    """A description ``save`` wrote; ``ConfigError`` naming the file if it is not one."""
    try:
        return ExportedDut.from_dict(json.loads(Path(path).read_text()))
    except FileNotFoundError:
        raise ConfigError("dut", str(path), "the description file of a loaded dataplane (it is gone: unloaded?)") from None
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError("dut", str(path), f"a description file perfkit wrote ({type(err).__name__}: {err})") from None


class DutCollector(Collector):
    """The dataplane's counters, read from its maps at each scrape (prometheus_client custom collector)."""

    def __init__(self, desc: ExportedDut):
        self.desc = desc
        self._lock = threading.Lock()
        self._maps: dict[str, Map] = {}
        try:
            for name, map_id in desc.map_ids.items():
                self._maps[name] = Map.from_id(map_id)
        except BaseException:
            self.close()
            raise

    def loaded(self) -> bool:
        """The dataplane's program is still loaded."""
        return prog_loaded(self.desc.prog_id)

    def read(self) -> dict[tuple[str, tuple[str, ...]], int]:
        """Every cell's value now: (metric, label values) -> value (summed over CPUs)."""
        raw: dict[tuple[str, int], list[bytes]] = {}
        out: dict[tuple[str, tuple[str, ...]], int] = {}
        with self._lock:
            for c in self.desc.cells:
                m = self._maps[c.map]
                if (c.map, c.index) not in raw:
                    value = m.lookup(struct.pack("=I", c.index)) or b""
                    raw[(c.map, c.index)] = m.percpu_values(value) if m.percpu else [value]
                total = sum(_U64.unpack_from(v, c.offset)[0] for v in raw[(c.map, c.index)] if len(v) >= c.offset + 8)
                out[(c.metric, c.labels)] = total & (1 << 64) - 1
        return out

    def collect(self) -> Iterator[CounterMetricFamily]:
        try:
            values = self.read()
        except BpfError:
            return   # the maps went away between two scrapes: no series rather than a failed scrape
        base = {"dataplane": self.desc.dataplane, "testbed": self.desc.testbed}
        for spec in self.desc.specs:
            # prometheus_client adds the _total suffix back to a counter family's name
            fam = CounterMetricFamily(spec.name.removesuffix("_total"), spec.help,
                                      labels=[*base, *spec.labels])
            for c in self.desc.cells:
                if c.metric == spec.name:
                    fam.add_metric([*base.values(), *c.labels], values[(c.metric, c.labels)])
            yield fam

    def close(self) -> None:
        for m in self._maps.values():
            m.close()
        self._maps = {}


class Collectors(Collector):
    """Several loaded dataplanes' counters as one exposition: a family per metric name, whatever
    serves it (two families of one name would make the scrape fail)."""

    def __init__(self, descs: Sequence[ExportedDut]):
        self.parts: list[DutCollector] = []
        try:
            for desc in descs:
                self.parts.append(DutCollector(desc))
        except BaseException:
            self.close()
            raise

    def loaded(self) -> bool:
        """Every served dataplane's program is still loaded."""
        return all(p.loaded() for p in self.parts)

    def collect(self) -> Iterator[CounterMetricFamily]:
        families: dict[str, CounterMetricFamily] = {}
        for part in self.parts:
            for fam in part.collect():
                if fam.name in families:
                    families[fam.name].samples.extend(fam.samples)
                else:
                    families[fam.name] = fam
        yield from families.values()

    def close(self) -> None:
        for p in self.parts:
            p.close()


@dataclass
class Server:
    """A running exporter: its HTTP server and the collector behind it."""

    collector: Collectors
    host: str
    port: int
    _httpd: Any = field(repr=False, default=None)
    _thread: Any = field(repr=False, default=None)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        self.collector.close()


def serve(descs: ExportedDut | Sequence[ExportedDut], host: str = "127.0.0.1", port: int = 0,
          users: Mapping[str, str] | None = None) -> Server:
    """Serve the counters of ``descs`` (one or several) at ``http://host:port/metrics`` (port 0: a
    free one) from a thread; with ``users`` (name -> bcrypt hash, ``webauth.load_users``), only to a
    request with basic auth as one of them."""
    collector = Collectors([descs] if isinstance(descs, ExportedDut) else descs)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        if users:
            httpd, thread = _serve_wsgi(BasicAuth(make_wsgi_app(registry), users), host, port)
        else:
            httpd, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as err:
        collector.close()
        raise ConfigError("listen", f"{host}:{port}", f"an address and free port to bind ({err.strerror})") from None
    return Server(collector, host, httpd.server_port, httpd, thread)


def _serve_wsgi(app: Any, host: str, port: int) -> tuple[ThreadingWSGIServer, threading.Thread]:
    """``app`` served from a daemon thread, as prometheus_client's ``start_http_server`` serves."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("Server", (ThreadingWSGIServer,), {"address_family": family})
    httpd = make_server(host, port, app, server_class, handler_class=_QuietHandler)
    thread = threading.Thread(target=httpd.serve_forever, name="perfkit-exporter-http", daemon=True)
    thread.start()
    return httpd, thread


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per request (a scrape each second)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


# -- discovery by the local Prometheus -------------------------------------------------------------
#: The label of a target file that names its owner (``perfkit.owners`` record, JSON).
OWNER_LABEL = "__perfkit_owner"

def target_path(targets_dir: str | Path, desc: ExportedDut) -> Path:
    """The target file of ``desc``'s exporter in a stack's ``targets/`` directory."""
    return Path(targets_dir) / f"dataplane-{desc.testbed}.json"


def register(targets_dir: str | Path, desc: ExportedDut, host: str, port: int) -> Path:
    """Tell Prometheus (file_sd) to scrape the exporter at ``host:port``; returns the target file."""
    path = target_path(targets_dir, desc)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")   # not *.json: Prometheus never reads it half-written
    # the owner in a label Prometheus drops (``__`` labels end with relabelling): perfkit clean reads it
    tmp.write_text(json.dumps([{"targets": [f"{host}:{port}"], "labels": {OWNER_LABEL: json.dumps(owners.me())}}]))
    os.replace(tmp, path)
    return path


def unregister(targets_dir: str | Path, desc: ExportedDut) -> None:
    target_path(targets_dir, desc).unlink(missing_ok=True)


# -- perfkit clean ---------------------------------------------------------------------------------
def _description_owner(path: Path) -> Mapping[str, Any] | None:
    return (owners.read_json(path) or {}).get("owner")


def _target_owner(path: Path) -> Mapping[str, Any] | None:
    try:
        groups = json.loads(path.read_text())
        return json.loads(groups[0]["labels"][OWNER_LABEL])
    except (OSError, ValueError, LookupError, TypeError):
        return None


def _leftover(owner: Mapping[str, Any] | None, run_id: str | None) -> bool:
    """A file of a dead owner (with ``run_id``: of that run, even alive); one naming no owner is of
    no live process either."""
    if run_id is not None:
        return bool(owner) and owner.get("run_id") == run_id
    return not owners.alive(owner)


def clean(targets_dirs: Sequence[str | Path] = (), run_id: str | None = None) -> list[str]:
    """``perfkit clean``: remove the descriptions (``DUT_DIR``) and the target files (in
    ``targets_dirs``) that dead processes left (SIGKILLed generators, agents and exporters)."""
    # (a directory that does not exist globs to nothing)
    # a description of another namespace's agent is left to a clean there, as its programs are
    found = [(f, _description_owner(f), "dataplane description") for f in sorted(DUT_DIR.glob("*.json"))
             if not owners.elsewhere(owners.read_json(f) or {})]
    for d in map(Path, targets_dirs):
        found += [(f, _target_owner(f), "exporter target") for f in sorted(d.glob("dataplane-*.json"))]
    removed = []
    for path, owner, what in found:
        if _leftover(owner, run_id):
            path.unlink(missing_ok=True)
            removed.append(f"{what} {path} ({owners.describe(owner)})")
    return removed
