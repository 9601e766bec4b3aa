"""The local testbed: a two-port tester and the DUT between them, in network namespaces.

::

    namespace pk<rid>-tester                 namespace pk<rid>-dut
    +---------------------------+            +--------------------------+
    | t<rid>p0  198.19.255.2/30 |<--veth---->| d<rid>a  198.19.255.1/30 |  (PGW-U: S5/S1-U; LB: clients)
    | t<rid>p1  198.19.255.6/30 |<--veth---->| d<rid>b  198.19.255.5/30 |  (PGW-U: SGi; LB: reals)
    | t<rid>g <-> t<rid>h       |            +--------------------------+
    +---------------------------+

Traffic that enters the DUT at ``a`` goes p0 -> DUT -> p1 (PGW-U uplink), traffic entering at ``b``
p1 -> DUT -> p0 (downlink), as with a TRex tester's two ports.
``rid`` is a 6-hex-digit testbed id in every name, so parallel runs and leftovers are recognisable.
Each testbed has an owner record (``perfkit.owners``: ``$PERFKIT_STATE_DIR/testbeds/<rid>.json``,
written *before* its first namespace): the process that set it up and the run it works for, or none
for a testbed kept up on purpose (``up(keep=True)``, ``perfkit testbed up``). ``clean()`` removes
the testbeds whose owner is gone -- killed, or never recorded -- with everything in them, and leaves
those of live processes alone; ``clean(run_id=...)`` removes those of one run. The pair
``g``/``h`` only anchors the generator program in the kernel's XDP dispatcher and gives its calls
two ingress ports to alternate between, so that it can tell consecutive calls apart (see
``perfkit.testbed.livegen``). MAC addresses and addresses are fixed per role (``PORT_MACS``,
``PORT_ADDRS``: a dataplane configures its egress with them), every
link has one queue (one NAPI instance: the DUT's receive processing is placed by pinning its
thread), the DUT's ports have GRO on as NIC drivers start (veth starts without), and IPv6 is off so that no router solicitation or neighbour discovery reaches the sink.
"""
from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from perfkit import knobs, owners, stop
from perfkit.crashpoints import crashpoint
from perfkit.errors import ConfigError, TestbedError
from perfkit.ports import PORT_MACS  # noqa: F401  (re-exported: perfkit.testbed.topology.PORT_MACS)
from perfkit.testbed import netns, shield
from perfkit.units import MTU_MAX

PREFIX = "pk"
_NS_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{6}})-(tester|dut)$")
MTU_MIN = 68
PIN_DIR = Path("/sys/fs/bpf/perfkit")
#: IPv4 address of each port by role (one /30 per link, inside 198.19.255.0/24).
PORT_ADDRS = {"a": "198.19.255.1", "p0": "198.19.255.2", "b": "198.19.255.5", "p1": "198.19.255.6"}


def xdp_max_mtu() -> int:
    """Largest MTU at which a veth accepts a native XDP program without multi-buffer support.

    The frame must fit one page with the XDP headroom (256) and skb_shared_info (320) around it.
    """
    return os.sysconf("SC_PAGESIZE") - 256 - 320 - 14


@dataclass(frozen=True)
class Port:
    """One end of a testbed link."""

    ns: str
    dev: str
    mac: str
    addr: str

    @property
    def ifindex(self) -> int:
        return netns.ifindex(self.ns, self.dev)


class Testbed:
    """Namespaces and links of one run. ``with Testbed(...) as tb:`` brings it up and always down."""

    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, testbed_id: str | None = None, mtu: int = 1500):
        rid = testbed_id or os.urandom(3).hex()
        if not re.fullmatch(r"[0-9a-f]{6}", rid):
            raise ConfigError("testbed_id", rid, "6 lower-case hex digits")
        if not MTU_MIN <= mtu <= MTU_MAX:
            raise ConfigError("mtu", mtu, f"{MTU_MIN} .. {MTU_MAX}")
        self.rid, self.mtu = rid, mtu
        self.tester_ns, self.dut_ns = f"{PREFIX}{rid}-tester", f"{PREFIX}{rid}-dut"
        self.p0 = Port(self.tester_ns, f"t{rid}p0", PORT_MACS["p0"], PORT_ADDRS["p0"])
        self.p1 = Port(self.tester_ns, f"t{rid}p1", PORT_MACS["p1"], PORT_ADDRS["p1"])
        self.a = Port(self.dut_ns, f"d{rid}a", PORT_MACS["a"], PORT_ADDRS["a"])
        self.b = Port(self.dut_ns, f"d{rid}b", PORT_MACS["b"], PORT_ADDRS["b"])
        self.anchor = Port(self.tester_ns, f"t{rid}g", PORT_MACS["anchor"], "")
        self._up = False
        self._old_sigterm = None

    # -- life cycle ------------------------------------------------------------------------------
    def up(self, keep: bool = False) -> Testbed:
        """Create everything. ``keep``: leave it up when this process ends (``perfkit testbed up``)."""
        if self._up:
            return self
        for ns in (self.tester_ns, self.dut_ns):
            if netns.exists(ns):
                holder = owners.describe((owner_record(self.rid) or {}).get("owner"))
                raise TestbedError(f"namespace {ns} exists already: testbed {self.rid} belongs to {holder} "
                                   "(a leftover of a dead process is removed by `perfkit clean`)")
        if not keep:
            self._install_cleanup()
        owners.write_json(record_path(self.rid), {"testbed_id": self.rid, "kept": keep,
                                                  "owner": None if keep else owners.me()})
        try:
            self._create()
        except BaseException:
            self.down()
            raise
        self._up = True
        return self

    def _create(self) -> None:
        # a few processes instead of one per step (each ``ip netns exec`` is a fork, an exec and a
        # private mount namespace: 19 of them took 0.12-0.25 s): the namespaces and the links by one
        # ``ip -batch`` each, each namespace's addresses and link states by one ``ip -n NS -batch``,
        # the sysctls and GRO from this process (``perfkit.testbed.netns``)
        netns.batch(None, [["netns", "add", ns] for ns in (self.tester_ns, self.dut_ns)])
        for ns in (self.tester_ns, self.dut_ns):
            netns.sysctl(ns, **{"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"})
        crashpoint("testbed.setup")
        one_queue = ["numtxqueues", "1", "numrxqueues", "1"]
        links = []
        for tester, dut in ((self.p0, self.a), (self.p1, self.b), (self.anchor, None)):
            peer_ns, peer_dev = (dut.ns, dut.dev) if dut else (self.tester_ns, anchor_peer(self.anchor))
            links.append(["link", "add", tester.dev, "netns", tester.ns, *one_queue, "address", tester.mac,
                          "mtu", str(self.mtu), "type", "veth", "peer", "name", peer_dev, "netns", peer_ns,
                          *one_queue, *(["address", dut.mac] if dut else []), "mtu", str(self.mtu)])
        netns.batch(None, links)
        up = {self.tester_ns: [self.p0.dev, self.p1.dev, self.anchor.dev, anchor_peer(self.anchor)],
              self.dut_ns: [self.a.dev, self.b.dev]}
        for ns, devs in up.items():
            netns.batch(ns, [["addr", "add", f"{port.addr}/30", "dev", port.dev]
                             for port in (self.p0, self.p1, self.a, self.b) if port.ns == ns]
                        + [["link", "set", dev, "up"] for dev in devs])
        for port in (self.a, self.b):  # as a NIC's driver starts (veth: off), so that a gro knob has a default to vary
            netns.set_gro(port.ns, port.dev, True)

    def down(self) -> None:
        """Remove both namespaces (their links and XDP attachments go with them). Idempotent."""
        for ns in (self.tester_ns, self.dut_ns):
            if netns.exists(ns):
                netns.run(None, "ip", "netns", "del", ns, check=False)
        record_path(self.rid).unlink(missing_ok=True)
        self._up = False
        self._restore_sigterm()

    def __enter__(self) -> Testbed:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    def _install_cleanup(self) -> None:
        atexit.register(self.down)
        # SIGTERM would kill us without running `finally`; make it an exception like Ctrl-C is
        if threading.current_thread() is threading.main_thread():
            self._old_sigterm = signal.getsignal(signal.SIGTERM)
            if self._old_sigterm in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _raise_sigterm)

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None
            stop.reset()   # the stop our handler recorded (if any) was this testbed's

    # -- kernel knobs ----------------------------------------------------------------------------
    def set_threaded_napi(self, port: Port) -> None:
        """Move the port's receive processing into a kernel thread (needs its XDP program attached)."""
        netns.run(port.ns, "sh", "-c", f"echo 1 > /sys/class/net/{port.dev}/threaded")

    def napi_threads(self, port: Port) -> list[int]:
        """PIDs of the threaded-NAPI kernel threads of ``port`` (named ``napi/<dev>-<id>``)."""
        pids = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                except OSError:
                    continue
                if comm.startswith(f"napi/{port.dev}-"):
                    pids.append(int(pid))
        return pids

    def pin_napi(self, port: Port, cpus: set[int], realtime: bool = False) -> list[int]:
        """Threaded NAPI for ``port``, its thread(s) pinned to ``cpus``; returns their pids.

        ``realtime`` gives them SCHED_FIFO: a sink thread sharing its core with a generator thread
        must run as soon as frames arrive, or the port's 256-frame ring overflows while the
        generator holds the core (tester-side loss that would be blamed on the DUT).
        """
        self.set_threaded_napi(port)
        pids = self.napi_threads(port)
        if not pids:
            raise TestbedError(f"no NAPI thread for {port.dev} (is an XDP program attached?)")
        for pid in pids:
            os.sched_setaffinity(pid, cpus)
            if realtime:
                os.sched_setscheduler(pid, os.SCHED_FIFO, os.sched_param(50))
        return pids

    def link_stats(self, port: Port) -> dict[str, int]:
        """``ethtool -S`` counters of a port (veth: per-queue XDP counters)."""
        return netns.link_stats(port.ns, port.dev)

    def status(self) -> dict:
        return {"testbed_id": self.rid, "up": netns.exists(self.tester_ns) and netns.exists(self.dut_ns),
                "namespaces": [ns for ns in (self.tester_ns, self.dut_ns) if netns.exists(ns)],
                "mtu": self.mtu,
                "ports": {name: {"ns": p.ns, "dev": p.dev, "mac": p.mac, "addr": p.addr}
                          for name, p in (("p0", self.p0), ("p1", self.p1), ("a", self.a), ("b", self.b))}}


def anchor_peer(anchor: Port) -> str:
    """The anchor veth's peer (``t<rid>h``): the generator's frames alternate between the two."""
    return anchor.dev[:-1] + "h"


def _raise_sigterm(signum: int, frame: object) -> None:
    """SIGTERM as SystemExit, once (``perfkit.stop.request``: not inside a ring buffer's callback,
    where it would be dropped, but as libbpf returns): a second SIGTERM during the clean-up the first
    one started is ignored rather than cutting it short (``down`` restores the default; SIGKILL still
    ends us)."""
    stop.request(signum, SystemExit(128 + signum))


def record_path(rid: str) -> Path:
    """The owner record of testbed ``rid``."""
    return owners.STATE_DIR / "testbeds" / f"{rid}.json"


def owner_record(rid: str) -> dict | None:
    """``{"testbed_id", "kept", "owner": owner record or None}`` of testbed ``rid``, or None."""
    return owners.read_json(record_path(rid))


def running() -> list[str]:
    """Ids of every perfkit testbed with a namespace on this machine."""
    return sorted({m.group(1) for ns in netns.names() if (m := _NS_RE.match(ns))})


def _root_links() -> dict[str, list[str]]:
    """testbed id -> perfkit links a crashed ``ip link add`` may have left in the root namespace."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    links: dict[str, list[str]] = {}
    for dev in re.findall(r"^\d+: ([td][0-9a-f]{6}(?:p[01]|[abgh]))[@:]", out, re.M):
        links.setdefault(dev[1:7], []).append(dev)
    return links


def owned_by_live() -> dict[str, str]:
    """Testbeds that ``clean()`` leaves alone: id -> who owns them."""
    out = {}
    for rid in running():
        owner = (owner_record(rid) or {}).get("owner")
        if owners.alive(owner):
            out[rid] = owners.describe(owner)
    return out


def _cleanable(owner: dict | None, run_id: str | None) -> bool:
    """Whether ``clean`` may undo what ``owner`` set up: it is gone, or it works for ``run_id``."""
    if run_id is not None:
        return bool(owner) and owner.get("run_id") == run_id
    return not owners.alive(owner)


def _clean_shields(run_id: str | None) -> list[str]:
    """Give back the CPUs that shields of gone owners (or of ``run_id``) took (``perfkit.testbed.shield``)."""
    return [line for rid in shield.records()
            if _cleanable((owners.read_json(shield.record_path(rid)) or {}).get("owner"), run_id)
            for line in shield.clean(rid)]


def _clean_knobs(run_id: str | None) -> list[str]:
    """Restore the knobs that testbeds of gone owners (or of ``run_id``) set (``perfkit.knobs``):
    before their namespaces go, so that a kept testbed and host-wide sysctls get their values back."""
    return [line for rid in knobs.records()
            if _cleanable((owners.read_json(knobs.record_path(rid)) or {}).get("owner"), run_id)
            for line in knobs.clean(rid)]


def clean(run_id: str | None = None) -> list[str]:
    """Remove the perfkit testbeds (namespaces with their links and XDP attachments, stray links,
    owner records) whose owner process is gone; with ``run_id``, those that run owns, whatever
    their state. Returns what was removed. Testbeds of live processes are left alone
    (``owned_by_live``), so this is safe to run at any time.
    """
    removed = _clean_knobs(run_id)
    links = _root_links()
    records = {f.stem for f in (owners.STATE_DIR / "testbeds").glob("*.json")} \
        if (owners.STATE_DIR / "testbeds").is_dir() else set()
    for rid in sorted(set(running()) | set(links) | records):
        if not _cleanable((owner_record(rid) or {}).get("owner"), run_id):
            continue
        for ns in (f"{PREFIX}{rid}-tester", f"{PREFIX}{rid}-dut"):
            if netns.exists(ns):
                netns.run(None, "ip", "netns", "del", ns, check=False)
                removed.append(f"netns {ns}")
        for dev in links.get(rid, []):
            subprocess.run(["ip", "link", "del", dev], capture_output=True)
            removed.append(f"link {dev}")
        record_path(rid).unlink(missing_ok=True)
    removed += _clean_shields(run_id)
    if PIN_DIR.exists() and not owned_by_live():
        for p in sorted(PIN_DIR.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        PIN_DIR.rmdir()
        removed.append(f"pins {PIN_DIR}")
    return removed
