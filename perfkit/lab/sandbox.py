"""A lab of hosts on this machine, for tests and trials of the lab code: each host a network
namespace running its own ``sshd``, cabled by veth pairs, managed from the root namespace.

::

    root namespace (the controller)          198.19.253.1/24 on bridge pkl<rid>
        |  management veths, one per host: mgmt0 198.19.253.<11..> in each host
    +---------+        +----------+       +---------+
    | tester1 |p0----a0|   dut1   |       | metrics |
    |         |p1----b0|          |       |         |
    +---------+        |          |       +---------+
    | tester2 |p0----a1|          |
    |         |p1----b1|          |
    +---------+        +----------+

The inventory it writes is an ordinary Ansible inventory (``perfkit.lab.inventory``): a host's
``ansible_host`` is its management address, SSH uses a key made for the sandbox (no password is
accepted) and checks the host keys made for it; its metrics stack asks for basic auth with a password
made for the sandbox (``metrics_password``). What a real lab would keep apart, a sandbox shares:
the kernel, the CPUs and the file system (each host has its own ``perfkit_root`` directory), so
node-exporter and CPU figures of any host see the whole machine.

Each sandbox has an owner record (``$PERFKIT_STATE_DIR/labs/<rid>.json``) written before its first
namespace; ``clean()`` removes the sandboxes of dead owners: every process inside their namespaces
(``ip netns pids``: sshd, its sessions, what they started), the namespaces and the bridge.
"""
from __future__ import annotations

import atexit
import ipaddress
import os
import re
import signal
import secrets
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from perfkit import owners
from perfkit.errors import ConfigError, TestbedError
from perfkit.testbed import netns

PREFIX = "pkl"
_NS_RE = re.compile(rf"^{PREFIX}([0-9a-f]{{6}})-(.+)$")
#: The management network: the controller's bridge is ``.1``, hosts from ``.11`` on.
MGMT_NET = ipaddress.ip_network("198.19.253.0/24")
SSHD = "/usr/sbin/sshd"
#: Seconds an sshd may take to listen.
SSHD_START_S = 10.0


@dataclass(frozen=True)
class Cable:
    """A veth pair between two hosts' interfaces, ``(host, interface)`` at each end."""

    a: tuple[str, str]
    b: tuple[str, str]


@dataclass(frozen=True)
class HostSpec:
    """A host of the sandbox: its inventory name, roles and inventory variables besides the
    connection's (``dut_cores``, ``tester_cores``)."""

    name: str
    roles: tuple[str, ...]
    vars: dict = field(default_factory=dict)


def four_hosts(dut_cores: tuple[int, ...] = (1,), tester_cores: tuple[int, ...] = (0,)) -> tuple[list[HostSpec], list[Cable]]:
    """The issue's test lab: a DUT, two testers cabled to it (two interfaces each) and a metrics host."""
    hosts = [HostSpec("dut1", ("dut",), {"dut_cores": list(dut_cores)}),
             HostSpec("tester1", ("tester",), {"tester_cores": list(tester_cores)}),
             HostSpec("tester2", ("tester",), {"tester_cores": list(tester_cores)}),
             HostSpec("metrics1", ("metrics",))]
    cables = [Cable(("tester1", "p0"), ("dut1", "a0")), Cable(("tester1", "p1"), ("dut1", "b0")),
              Cable(("tester2", "p0"), ("dut1", "a1")), Cable(("tester2", "p1"), ("dut1", "b1"))]
    return hosts, cables


class Sandbox:
    """Hosts, cables and sshds of a lab on this machine; ``with Sandbox(dir) as sb:`` brings it up
    and always down. ``sb.inventory`` is the path of its Ansible inventory."""

    def __init__(self, workdir: str | os.PathLike[str], hosts: list[HostSpec] | None = None,
                 cables: list[Cable] | None = None, sandbox_id: str | None = None):
        if hosts is None:
            hosts, cables = four_hosts()
        self.rid = sandbox_id or os.urandom(3).hex()
        #: The basic-auth password of the sandbox's metrics stack (its inventory's perfkit_metrics_password).
        self.metrics_password = secrets.token_urlsafe(12)
        if not re.fullmatch(r"[0-9a-f]{6}", self.rid):
            raise ConfigError("sandbox_id", self.rid, "6 lower-case hex digits")
        self.workdir = Path(workdir).absolute()
        self.hosts, self.cables = list(hosts), list(cables or [])
        self.bridge = f"{PREFIX}{self.rid}"
        self.inventory = self.workdir / "inventory.yml"
        self.key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self.sshd_pids: dict[str, int] = {}
        self._up = False

    # -- names -----------------------------------------------------------------------------------
    def ns(self, host: str) -> str:
        """The network namespace of ``host``."""
        return f"{PREFIX}{self.rid}-{host}"

    def address(self, host: str) -> str:
        """The management address of ``host``."""
        k = [h.name for h in self.hosts].index(host)
        return str(MGMT_NET.network_address + 11 + k)

    def root(self, host: str) -> Path:
        """The directory that plays ``host``'s file system for perfkit (its ``perfkit_root``)."""
        return self.workdir / "hosts" / host

    @staticmethod
    def mac(k: int, j: int) -> str:
        """The MAC address of host ``k``'s ``j``-th data-plane interface."""
        return f"02:00:00:53:{k:02x}:{j:02x}"

    # -- life cycle ------------------------------------------------------------------------------
    def up(self) -> Sandbox:
        if self._up:
            return self
        for other in running():
            raise TestbedError(f"lab sandbox {other} is up already (owner: {owners.describe((record(other) or {}).get('owner'))}); "
                               "a leftover of a dead process is removed by `perfkit clean`")
        atexit.register(self.down)
        owners.write_json(record_path(self.rid), {"sandbox_id": self.rid, "owner": owners.me(),
                                                  "hosts": [h.name for h in self.hosts]})
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._keys()
            self._network()
            for h in self.hosts:
                self._start_sshd(h.name)
            self._write_inventory()
        except BaseException:
            self.down()
            raise
        self._up = True
        return self

    def down(self) -> None:
        """Kill every process in the hosts, remove the namespaces and the bridge. Idempotent."""
        _remove(self.rid)
        self.sshd_pids.clear()
        self._up = False

    def __enter__(self) -> Sandbox:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # -- parts -----------------------------------------------------------------------------------
    def _keys(self) -> None:
        if not self.key.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"perfkit-sandbox-{self.rid}", "-f", str(self.key)])
        (self.workdir / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        lines = []
        for h in self.hosts:
            d = self.root(h.name) / "etc" / "ssh"
            d.mkdir(parents=True, exist_ok=True)
            hostkey = d / "ssh_host_ed25519_key"
            if not hostkey.exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", h.name, "-f", str(hostkey)])
            lines.append(f"{self.address(h.name)} {' '.join(Path(f'{hostkey}.pub').read_text().split()[:2])}")
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def _network(self) -> None:
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{MGMT_NET.network_address + 1}/{MGMT_NET.prefixlen}", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        for k, h in enumerate(self.hosts):
            ns = self.ns(h.name)
            _run(["ip", "netns", "add", ns])
            netns.run(ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
            netns.run(ns, "ip", "link", "set", "lo", "up")
            root_end = f"m{self.rid}{k:x}"
            _run(["ip", "link", "add", root_end, "type", "veth", "peer", "name", "mgmt0", "netns", ns])
            _run(["ip", "link", "set", root_end, "master", self.bridge, "up"])
            netns.run(ns, "ip", "addr", "add", f"{self.address(h.name)}/{MGMT_NET.prefixlen}", "dev", "mgmt0")
            netns.run(ns, "ip", "link", "set", "mgmt0", "up")
        # a cable has a queue per CPU at most, one in use, as a NIC's channels: provisioning sets
        # as many as the host's cores (a veth queues a frame by the sending CPU)
        queues = ["numtxqueues", str(os.cpu_count() or 1), "numrxqueues", str(os.cpu_count() or 1)]
        for c in self.cables:
            (ha, ia), (hb, ib) = c.a, c.b
            _run(["ip", "link", "add", f"c{self.rid}x", "netns", self.ns(ha), *queues, "address", self._mac(ha, ia),
                  "type", "veth", "peer", "name", f"c{self.rid}y", "netns", self.ns(hb), *queues,
                  "address", self._mac(hb, ib)])
            for ns, dev, name in ((self.ns(ha), f"c{self.rid}x", ia), (self.ns(hb), f"c{self.rid}y", ib)):
                netns.run(ns, "ethtool", "-L", dev, "rx", "1", "tx", "1")
                netns.run(ns, "ip", "link", "set", dev, "name", name, "up")

    def interfaces(self, host: str) -> list[tuple[str, str]]:
        """``(interface, peer host:interface)`` of ``host``, in cabling order."""
        out = []
        for c in self.cables:
            for end, other in ((c.a, c.b), (c.b, c.a)):
                if end[0] == host:
                    out.append((end[1], f"{other[0]}:{other[1]}"))
        return out

    def _mac(self, host: str, iface: str) -> str:
        k = [h.name for h in self.hosts].index(host)
        return self.mac(k, [i for i, _ in self.interfaces(host)].index(iface))

    def _start_sshd(self, host: str) -> None:
        etc = self.root(host) / "etc" / "ssh"
        config = etc / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {self.address(host)}", "Port 22",
            f"HostKey {etc / 'ssh_host_ed25519_key'}",
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PubkeyAuthentication yes", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "UseDNS no",
            f"PidFile {etc / 'sshd.pid'}", "Subsystem sftp internal-sftp",
            "MaxStartups 64", "MaxSessions 64", "ClientAliveInterval 2", "ClientAliveCountMax 3", ""]))
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)   # sshd's privilege separation directory
        log = open(etc / "sshd.log", "ab")
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(host), SSHD, "-D", "-e", "-f", str(config)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        self.sshd_pids[host] = proc.pid
        deadline = time.monotonic() + SSHD_START_S
        while not _listening(self.address(host), 22):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (etc / "sshd.log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise TestbedError(f"sshd of sandbox host {host} did not start: {tail[0]}")
            time.sleep(0.05)

    def _write_inventory(self) -> None:
        children: dict[str, dict] = {}
        for k, h in enumerate(self.hosts):
            hv = {"ansible_host": self.address(h.name), "perfkit_root": str(self.root(h.name) / "opt" / "perfkit"),
                  **({"perfkit_metrics_password": self.metrics_password} if "metrics" in h.roles else {}), **h.vars}
            ifaces = [{"name": i, "mac": self.mac(k, j), "peer": peer} for j, (i, peer) in enumerate(self.interfaces(h.name))]
            if ifaces:
                hv["interfaces"] = ifaces
            for role in h.roles:
                children.setdefault(role, {"hosts": {}})["hosts"][h.name] = hv
        inv = {"all": {"vars": {
            "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": f"-F /dev/null -o UserKnownHostsFile={self.known_hosts} "
                                       "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes -o BatchMode=yes",
            "perfkit_sandbox": self.rid}, "children": children}}
        self.inventory.write_text("# A lab sandbox of perfkit.lab.sandbox: hosts are namespaces of this machine.\n"
                                  + yaml.safe_dump(inv, sort_keys=False))


def _listening(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def _run(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise TestbedError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


# -- leftovers -------------------------------------------------------------------------------------
def record_path(rid: str) -> Path:
    return owners.STATE_DIR / "labs" / f"{rid}.json"


def record(rid: str) -> dict | None:
    return owners.read_json(record_path(rid))


def running() -> list[str]:
    """Ids of the sandboxes with a namespace or a bridge on this machine, or an owner record."""
    ids = {m.group(1) for ns in netns.names() if (m := _NS_RE.match(ns))}
    out = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True).stdout
    ids |= set(re.findall(rf"^\d+: {PREFIX}([0-9a-f]{{6}})[@:]", out, re.M))
    d = owners.STATE_DIR / "labs"
    ids |= {f.stem for f in d.glob("*.json")} if d.is_dir() else set()
    return sorted(ids)


def pids_in(ns: str) -> list[int]:
    """Processes whose network namespace is ``ns`` (``ip netns pids``)."""
    proc = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def _remove(rid: str) -> list[str]:
    removed = []
    names = [ns for ns in netns.names() if (m := _NS_RE.match(ns)) and m.group(1) == rid]
    for _ in range(50):   # sshd forks sessions while it dies: sweep until nothing is left
        pids = [p for ns in names for p in pids_in(ns)]
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
    for ns in names:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        removed.append(f"netns {ns}")
    if subprocess.run(["ip", "link", "del", f"{PREFIX}{rid}"], capture_output=True).returncode == 0:
        removed.append(f"bridge {PREFIX}{rid}")
    record_path(rid).unlink(missing_ok=True)
    return removed


def clean(run_id: str | None = None) -> list[str]:
    """Remove the sandboxes whose owner is gone (with ``run_id``: those of that run); returns what
    was removed. Those of live processes are left alone."""
    removed = []
    for rid in running():
        owner = (record(rid) or {}).get("owner")
        if (owner or {}).get("run_id") == run_id if run_id is not None else not owners.alive(owner):
            removed += _remove(rid)
    return removed


def owned_by_live() -> dict[str, str]:
    """Sandboxes ``clean()`` leaves alone: id -> who owns them."""
    return {rid: owners.describe(o) for rid in running() if owners.alive(o := (record(rid) or {}).get("owner"))}
