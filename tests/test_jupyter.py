"""``make jupyter`` / ``perfkit jupyter``: JupyterLab on notebooks/, 127.0.0.1 only, a token per start, a clean stop.

The real JupyterLab of the .venv is started on a free port as ``make jupyter`` starts it (a process of
its own), asked for the notebooks with and without the token, then stopped with SIGTERM or SIGINT
(Ctrl-C): the command exits 0, the server's processes are gone and the port is free again.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import requests

from perfkit.metrics.servers import free_port
from tests.conftest import ROOT

#: Readiness deadline (JupyterLab's first start on a busy 2-CPU machine can take a while).
READY_SECONDS = 180


def _start(tmp_path: Path):
    port = free_port("127.0.0.1")
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "perfkit", "jupyter", "--port", str(port), "--json"],
                            stdout=subprocess.PIPE, stderr=log, cwd=ROOT)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        info = json.loads(lines.get(timeout=READY_SECONDS))
    except queue.Empty:
        proc.kill()
        proc.wait()
        raise AssertionError(f"perfkit jupyter printed no URL: {(tmp_path / 'lab.log').read_text()[-2000:]}")
    return proc, info


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:      # a zombie is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _port_free(port: int) -> bool:
    """Nothing listens on ``port`` and a server could listen there again (as servers do, with
    SO_REUSEADDR: the connections the stopped server closed may linger in TIME_WAIT)."""
    if any(_listening(port)):
        return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def _stopped_cleanly(proc: subprocess.Popen, info: dict, sig: int) -> None:
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == 0
    assert not _alive(info["pid"]), "the JupyterLab server is still running"
    assert _port_free(info["port"])


@pytest.fixture()
def lab(tmp_path):
    proc, info = _start(tmp_path)
    try:
        yield proc, info
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if _alive(info["pid"]):
            os.killpg(info["pid"], signal.SIGKILL)


def test_lab_serves_the_notebooks_with_its_token_only_and_stops_cleanly(lab, tmp_path):
    """A lab serves the notebooks with its token only, on loopback, and stops cleanly on SIGTERM; the
    next start has another token (the first one's is refused) and stops cleanly on Ctrl-C (SIGINT).
    (One test: each start of JupyterLab takes seconds.)"""
    proc, info = lab
    token, base = info["token"], info["base_url"]
    assert base == f"http://127.0.0.1:{info['port']}" and len(token) >= 32
    assert info["url"] == f"{base}/lab/tree/experiment.ipynb?token={token}"
    assert Path(info["root_dir"]) == ROOT / "notebooks"
    # with the token (query or header): the notebooks, experiment.ipynb among them
    listing = requests.get(f"{base}/api/contents", params={"token": token}, timeout=30)
    assert listing.status_code == 200
    names = {c["name"] for c in listing.json()["content"]}
    assert {"experiment.ipynb", "throughput.ipynb", "index.ipynb"} <= names
    nb = requests.get(f"{base}/api/contents/experiment.ipynb", headers={"Authorization": f"token {token}"}, timeout=30)
    assert nb.status_code == 200 and nb.json()["type"] == "notebook"
    assert requests.get(info["url"], timeout=30).status_code == 200          # the page the URL opens
    # without it, or with another: refused (the API answers 403; the lab page redirects to the login)
    assert requests.get(f"{base}/api/contents", timeout=30).status_code == 403
    assert requests.get(f"{base}/api/contents", params={"token": token[::-1]}, timeout=30).status_code == 403
    page = requests.get(f"{base}/lab/tree/experiment.ipynb", timeout=30, allow_redirects=False)
    assert page.status_code == 302 and page.headers["Location"].startswith("/login")
    # only on loopback
    assert list(_listening(info["port"])) == ["0100007F"] and not _listens_on_other_addresses(info["port"])
    _stopped_cleanly(proc, info, signal.SIGTERM)
    # the next start: another token; Ctrl-C
    proc2, info2 = _start(tmp_path)
    try:
        assert info2["token"] != info["token"]
        assert requests.get(f"{info2['base_url']}/api/contents", params={"token": info["token"]},
                            timeout=30).status_code == 403
        _stopped_cleanly(proc2, info2, signal.SIGINT)
    finally:
        if proc2.poll() is None:
            proc2.kill()
            proc2.wait()


def _listening(port: int):
    """The local addresses (hex, as in /proc/net/tcp{,6}) of sockets listening on ``port``."""
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:
                yield addr


def _listens_on_other_addresses(port: int):
    """Listening sockets on ``port`` bound to anything but 127.0.0.1."""
    return [a for a in _listening(port) if a != "0100007F"]
