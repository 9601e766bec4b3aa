"""System knobs: the settings of the DUT's interfaces and kernel that a trial can be run under, and
swept like a frame size (the *tune* step of measure -> analyse -> tune -> measure again).

A knob is ``NAME=VALUE``:

- an ``ethtool -K`` feature of the DUT's ports: ``gro``, ``gso``, ``tso``, ``lro``,
  ``rx-udp-gro-forwarding``, ``rx-gro-list`` (aliases), or any feature as ``ethtool.<feature>``;
  ``on`` or ``off``;
- a per-device NAPI setting of the DUT's ports (sysfs): ``threaded`` (``on`` or ``off``: NAPI
  polls in a kernel thread per queue instead of in softirq context), and the busy-poll settings
  ``napi_defer_hard_irqs`` (a count) and ``gro_flush_timeout`` [ns];
- a queue count or ring size of the DUT's ports, where the driver supports it: ``channels.<rx|tx|
  other|combined>`` (``ethtool -L``) and ``ring.<rx|rx-mini|rx-jumbo|tx>`` (``ethtool -G``);
- a sysctl, ``sysctl.<key>`` (``net.`` keys only): set in the DUT's namespace when the key is one of
  its own, else host-wide (``net.core.busy_poll``, ``net.core.busy_read``);
- how the DUT is set up (``SETUP_KNOBS``), which the testbed's DUT takes when it loads:
  ``steering`` (with several DUT cores, what the software RSS hashes: ``dataplane``, the
  dataplane's own key (``Dataplane.steering``); ``5tuple``, the outer addresses and ports, as a NIC
  does by default; ``none``, every packet to the first DUT core) and ``xdp_mode`` (``native`` or
  ``generic``, the kernel's skb path);
- a dataplane's build option is a scenario parameter (``Param.build``);
  ``perfkit.cli.options`` routes ``--knob`` to it.

``Knobs`` applies them to one testbed's DUT ports (perfkit's own namespaces, so nothing outside the
testbed is touched, but for the host-wide sysctls; in a lab, the DUT host's agent applies them to the
interfaces the inventory names for it, ``perfkit.lab.hostroles``), reads each back (a refusal by the kernel or the
driver is one line naming the knob), and restores every value when it closes. The values before are
on disk (``$PERFKIT_STATE_DIR/knobs/<testbed_id>.json``, fsynced, with the owner) before anything
changes, so ``perfkit clean`` restores them after a SIGKILL (``clean``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from perfkit import owners
from perfkit.errors import ConfigError, TestbedError
from perfkit.testbed import netns

#: Short names of ``ethtool -K`` features (``ethtool -k`` prints the long ones).
FEATURE_ALIASES = {"gro": "generic-receive-offload", "gso": "generic-segmentation-offload",
                   "tso": "tcp-segmentation-offload", "lro": "large-receive-offload",
                   "rx-udp-gro-forwarding": "rx-udp-gro-forwarding", "rx-gro-list": "rx-gro-list"}
#: Per-device sysfs settings (threaded NAPI, busy polling and interrupt deferral,
#: Documentation/networking/napi.rst), with their values: integers, or on/off written as 1/0.
DEVICE_SETTINGS = {"threaded": "on/off", "napi_defer_hard_irqs": "int", "gro_flush_timeout": "int"}
#: ``ethtool -L`` (channels) and ``-G`` (ring) parameters: knob ``channels.rx`` is ``ethtool -L dev rx N``.
#: Each maps a parameter to the label ``ethtool -l``/``-g`` prints it under.
COUNTS = {"channels": {"rx": "RX", "tx": "TX", "other": "Other", "combined": "Combined"},
          "ring": {"rx": "RX", "rx-mini": "RX Mini", "rx-jumbo": "RX Jumbo", "tx": "TX"}}
_COUNT_FLAGS = {"channels": ("-l", "-L"), "ring": ("-g", "-G")}
#: Knobs the DUT takes when it is set up, with their values (the first: as without the knob).
SETUP_KNOBS = {"steering": ("dataplane", "5tuple", "none"), "xdp_mode": ("native", "generic")}
ON_OFF = ("on", "off")
_FEATURE_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
_SYSCTL_RE = re.compile(r"net(\.[A-Za-z0-9_-]+)+")


@dataclass(frozen=True)
class Knob:
    """One knob and the value a trial runs with."""

    name: str
    """As written: ``gro``, ``ethtool.rx-udp-gro-forwarding``, ``sysctl.net.core.busy_poll`` ..."""
    value: str

    @property
    def kind(self) -> str:
        """``ethtool``, ``device``, ``channels``, ``ring``, ``sysctl`` or ``setup``."""
        if self.name in SETUP_KNOBS:
            return "setup"
        if self.name in DEVICE_SETTINGS:
            return "device"
        if self.name.partition(".")[0] in COUNTS:
            return self.name.partition(".")[0]
        return "sysctl" if self.name.startswith("sysctl.") else "ethtool"

    @property
    def target(self) -> str:
        """What is set: the ethtool feature, the sysfs file or the sysctl key."""
        if self.kind == "ethtool":
            return FEATURE_ALIASES.get(self.name, self.name.removeprefix("ethtool."))
        if self.kind in COUNTS:
            return self.name.partition(".")[2]
        return self.name.removeprefix("sysctl.")


def names_allowed() -> str:
    return (", ".join(FEATURE_ALIASES) + ", ethtool.<feature>, threaded (on/off), napi_defer_hard_irqs, "
            "gro_flush_timeout, " + ", ".join(f"{kind}.<{'|'.join(params)}>" for kind, params in COUNTS.items())
            + " (integers), sysctl.net.<key>, " + ", ".join(SETUP_KNOBS))


def check(name: str, value: object) -> Knob:
    """The knob ``name=value``, or a ConfigError naming it."""
    text = str(value).strip()
    if isinstance(value, bool):
        text = "on" if value else "off"
    field_name = f"knob {name}"
    kind, _, param = name.partition(".")
    if name in FEATURE_ALIASES or (name.startswith("ethtool.") and _FEATURE_RE.fullmatch(name[8:])) \
            or DEVICE_SETTINGS.get(name) == "on/off":
        text = {"true": "on", "false": "off"}.get(text.lower(), text.lower())
        if text not in ON_OFF:
            raise ConfigError(field_name, value, "on or off")
    elif name in SETUP_KNOBS:
        if text not in SETUP_KNOBS[name]:
            raise ConfigError(field_name, value, ", ".join(SETUP_KNOBS[name]))
    elif name in DEVICE_SETTINGS:
        if not text.isdigit():
            raise ConfigError(field_name, value, "an integer >= 0")
    elif kind in COUNTS and param in COUNTS[kind]:
        if not text.isdigit():
            raise ConfigError(field_name, value, "an integer >= 0")
    elif name.startswith("sysctl."):
        if not _SYSCTL_RE.fullmatch(name[7:]):
            raise ConfigError("knob", name, "sysctl.net.<key> (perfkit sets network sysctls only)")
        if not text or any(c in text for c in "\n\0"):
            raise ConfigError(field_name, value, "a one-line value")
    else:
        raise ConfigError("knob", name, names_allowed())
    return Knob(name, text)


def check_measurable(knobs: Mapping[str, str]) -> None:
    """Refuse a knob under which the DUT's cost could not be measured, or a ConfigError naming it.

    perfkit measures the DUT on its packet threads, threaded NAPI pinned to the DUT cores. With
    ``threaded=off`` a port polls in softirq context on whichever core raised it (on a veth, the
    sender's: a tester core), where its work would be counted as nobody's."""
    if knobs.get("threaded") == "off":
        raise ConfigError("knob threaded", "off", "on (perfkit measures the DUT's cost on its NAPI threads; without "
                          "them the ports poll in softirq context on the core that raised it, a veth's sender's, "
                          "where the DUT's work is not measured)")


def system_only(knobs: Mapping[str, str], why: str) -> None:
    """Refuse a setup knob (``SETUP_KNOBS``) where the DUT is not set up by perfkit, for ``why``."""
    setup = sorted(set(knobs) & set(SETUP_KNOBS))
    if setup:
        raise ConfigError(f"knob {setup[0]}", knobs[setup[0]], f"a system knob ({why})")


def parse(items: Iterable[str]) -> dict[str, str]:
    """``NAME=VALUE`` texts (``--knob``) as checked knobs, by name."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = str(item).partition("=")
        if not sep or not name.strip():
            raise ConfigError("--knob", item, "NAME=VALUE")
        knob = check(name.strip(), value)
        out[knob.name] = knob.value
    return out


# -- applying and restoring ------------------------------------------------------------------------
@dataclass(frozen=True)
class Port:
    """A DUT port a knob is set on: a device in a namespace."""

    ns: str
    dev: str


def record_path(testbed_id: str) -> Path:
    return owners.STATE_DIR / "knobs" / f"{testbed_id}.json"


@dataclass
class Knobs:
    """``knobs`` set on the DUT ports of testbed ``testbed_id`` until ``close()`` (a context manager)."""

    testbed_id: str
    ports: tuple[Port, ...]
    knobs: Mapping[str, str]
    before: list[dict] = field(default_factory=list)
    """What each setting was: ``{"kind", "ns", "dev", "target", "value"}``, restored by ``close()``."""

    def __post_init__(self) -> None:
        set_here = [k for k in (check(n, v) for n, v in self.knobs.items()) if k.kind != "setup"]
        settings = [(knob, port) for knob in set_here for port in self._ports_of(knob)]
        self.before = [_setting(knob, port, _read(knob, port)) for knob, port in settings]
        if not self.before:
            return
        owners.write_json(record_path(self.testbed_id), {"owner": owners.me(), "netns": owners.netns_id(),
                                                          "settings": self.before})
        try:
            for knob, port in settings:
                _write(knob, port, knob.value)
                got = _read(knob, port)
                if got != knob.value:
                    raise TestbedError(f"knob {knob.name}={knob.value}: {_where(knob, port)} reads back {got} "
                                       "(the kernel or driver did not take it)")
        except BaseException:
            self.close()
            raise

    def _ports_of(self, knob: Knob) -> tuple[Port | None, ...]:
        if knob.kind == "sysctl":
            return (self.ports[0],)  # the DUT's namespace (or the host, for a host-wide key)
        return self.ports

    def close(self) -> list[str]:
        """Give every setting its value back and read it back; forget the record (idempotent).
        Returns what was restored."""
        done = restore(self.before)
        self.before = []
        record_path(self.testbed_id).unlink(missing_ok=True)
        return done

    def __enter__(self) -> Knobs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _setting(knob: Knob, port: Port | None, value: str) -> dict:
    ns, dev = (port.ns, port.dev) if port else (None, None)
    if knob.kind == "sysctl" and port and not _sysctl_in_ns(port.ns, knob.target):
        ns = None  # a host-wide key: not in a namespace's own table
    return {"kind": knob.kind, "name": knob.name, "ns": ns, "dev": dev if knob.kind != "sysctl" else None,
            "target": knob.target, "value": value}


def _as_knob_port(s: Mapping) -> tuple[Knob, Port | None]:
    return Knob(s["name"], s["value"]), (Port(s["ns"], s["dev"] or "") if s["ns"] or s["dev"] else None)


def restore(settings: list[dict]) -> list[str]:
    """Set each setting back to its value; one line per setting restored (a port that is gone with
    its namespace needs nothing)."""
    out = []
    for s in reversed(settings):
        knob, port = _as_knob_port(s)
        if port is not None and port.ns and not netns.exists(port.ns):
            continue
        if port is not None and port.dev and not _dev_in_ns(port):
            continue
        _write(knob, port, s["value"])
        got = _read(knob, port)
        out.append(f"knob {knob.name} on {_where(knob, port)}: {got}"
                   + ("" if got == s["value"] else f" (wanted {s['value']}: NOT restored)"))
    return out


def clean(testbed_id: str) -> list[str]:
    """``perfkit clean``: restore what the knobs of ``testbed_id`` changed (their owner is gone).
    A record written in another network namespace is left to a clean there, while that namespace
    exists; once it is gone, its devices and their settings went with it, and so does the record."""
    path = record_path(testbed_id)
    rec = owners.read_json(path) or {}
    if owners.elsewhere(rec):
        return []
    if rec.get("netns", owners.netns_id()) != owners.netns_id():
        path.unlink(missing_ok=True)
        return []
    done = restore(list(rec.get("settings", [])))
    path.unlink(missing_ok=True)
    return done


def records() -> list[str]:
    """Testbed ids with a knob record."""
    d = owners.STATE_DIR / "knobs"
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


# -- reading and writing one setting ---------------------------------------------------------------
def _where(knob: Knob, port: Port | None) -> str:
    if knob.kind == "sysctl":
        return f"{knob.target} ({'namespace ' + port.ns if port and port.ns else 'host-wide'})"
    assert port is not None
    return f"{port.dev} {knob.kind} {knob.target}" if knob.kind in COUNTS else f"{port.dev} {knob.target}"


def _dev_in_ns(port: Port) -> bool:
    return bool(netns.run(port.ns, "sh", "-c", f"test -e /sys/class/net/{port.dev} && echo y", check=False).strip())


def _sysctl_in_ns(ns: str, key: str) -> bool:
    path = "/proc/sys/" + key.replace(".", "/")
    return bool(netns.run(ns, "sh", "-c", f"test -e {path} && echo y", check=False).strip())


def _read(knob: Knob, port: Port | None) -> str:
    if knob.kind == "ethtool":
        assert port is not None
        out = netns.run(port.ns, "ethtool", "-k", port.dev)
        m = re.search(rf"^\s*{re.escape(knob.target)}: (on|off)", out, re.M)
        if not m:
            raise ConfigError(f"knob {knob.name}", knob.target, f"a feature `ethtool -k {port.dev}` lists")
        return m.group(1)
    if knob.kind == "device":
        assert port is not None
        text = netns.run(port.ns, "cat", f"/sys/class/net/{port.dev}/{knob.target}").strip()
        return {"0": "off", "1": "on"}.get(text, text) if DEVICE_SETTINGS[knob.name] == "on/off" else text
    if knob.kind in COUNTS:
        assert port is not None
        return _read_count(knob, port)
    ns = port.ns if port and port.ns and _sysctl_in_ns(port.ns, knob.target) else None
    out = netns.run(ns, "sysctl", "-n", knob.target, check=False)
    if not out.strip() and not Path("/proc/sys/" + knob.target.replace(".", "/")).exists():
        raise ConfigError(f"knob {knob.name}", knob.target, "a sysctl this kernel has")
    return " ".join(out.split())


def _write(knob: Knob, port: Port | None, value: str) -> None:
    try:
        if knob.kind == "ethtool":
            assert port is not None
            netns.run(port.ns, "ethtool", "-K", port.dev, knob.target, value)
        elif knob.kind == "device":
            assert port is not None
            number = int({"off": "0", "on": "1"}.get(value, value))
            netns.run(port.ns, "sh", "-c", f"echo {number} > /sys/class/net/{port.dev}/{knob.target}")
        elif knob.kind in COUNTS:
            assert port is not None
            netns.run(port.ns, "ethtool", _COUNT_FLAGS[knob.kind][1], port.dev, knob.target, value)
        else:
            ns = port.ns if port and port.ns and _sysctl_in_ns(port.ns, knob.target) else None
            netns.run(ns, "sysctl", "-qw", f"{knob.target}={value}")
    except TestbedError as err:
        raise TestbedError(f"knob {knob.name}={value} refused on {_where(knob, port)}: "
                           f"{' '.join(str(err).split())[-200:]}") from None


def _read_count(knob: Knob, port: Port) -> str:
    """The current value of an ``ethtool -L``/``-G`` parameter (``ethtool -l``/``-g``'s "Current
    hardware settings")."""
    flag = _COUNT_FLAGS[knob.kind][0]
    try:
        out = netns.run(port.ns, "ethtool", flag, port.dev)
    except TestbedError as err:
        raise TestbedError(f"knob {knob.name} refused on {port.dev}: its driver has no {knob.kind} settings "
                           f"(ethtool {flag}: {' '.join(str(err).split())[-120:]})") from None
    current = out.partition("Current hardware settings:")[2]
    label = COUNTS[knob.kind][knob.target]
    m = re.search(rf"^{re.escape(label)}:\s*(\S+)", current, re.M)
    if not m or not m.group(1).isdigit():
        raise TestbedError(f"knob {knob.name} refused on {port.dev}: its driver does not offer "
                           f"{knob.target} (ethtool {flag} reads {m.group(1) if m else 'nothing'})")
    return m.group(1)
