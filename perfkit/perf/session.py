"""One perf process on the DUT cores around a trial: what ``perf record`` (``perfkit.perf.record``)
and ``perf stat`` (``perfkit.perf.stat``) share.

perf starts with its events disabled (``-D -1``) and a control pipe (``--control fd:...``);
``enable`` returns once perf acknowledged it, and ``finish`` sends ``disable`` (acknowledged) the
moment the trial ends, then SIGINT, so that what perf counted covers the trial and nothing of its
start-up or shut-down. perf runs in its own session (Ctrl-C reaches perfkit, which stops it) and dies
with its parent (``setpriv --pdeathsig KILL``). Its files (stderr, perf.data) live in a temporary
directory with an owner record; the next session removes those of dead owners
(``remove_stale_dirs``).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Self

from perfkit import owners
from perfkit.errors import ConfigError
from perfkit.perf.tools import PerfError

#: Temporary directories of perf sessions (perf.data, perf's stderr, the owner record).
TMP_PREFIX = "perfkit-perf-"
OWNER_FILE = "owner.json"
#: How long perf may take to start (synthesising the tasks of a busy host) and to stop [s].
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


def remove_stale_dirs() -> list[Path]:
    """Remove the temporary directories of sessions whose process died without cleaning up (SIGKILL,
    SIGTERM without a handler); returns them."""
    gone = []
    for d in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*"):
        try:
            owner = json.loads((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            owner = None
        if owner is not None and owners.alive(owner):
            continue
        try:
            if owner is None and time.time() - d.stat().st_mtime < 60:
                continue      # being created just now
        except OSError:
            continue          # removed meanwhile
        shutil.rmtree(d, ignore_errors=True)
        gone.append(d)
    return gone


def perf_processes(command: str = "record") -> list[int]:
    """PIDs of running ``perf <command>`` processes (any owner): what a session must not leave behind."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if len(argv) > 1 and os.path.basename(argv[0]).startswith(b"perf") and argv[1] == command.encode():
                pids.append(int(entry))
    return pids


def check_cpus(cpus: Iterable[int]) -> list[int]:
    """``cpus`` sorted, or a ConfigError naming them."""
    given = list(cpus)
    ncpu = os.cpu_count() or 1
    out = sorted({int(c) for c in given})
    if not out or any(not 0 <= c < ncpu for c in out):
        raise ConfigError("cpus", given, f"CPUs of 0 .. {ncpu - 1}")
    return out


class PerfSession:
    """A ``perf <command>`` process, its events enabled between ``launch`` and ``finish``."""

    command = "record"
    #: What perf does once enabled, for messages ("perf record could not start recording CPUs [1]").
    activity = "recording"

    def __init__(self, cpus: Iterable[int]):
        self.cpus = check_cpus(cpus)
        self.pid: int | None = None
        """The perf process's PID while it runs (and after, for the record)."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._ctl: int | None = None
        self._ack: int | None = None

    # context manager: start on entry; on a clean exit keep what stop() gives, else only clean up
    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.keep(self.stop())
        else:
            self.abort()

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> Any:
        raise NotImplementedError

    def keep(self, result: Any) -> None:
        """Store what a clean ``stop`` gave (``PerfRecorder.profile``, ``PerfCounter.counts``)."""
        raise NotImplementedError

    def launch(self, setpriv: str, argv: list[str]) -> None:
        """Start ``argv`` (perf and its options; the control options are added) with its events
        disabled, in the session's directory (``workdir``), then enable them; returns when perf
        acknowledged."""
        if self._proc is not None:
            raise PerfError(f"this perf {self.command} is already running")
        remove_stale_dirs()
        self._dir = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
        (self._dir / OWNER_FILE).write_text(json.dumps(owners.me()))
        ctl_r, self._ctl = os.pipe()
        self._ack, ack_w = os.pipe()
        cmd = [setpriv, "--pdeathsig", "KILL", "--", *argv, "-D", "-1", "--control", f"fd:{ctl_r},{ack_w}"]
        try:
            with open(self._dir / "stderr", "wb") as err:
                self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                              pass_fds=(ctl_r, ack_w), cwd=self._dir,
                                              start_new_session=True)   # Ctrl-C reaches us, and we stop perf
            self.pid = self._proc.pid
        except BaseException:
            os.close(ctl_r)
            os.close(ack_w)
            self._cleanup()
            raise
        os.close(ctl_r)
        os.close(ack_w)
        try:
            self._command("enable", START_TIMEOUT)
        except BaseException:
            self.abort()
            raise

    def disable(self) -> None:
        """Stop counting (acknowledged): the trial is over."""
        self._command("disable", STOP_TIMEOUT)

    def finish(self) -> None:
        """After ``disable``: stop perf (SIGINT) and check that it ended well."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGINT)
        try:
            rc = self._proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise PerfError(f"perf {self.command} did not stop within {STOP_TIMEOUT:g} s of SIGINT; killed it") from None
        if rc not in (0, -signal.SIGINT, 128 + signal.SIGINT):
            raise PerfError(f"perf {self.command} failed (exit {rc}): {self.stderr_line()}")

    def abort(self) -> None:
        """Kill perf (SIGINT, then SIGKILL after a second) and remove its files; never raises."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGINT, 1.0), (signal.SIGKILL, 5.0)):
                try:
                    proc.send_signal(sig)
                    proc.wait(wait)
                    break
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    continue
        self._cleanup()

    def close(self) -> None:
        """Forget the finished process and remove its files."""
        self._proc = None
        self._cleanup()

    @property
    def running(self) -> bool:
        return self._proc is not None

    @property
    def workdir(self) -> Path:
        assert self._dir is not None
        return self._dir

    def stderr_text(self) -> str:
        try:
            return (self._dir / "stderr").read_text(errors="replace") if self._dir else ""
        except OSError:
            return ""

    def stderr_line(self) -> str:
        return first_line(self.stderr_text().encode())

    # -- helpers -----------------------------------------------------------------------------------------
    def _command(self, cmd: str, timeout: float) -> None:
        """Send a control command to perf and wait for its ``ack``; a ``PerfError`` if perf died."""
        assert self._proc is not None and self._ctl is not None and self._ack is not None
        try:
            os.write(self._ctl, cmd.encode() + b"\n")
        except BrokenPipeError:
            pass   # perf is gone: the wait below says why
        deadline = time.monotonic() + timeout
        reply = b""
        while b"\n" not in reply:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PerfError(f"perf {self.command} did not acknowledge '{cmd}' within {timeout:g} s")
            ready, _, _ = select.select([self._ack], [], [], min(left, 0.2))
            if ready:
                chunk = os.read(self._ack, 64)
                if not chunk:
                    break
                reply += chunk
            elif self._proc.poll() is not None:
                break
        if not reply.startswith(b"ack"):
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            what = f"start {self.activity} CPUs {self.cpus}" if cmd == "enable" else f"'{cmd}'"
            raise PerfError(f"perf {self.command} could not {what} (exit {self._proc.returncode}): "
                            f"{self.stderr_line()}")

    def _cleanup(self) -> None:
        # dropped before closed: after an interrupt, a second close could hit another file's number
        fds, self._ctl, self._ack = (self._ctl, self._ack), None, None
        for fd in fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def first_line(raw: bytes) -> str:
    """perf's first message line (with the next one when it only says ``Error:``), at most 200 characters."""
    lines = [" ".join(ln.split()) for ln in raw.decode(errors="replace").splitlines() if ln.strip()]
    if not lines:
        return "no output"
    text = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
    return text[:200]
