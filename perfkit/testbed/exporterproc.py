"""The testbed's dataplane exporter: the loaded dataplane described for ``perfkit exporter``, and that
command run beside the testbed while it lives.

``DutExport(dataplane, program, testbed_id)`` writes the description
(``perfkit.metrics.exporter.dut_path``: a ``perfkit exporter`` started by hand finds it); with
``targets`` (a metrics stack's ``targets/`` directory) it also starts ``perfkit exporter`` as a child
process that registers there, so the stack's Prometheus scrapes it. The child:

- runs off the DUT cores (``cpus``: its CPU set from the start);
- gets SIGTERM when this process dies, however it dies (``PR_SET_PDEATHSIG``), and stops by itself
  once the dataplane's program is unloaded; it removes its target file on the way out;
- is stopped by ``close()`` (SIGTERM, then SIGKILL), which also removes the target file and the
  description, also after a failure.

``DutExport.lab(descs, address, port, lab_config, cpus)``: a lab's DUT host agent serves its loaded
instances (one description each) the same way, on the host's management address and a fixed port
the lab's Prometheus scrapes (``perfkit.lab.provision``), with no target file.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable

import perfkit
from perfkit.dataplane import Dataplane, DutProgram
from perfkit.errors import MetricsError
from perfkit.metrics import exporter

#: How long the child may take to start serving [s] (Python and perfkit's imports).
START_TIMEOUT = 60.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class DutExport:
    """A loaded dataplane described for the exporter, and the exporter serving it (with ``targets``)."""

    def __init__(self, dataplane: Dataplane, program: DutProgram, testbed_id: str,
                 targets: str | Path | None = None, cpus: Iterable[int] | None = None):
        self._setup([exporter.describe(dataplane, program, testbed_id)], Path(targets) if targets else None)
        if self.targets is not None:
            self._start_or_close(["-m", "perfkit", "exporter", "--listen", "127.0.0.1:0", "--register",
                                  str(self.targets)], cpus)

    @classmethod
    def lab(cls, descs: list[exporter.ExportedDut], address: str, port: int, lab_config: str | Path,
            cpus: Iterable[int] | None = None) -> DutExport:
        """A lab DUT host's instances served at ``http://address:port/metrics`` (``address``: the
        host's management address ``lab_config`` names; the exporter refuses any other)."""
        self = cls.__new__(cls)
        self._setup(descs, None)
        self._start_or_close(["-m", "perfkit.cli.exporter", "--listen", f"{address}:{port}",
                              "--lab-config", str(lab_config)], cpus)
        return self

    def _setup(self, descs: list[exporter.ExportedDut], targets: Path | None) -> None:
        self.descs = descs
        self.desc = descs[0]
        # the paths before the files: whatever cuts the writing short, close() knows what to remove
        self.paths = [exporter.dut_path(d.testbed) for d in descs]
        self.path = self.paths[0]
        self.targets = None
        self.proc: subprocess.Popen[bytes] | None = None
        #: Where the exporter serves (``http://127.0.0.1:PORT/metrics``); None while it does not.
        self.url: str | None = None
        try:
            for d, path in zip(descs, self.paths):
                exporter.save(d, path)
        except BaseException:
            self.close()
            raise
        self.targets = targets

    def _start_or_close(self, args: list[str], cpus: Iterable[int] | None) -> None:
        try:
            self._start(args, list(cpus) if cpus else None)
        except BaseException:
            self.close()
            raise

    def _start(self, args: list[str], cpus: list[int] | None) -> None:
        argv = [sys.executable, *args, *(a for path in self.paths for a in ("--dut", str(path))), "--json"]
        # the same perfkit as this process's, wherever the child starts
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(perfkit.__file__).parent.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr,
                                     env=env, preexec_fn=_die_with_parent)
        if cpus:
            os.sched_setaffinity(self.proc.pid, cpus)   # before it has a second thread: they all inherit it
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT)
        line = self.proc.stdout.readline() if ready else b""
        try:
            self.url = json.loads(line)["url"]
        except (ValueError, KeyError, TypeError):
            self._stderr.seek(0)
            why = self._stderr.read().decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise MetricsError(f"perfkit exporter did not start within {START_TIMEOUT:g} s: {why[0]}") from None

    def close(self) -> None:
        """Stop the exporter and remove its target file and the description (idempotent)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
            self._stderr.close()
        if self.targets is not None:
            exporter.unregister(self.targets, self.desc)
        for path in self.paths:
            path.unlink(missing_ok=True)
