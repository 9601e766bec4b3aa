"""The controller's end of ``perfkit agent``: an SSH session to a lab host running the agent.

``AgentSession(host)`` starts ``ssh`` with the inventory's connection options (a key; SSH never
asks for a password: ``BatchMode``) and the agent of the host's ``perfkit_root``, then
``call(op, **args)`` sends one request and returns its result (an error answer raises
``PerfkitError`` with the agent's one line). ``close()`` says ``bye`` and waits; if the controller
dies instead, the session's end makes the agent take everything down (``perfkit.lab.agent``).
A host SSH cannot reach is refused in one line: the host, its address and SSH's reason.
"""
from __future__ import annotations

import json
import select
import subprocess
import time
from typing import Any

from perfkit.errors import PerfkitError
from perfkit.lab.inventory import LabHost

#: Seconds to connect and get the agent's hello.
CONNECT_TIMEOUT = 20.0
#: Seconds an operation may take.
CALL_TIMEOUT = 60.0


def ssh_argv(host: LabHost, command: str) -> list[str]:
    """The ``ssh`` command line that runs ``command`` on ``host``."""
    target = f"{host.user}@{host.address}" if host.user else host.address
    return ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={int(CONNECT_TIMEOUT / 2)}",
            "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3", *host.ssh_options,
            "-p", str(host.port), "-T", target, command]


class AgentSession:
    """One agent on one host, over one SSH session."""

    def __init__(self, host: LabHost):
        self.host = host
        venv = f"{host.root}/venv/bin/python"
        self.proc = subprocess.Popen(ssh_argv(host, f"exec {venv} -m perfkit.lab.agent --config {host.root}/etc/lab.json"),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self._next = 0
        try:
            self.hello = self.call("hello", timeout=CONNECT_TIMEOUT)
        except BaseException:
            self.kill()
            raise

    def call(self, op: str, timeout: float = CALL_TIMEOUT, **args: Any) -> Any:
        """Send ``op`` with ``args``; its result, or PerfkitError with the agent's reason."""
        assert self.proc.stdin and self.proc.stdout
        self._next += 1
        try:
            self.proc.stdin.write(json.dumps({"id": self._next, "op": op, "args": args}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self._gone() from None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PerfkitError(f"host {self.host.name}: the agent did not answer {op} within {timeout:g} s")
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 1.0))
            if ready:
                line = self.proc.stdout.readline()
                if not line:
                    raise self._gone()
                answer = json.loads(line)
                if answer.get("id") != self._next:
                    continue
                if not answer.get("ok"):
                    raise PerfkitError(answer.get("error", "?"))
                return answer.get("result")

    def _gone(self) -> PerfkitError:
        """Why the session ended: SSH's reason (exit 255) or the agent's last words."""
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
        err = (self.proc.stderr.read() if self.proc.stderr else "").strip().splitlines()
        reason = " ".join(err[-1].split()) if err else f"exit {self.proc.returncode}"
        if self.proc.returncode == 255:
            return PerfkitError(f"host {self.host.name} ({self.host.address}:{self.host.port}) is unreachable: {reason}")
        return PerfkitError(f"host {self.host.name}: the agent ended: {reason}")

    def close(self) -> None:
        """``bye`` (the agent unloads and exits), then the session ends. Idempotent."""
        if self.proc.poll() is None:
            try:
                self.call("bye", timeout=15)
            except (PerfkitError, OSError, ValueError):
                pass
            try:
                self.proc.stdin.close() if self.proc.stdin else None
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                self.kill()

    def kill(self) -> None:
        """End the SSH session at once (the agent takes its things down when it sees the end)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

