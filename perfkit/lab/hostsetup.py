"""The steps of provisioning that run on a lab host, idempotent, each with a dry run.

``perfkit lab provision``'s playbook (``perfkit/lab/playbooks/provision.yml``) runs them on the
host, after it installed perfkit there, as ``python -m perfkit.lab.hostsetup STEP ... [--check]``.
A step changes only what is not as it should be and prints one ``CHANGED: what`` line per change
(``--check``: per change it would make), so that a second provisioning reports ``changed=0``:

- ``bpffs``: bpffs mounted on ``/sys/fs/bpf``;
- ``bpf``: perfkit's BPF objects built on the host, against its own kernel (``make bpf``);
- ``nic IFACE... --cores C...``: receive channels (one per core where the driver has channels),
  the interfaces' IRQs on those cores, threaded NAPI;
- ``daemon NAME --pidfile F [--config F] -- ARGV``: a server running as ``ARGV`` (restarted
  when its command line or configuration changed);
- ``facts IFACE...``: prints the host's facts as JSON (kernel, CPU model, SMT, governor, each
  interface's driver and firmware): what a run records of the host it measured on.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BPFFS = Path("/sys/fs/bpf")


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


# -- steps -----------------------------------------------------------------------------------------
def bpffs(check: bool) -> list[str]:
    if _sh("mountpoint", "-q", str(BPFFS), check=False).returncode == 0:
        return []
    if not check:
        _sh("mount", "-t", "bpf", "bpf", str(BPFFS))
    return [f"mounted bpffs on {BPFFS}"]


def bpf(check: bool, checkout: Path) -> list[str]:
    """``make bpf`` in the checkout perfkit runs from, when an object is missing or out of date."""
    if _sh("make", "-C", str(checkout), "-q", "bpf", check=False).returncode == 0:
        return []
    if not check:
        _sh("make", "-C", str(checkout), "-s", "bpf")
    return [f"built the BPF objects in {checkout / 'build' / 'bpf'} for kernel {platform.release()}"]


def channels(iface: str) -> dict[str, int]:
    """``ethtool -l``'s current settings (empty when the driver has no channels)."""
    proc = _sh("ethtool", "-l", iface, check=False)
    current = proc.stdout.split("Current hardware settings:")[-1] if proc.returncode == 0 else ""
    return {k.lower(): int(v) for k, v in re.findall(r"^(RX|TX|Combined):\s+(\d+)", current, re.M)}


def irqs(iface: str) -> list[int]:
    """The IRQs ``/proc/interrupts`` names after ``iface`` (none on a veth)."""
    text = Path("/proc/interrupts").read_text()
    return [int(m.group(1)) for m in re.finditer(rf"^\s*(\d+):.*\b{re.escape(iface)}(?:[-@:]\S*)?\s*$", text, re.M)]


def nic(check: bool, ifaces: list[str], cores: list[int]) -> list[str]:
    changes = []
    for iface in ifaces:
        if not Path(f"/sys/class/net/{iface}").exists():
            raise SystemExit(f"interface {iface}: no such interface on this host")
        ch, want = channels(iface), len(cores)
        kind = "combined" if ch.get("combined") else "rx" if "rx" in ch else None
        if kind and ch[kind] != want:
            if not check:
                _sh("ethtool", "-L", iface, kind, str(want))
            changes.append(f"{iface}: {kind} channels {ch[kind]} -> {want}")
        mask = ",".join(map(str, cores))
        for irq in irqs(iface):
            path = Path(f"/proc/irq/{irq}/smp_affinity_list")
            if _cpus(path.read_text()) != set(cores):
                if not check:
                    path.write_text(mask)
                changes.append(f"{iface}: IRQ {irq} on CPUs {mask}")
        threaded = Path(f"/sys/class/net/{iface}/threaded")
        # a veth has NAPI only while an XDP program is attached: the agent turns it on then
        if threaded.exists() and threaded.read_text().strip() != "1" and _driver(iface) != "veth":
            if not check:
                threaded.write_text("1")
            changes.append(f"{iface}: threaded NAPI")
    return changes


def _driver(iface: str) -> str | None:
    link = Path(f"/sys/class/net/{iface}/device/driver")
    if link.exists():
        return link.resolve().name
    m = re.search(r"^driver:\s*(\S+)", _sh("ethtool", "-i", iface, check=False).stdout, re.M)
    return m.group(1) if m else None


def _cpus(text: str) -> set[int]:
    out: set[int] = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        if lo:
            out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def daemon(check: bool, name: str, pidfile: Path, argv: list[str], config: Path | None) -> list[str]:
    """``argv`` running in the background, its pid in ``pidfile`` beside the hash of its command line
    and configuration; restarted when that hash changed."""
    digest = hashlib.sha256(json.dumps(argv).encode() + (config.read_bytes() if config and config.exists() else b"")).hexdigest()
    state = _read_pidfile(pidfile)
    alive = state is not None and _alive(state["pid"], argv[0])
    if alive and state["digest"] == digest:
        return []
    change = f"restarted {name} (command line or configuration changed)" if alive else f"started {name}"
    if check:
        return [change]
    if alive:
        os.kill(state["pid"], signal.SIGTERM)
        for _ in range(100):
            if not _alive(state["pid"], argv[0]):
                break
            time.sleep(0.05)
    log = open(pidfile.with_suffix(".log"), "ab")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    time.sleep(0.3)
    if proc.poll() is not None:
        tail = pidfile.with_suffix(".log").read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise SystemExit(f"{name} exited at once: {tail[0]}")
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(json.dumps({"pid": proc.pid, "digest": digest, "argv": argv}))
    return [change]


def _read_pidfile(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else None
    except (OSError, ValueError):
        return None


def _alive(pid: int, exe: str) -> bool:
    try:
        return os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(exe) and \
            Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def facts(ifaces: list[str]) -> dict[str, Any]:
    """What a run records of a host: kernel, CPU, SMT, frequency governor, NIC drivers and firmware."""
    cpuinfo = _read("/proc/cpuinfo")
    model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
    out: dict[str, Any] = {
        "hostname": platform.node(), "kernel": platform.release(), "machine": platform.machine(),
        "cpu_model": model.group(1).strip() if model else None, "cpus": os.cpu_count(),
        "smt": _read("/sys/devices/system/cpu/smt/active").strip() or None,
        "governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor").strip() or None,
        "interfaces": {},
    }
    for iface in ifaces:
        info = dict(re.findall(r"^([\w-]+):[ \t]*(.*)$", _sh("ethtool", "-i", iface, check=False).stdout, re.M))
        out["interfaces"][iface] = {"driver": info.get("driver") or None, "driver_version": info.get("version") or None,
                                    "firmware": info.get("firmware-version") or None,
                                    "bus": info.get("bus-info") or None, "channels": channels(iface)}
    return out


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


# -- command line ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perfkit.lab.hostsetup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="change nothing, say what would change")
    sub = p.add_subparsers(dest="step", required=True)
    sub.add_parser("bpffs")
    sub.add_parser("bpf")
    n = sub.add_parser("nic")
    n.add_argument("interfaces", nargs="+")
    n.add_argument("--cores", type=int, nargs="+", required=True)
    d = sub.add_parser("daemon")
    d.add_argument("name")
    d.add_argument("--pidfile", type=Path, required=True)
    d.add_argument("--config", type=Path)
    f = sub.add_parser("facts")
    f.add_argument("interfaces", nargs="*")
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.step == "facts":
        print(json.dumps(facts(args.interfaces), sort_keys=True))
        return 0
    if args.step == "bpffs":
        changes = bpffs(args.check)
    elif args.step == "bpf":
        from perfkit.paths import CHECKOUT
        if CHECKOUT is None:
            raise SystemExit("perfkit runs from no checkout here: its BPF objects are compiled on first use")
        changes = bpf(args.check, CHECKOUT)
    elif args.step == "nic":
        changes = nic(args.check, args.interfaces, args.cores)
    else:
        if not command:
            raise SystemExit("daemon: no command line after --")
        changes = daemon(args.check, args.name, args.pidfile, command, args.config)
    for c in changes:
        print(f"CHANGED: {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
