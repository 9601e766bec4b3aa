"""A lab is an Ansible inventory: its hosts by role, their data-plane interfaces and cores.

perfkit reads the inventory through Ansible's own parsing (``ansible-inventory --list`` of the
ansible-core that ``make setup`` installs), so whatever Ansible reads works: YAML or INI files, a
directory with ``group_vars/`` and ``host_vars/``, inventory plugins.

Roles are groups (a host may have several; the other groups are Ansible's business):

- ``dut``: the host that runs the dataplane; exactly one;
- ``tester``: hosts that run perfkit's XDP generator and sink on their NICs;
- ``trex``: hosts that run a TRex server;
- ``metrics``: the host of Prometheus and the Pushgateway; at most one.

A lab needs a ``dut`` and at least one ``tester`` or ``trex`` host. The host variables perfkit
reads (all others, secrets included, are left to Ansible and never copied):

================  =====================================================================================
ansible_host      the management address SSH reaches (default: the host's name)
ansible_port      the SSH port (default 22)
ansible_user      the SSH user (default: Ansible's)
interfaces        the data-plane interfaces in cabling order, each ``{name, mac, address, peer}``:
                  ``name`` the kernel's name (required); ``mac`` its MAC address (required on
                  ``dut`` and ``tester`` hosts: frames are built for it); ``address`` an IPv4 or
                  IPv6 address with its prefix length (optional); ``peer`` the interface at the
                  cable's other end as ``HOST:INTERFACE`` (optional; when both ends name a peer,
                  they must name each other)
dut_cores         the CPUs that run the dataplane (``dut`` hosts: required), e.g. ``[2, 3]``
tester_cores      the CPUs that run the generator and sink (``tester`` hosts: optional)
perfkit_root      where perfkit lives on the host (default ``/opt/perfkit``; ``perfkit lab provision``)
================  =====================================================================================

On the ``metrics`` host (or in ``all: vars``), ``perfkit_metrics_password`` turns on basic auth for
the lab's metrics stack (Prometheus, the Pushgateway and every host's node-exporter), with the user
``perfkit_metrics_user`` (default ``perfkit``). The password is a secret: it is kept off ``repr``,
``to_dict``, runs and reports, and reaches the hosts only as a bcrypt hash (and as Prometheus's scrape
password on the metrics host, a file of mode 0600).
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from perfkit.errors import ConfigError, PerfkitError

ROLES = ("dut", "tester", "trex", "metrics")
#: Roles whose hosts send or receive frames perfkit builds: their interfaces need MAC addresses.
FRAME_ROLES = ("dut", "tester")
MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
#: Seconds ansible-inventory may take (plugins may query a cloud).
INVENTORY_TIMEOUT = 120.0


@dataclass(frozen=True)
class Interface:
    """A data-plane interface of a lab host."""

    name: str
    """The kernel's interface name on its host."""
    mac: str | None = None
    """Its MAC address, lower case (None: not given)."""
    address: str | None = None
    """Its address with prefix length, e.g. ``198.18.0.1/24`` (None: not given)."""
    peer: str | None = None
    """The interface at the other end of its cable, ``HOST:INTERFACE`` (None: not given)."""


@dataclass(frozen=True)
class LabHost:
    """A host of the lab and what perfkit needs of it."""

    name: str
    """Its name in the inventory."""
    roles: tuple[str, ...]
    """Its roles (``ROLES``), in that order."""
    address: str
    """The management address SSH reaches (``ansible_host``)."""
    port: int = 22
    """The SSH port (``ansible_port``)."""
    user: str | None = None
    """The SSH user (``ansible_user``; None: Ansible's default)."""
    interfaces: tuple[Interface, ...] = ()
    """Data-plane interfaces, in cabling order."""
    dut_cores: tuple[int, ...] = ()
    """CPUs that run the dataplane (the ``dut`` host)."""
    tester_cores: tuple[int, ...] = ()
    """CPUs that run the generator and sink (``tester`` hosts; empty: not given)."""
    root: str = "/opt/perfkit"
    """Where perfkit lives on the host (``perfkit_root``): its source, virtualenv and servers."""
    ssh_options: tuple[str, ...] = field(default=(), repr=False, compare=False)
    """``ssh`` options as Ansible would pass them (``ansible_ssh_private_key_file``,
    ``ansible_ssh_common_args``, ``ansible_ssh_extra_args``); never written to a run or a report."""

    def interface(self, name: str) -> Interface:
        """The interface ``name``; an interface the inventory does not name is refused."""
        for i in self.interfaces:
            if i.name == name:
                return i
        raise ConfigError(f"interface of host {self.name}", name,
                          ", ".join(i.name for i in self.interfaces) or "none: the inventory names no interface")


@dataclass(frozen=True)
class Lab:
    """The hosts of an inventory that have a perfkit role."""

    source: str
    """The inventory as given (a path or an inventory plugin's source)."""
    hosts: tuple[LabHost, ...] = field(default_factory=tuple)
    """Its hosts with a role, by role (``ROLES``' order), then as Ansible lists a group's hosts."""
    metrics_auth: tuple[str, str] | None = field(default=None, repr=False, compare=False)
    """``(user, password)`` of the metrics stack's basic auth (``perfkit_metrics_user`` and
    ``perfkit_metrics_password`` of the metrics host); None: no auth. A secret: never written."""

    def role(self, role: str) -> tuple[LabHost, ...]:
        """The hosts with ``role``, in ``hosts``' order."""
        if role not in ROLES:
            raise ConfigError("role", role, ROLES)
        return tuple(h for h in self.hosts if role in h.roles)

    @property
    def dut(self) -> LabHost:
        return self.role("dut")[0]

    def to_dict(self) -> dict[str, Any]:
        """What perfkit knows of the lab (no secret: only the fields above), for ``--json`` and a run's metadata."""
        return {"source": self.source, "hosts": [{k: v for k, v in asdict(h).items() if k != "ssh_options"}
                                                 for h in self.hosts]}


# -- reading ---------------------------------------------------------------------------------------
def ansible_inventory() -> str:
    """The ``ansible-inventory`` command of perfkit's environment (else the one on PATH)."""
    beside = Path(sys.executable).parent / "ansible-inventory"
    found = str(beside) if beside.exists() else shutil.which("ansible-inventory")
    if not found:
        raise PerfkitError("ansible-inventory not found: ansible-core is installed by `make setup` "
                           "(or pip install ansible-core)")
    return found


def inventory_json(source: str | os.PathLike[str]) -> dict[str, Any]:
    """``ansible-inventory -i SOURCE --list``, parsed; an inventory Ansible cannot read is refused
    in one line with Ansible's reason."""
    if "," not in os.fspath(source) and not Path(source).exists():   # "h1,h2," is Ansible's host list
        raise ConfigError("inventory", os.fspath(source), "an inventory file or directory (no such file)")
    env = dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="true", ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="true",
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_DEPRECATION_WARNINGS="false")
    try:
        proc = subprocess.run([ansible_inventory(), "-i", os.fspath(source), "--list"], capture_output=True,
                              text=True, env=env, timeout=INVENTORY_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise PerfkitError(f"inventory {source}: ansible-inventory took longer than {INVENTORY_TIMEOUT:g} s") from None
    if proc.returncode != 0:
        raise ConfigError("inventory", os.fspath(source),
                          f"an inventory Ansible reads ({_ansible_reason(proc.stderr, os.fspath(source))})")
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise PerfkitError(f"inventory {source}: ansible-inventory printed no JSON") from None


def _ansible_reason(stderr: str, source: str) -> str:
    """Why Ansible could not read ``source``: what the plugin for its kind of file said (YAML for
    ``.yml``/``.yaml``, else INI), else Ansible's last error line, without its ``[ERROR]:`` prefix."""
    plugins = dict(re.findall(r"^\[WARNING\]: Failed to parse inventory with '(\w+)' plugin: (.*)$", stderr, re.M))
    want = "yaml" if source.endswith((".yml", ".yaml")) else "ini"
    plugin = want if want in plugins else next(iter(plugins), None)
    if plugin:
        return f"{plugin} plugin: {plugins[plugin].strip()}"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "ERROR" in ln[:12]] or lines or ["no reason given"]
    return re.sub(r"^\[?ERROR\]?!?:?\s*", "", errors[-1])


def load(source: str | os.PathLike[str]) -> Lab:
    """The lab of an Ansible inventory (see the module doc); a bad host variable is refused in one
    line naming the host, the variable, its value and what is allowed."""
    return lab_from_json(os.fspath(source), inventory_json(source))


def lab_from_json(source: str, data: Mapping[str, Any]) -> Lab:
    """The lab of ``ansible-inventory --list``'s output ``data``."""
    hostvars = data.get("_meta", {}).get("hostvars", {})
    members = {role: _members(data, role) for role in ROLES}
    order = dict.fromkeys(name for role in ROLES for name in members[role])
    hosts = tuple(_host(name, tuple(r for r in ROLES if name in members[r]), hostvars.get(name, {}))
                  for name in order)
    metrics = [name for name in order if name in members["metrics"]]
    lab = Lab(source, hosts, _metrics_auth(hostvars.get(metrics[0], {})) if metrics else None)
    _check_lab(lab)
    return lab


def _metrics_auth(v: Mapping[str, Any]) -> tuple[str, str] | None:
    """The metrics stack's basic-auth user and password from the metrics host's variables."""
    password = v.get("perfkit_metrics_password")
    if password is None:
        return None
    if not isinstance(password, str) or not password or "\n" in password:
        # never the value: it is a secret (a vaulted one reaches perfkit as a mapping)
        raise ConfigError("perfkit_metrics_password", "(not shown)",
                          "a non-empty one-line string (perfkit reads the inventory without a vault password)")
    user = v.get("perfkit_metrics_user", "perfkit")
    if not isinstance(user, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", user):
        raise ConfigError("perfkit_metrics_user", user, "a user name of letters, digits, '_', '.' and '-'")
    return user, password


def _members(data: Mapping[str, Any], group: str, seen: frozenset[str] = frozenset()) -> list[str]:
    """Hosts of ``group``, then of its child groups (as Ansible nests them), each once, in the order
    Ansible lists them."""
    g = data.get(group) or {}
    out = list(g.get("hosts", []))
    for child in g.get("children", []):
        if child not in seen:
            out += _members(data, child, seen | {group})
    return list(dict.fromkeys(out))


def _host(name: str, roles: tuple[str, ...], v: Mapping[str, Any]) -> LabHost:
    where = f"host {name}"
    port = v.get("ansible_port", 22)
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"{where}: ansible_port", port, "a TCP port, 1 .. 65535")
    address = v.get("ansible_host", name)
    if not isinstance(address, str) or not address:
        raise ConfigError(f"{where}: ansible_host", address, "a host name or address")
    user = v.get("ansible_user")
    if user is not None and not isinstance(user, str):
        raise ConfigError(f"{where}: ansible_user", user, "a user name")
    needs_mac = any(r in FRAME_ROLES for r in roles)
    interfaces = _interfaces(where, v.get("interfaces", []), needs_mac)
    dut_cores = _cores(f"{where}: dut_cores", v.get("dut_cores", []))
    if "dut" in roles and not dut_cores:
        raise ConfigError(f"{where}: dut_cores", v.get("dut_cores"), "the CPUs that run the dataplane, e.g. [2, 3]")
    if "dut" in roles and len(interfaces) < 2:
        raise ConfigError(f"{where}: interfaces", [i.name for i in interfaces],
                          "the DUT's data-plane interfaces in cabling order, at least 2")
    if "tester" in roles and not interfaces:
        raise ConfigError(f"{where}: interfaces", [], "the tester's data-plane interfaces in cabling order, at least 1")
    root = v.get("perfkit_root", LabHost.root)
    if not isinstance(root, str) or not root.startswith("/") or "\n" in root:
        raise ConfigError(f"{where}: perfkit_root", root, "an absolute path")
    return LabHost(name, roles, address, port, user, interfaces, dut_cores,
                   _cores(f"{where}: tester_cores", v.get("tester_cores", [])), root, _ssh_options(where, v))


def _ssh_options(where: str, v: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``ssh`` options of Ansible's connection variables, for perfkit's own SSH sessions."""
    out: list[str] = []
    key = v.get("ansible_ssh_private_key_file") or v.get("ansible_private_key_file")
    if key is not None:
        if not isinstance(key, str):
            raise ConfigError(f"{where}: ansible_ssh_private_key_file", "(not shown)", "a file name")
        out += ["-i", os.path.expanduser(key)]
    for name in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        if v.get(name):
            try:
                out += shlex.split(str(v[name]))
            except ValueError:
                raise ConfigError(f"{where}: {name}", "(not shown)", "ssh options as a shell would split them") from None
    return tuple(out)


def _interfaces(where: str, raw: Any, needs_mac: bool) -> tuple[Interface, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: interfaces", raw, "a list of {name, mac, address, peer}, in cabling order")
    out: list[Interface] = []
    for k, item in enumerate(raw):
        i = _interface(f"{where}: interfaces[{k}]", item, needs_mac)
        if i.name in (o.name for o in out):
            raise ConfigError(f"{where}: interfaces[{k}].name", i.name, "a name not used by another interface of the host")
        out.append(i)
    return tuple(out)


def _interface(field_: str, item: Any, needs_mac: bool) -> Interface:
    if not isinstance(item, Mapping):
        raise ConfigError(field_, item, "a mapping {name, mac, address, peer}")
    unknown = set(item) - {"name", "mac", "address", "peer"}
    if unknown:
        raise ConfigError(f"{field_}: key", sorted(unknown)[0], "name, mac, address, peer")
    name, mac, address, peer = (item.get(k) for k in ("name", "mac", "address", "peer"))
    if not isinstance(name, str) or not re.fullmatch(r"[^\s/:]{1,15}", name):
        raise ConfigError(f"{field_}.name", name, "an interface name of 1-15 characters, no space, '/' or ':'")
    if mac is None and needs_mac:
        raise ConfigError(f"{field_}.mac", None, "the interface's MAC address, e.g. 02:00:00:00:00:01 "
                          "(dut and tester hosts need it)")
    if mac is not None and (not isinstance(mac, str) or not MAC_RE.match(mac.lower())):
        raise ConfigError(f"{field_}.mac", mac, "a MAC address, e.g. 02:00:00:00:00:01")
    if peer is not None and not (isinstance(peer, str) and re.fullmatch(r"[^:]+:[^:]+", peer)):
        raise ConfigError(f"{field_}.peer", peer, "the interface at the cable's other end, HOST:INTERFACE")
    return Interface(name, mac.lower() if mac else None, _address(f"{field_}.address", address), peer)


def _address(field_: str, raw: Any) -> str | None:
    """An address with its prefix length, normalized (None: not given)."""
    if raw is None:
        return None
    try:
        if "/" in str(raw):
            return str(ipaddress.ip_interface(raw))
    except ValueError:
        pass
    raise ConfigError(field_, raw, "an IPv4 or IPv6 address with its prefix length, e.g. 198.18.0.1/24")


def _cores(field_: str, raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in raw):
        raise ConfigError(field_, raw, "a list of CPU numbers >= 0, e.g. [2, 3]")
    if len(set(raw)) != len(raw):
        raise ConfigError(field_, raw, "CPU numbers, each once")
    return tuple(raw)


def _check_lab(lab: Lab) -> None:
    """One DUT, something that sends traffic, at most one metrics host, cables that agree."""
    duts = lab.role("dut")
    if len(duts) != 1:
        raise ConfigError("inventory group dut", [h.name for h in duts], "exactly one host")
    if not lab.role("tester") and not lab.role("trex"):
        raise ConfigError("inventory groups tester and trex", [], "at least one host that sends traffic")
    if len(lab.role("metrics")) > 1:
        raise ConfigError("inventory group metrics", [h.name for h in lab.role("metrics")], "at most one host")
    ends = {(h.name, i.name): i.peer for h in lab.hosts for i in h.interfaces}
    for (host, name), peer in ends.items():
        if peer is None:
            continue
        other = tuple(peer.split(":"))
        if other not in ends:
            raise ConfigError(f"host {host}: interface {name}: peer", peer,
                              "an interface of a lab host (HOST:INTERFACE as the inventory names them)")
        back = ends[other]
        if back is not None and back != f"{host}:{name}":
            raise ConfigError(f"host {other[0]}: interface {other[1]}: peer", back,
                              f"{host}:{name}, the interface cabled to it")
