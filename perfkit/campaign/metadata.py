"""What a run records about where and with what it ran: host, kernel, CPU, perfkit, BPF objects.

``host_facts()`` returns::

    host        socket.gethostname()
    kernel      uname -r
    os          PRETTY_NAME of /etc/os-release
    cpu_model   "model name" of /proc/cpuinfo (or the machine type)
    cpus        CPUs this process may run on; cpus_online: os.cpu_count()
    python      the interpreter version
    perfkit     {"version", "git_sha" (short), "git_sha_full", "git_dirty"}
    bpf_objects {"build/bpf/<program>.o": "<sha256>", ...} (paths as ``paths.shown`` gives them): what
                the checkout had built when the run started; each trial's ``objects`` are the hashes of
                the objects it loaded (cached variants, objects built on first use, a lab host's)

A run's metadata adds ``dataplanes`` (``perfkit.provenance.dataplane_source``: each dataplane's
module and ``package==version``, or its description file and that file's sha256).
"""
from __future__ import annotations

import hashlib
import os
import platform
import socket
from pathlib import Path
from typing import Any

from perfkit.paths import BUILD_DIR, shown
from perfkit.version import perfkit_version

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.system()


def bpf_object_hashes(build_dir: Path | None = None) -> dict[str, str]:
    """sha256 of every built object (``build/bpf/*.o`` of the checkout, keys relative to it)."""
    d = build_dir or BUILD_DIR
    out = {}
    for p in sorted(d.glob("*.o")) if d.is_dir() else []:
        out[shown(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def host_facts() -> dict[str, Any]:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cpus = os.cpu_count() or 1
    return {"host": socket.gethostname(), "kernel": platform.release(), "os": os_release(),
            "cpu_model": cpu_model(), "cpus": cpus, "cpus_online": os.cpu_count(),
            "python": platform.python_version(), "perfkit": perfkit_version(),
            "bpf_objects": bpf_object_hashes()}
