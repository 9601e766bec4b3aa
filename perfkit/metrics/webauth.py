"""Basic auth for perfkit's own HTTP servers, read from the web config Prometheus's exporters read.

The file is exporter-toolkit's ``--web.config.file`` format (the one ``perfkit lab provision`` writes
for node-exporter, the Pushgateway and Prometheus on a lab's hosts)::

    basic_auth_users:
      perfkit: $2b$10$...      # a bcrypt hash

Only ``basic_auth_users`` is read; TLS settings in the file are refused rather than ignored, so a
server never serves in clear what its configuration says is encrypted. A request without one of the
users' names and passwords gets 401 with a ``WWW-Authenticate`` challenge, as exporter-toolkit
answers. A checked name and password are remembered (a SHA-256 of them, in memory) so that a scrape
each second does not cost a bcrypt round each time.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import yaml

from perfkit.errors import ConfigError

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def load_users(path: str | Path) -> dict[str, str]:
    """``basic_auth_users`` of the web config at ``path``: user -> bcrypt hash; ``ConfigError``
    naming ``web-config`` when the file is not one."""
    allowed = "a web config file with basic_auth_users: {user: bcrypt hash} (exporter-toolkit's format)"
    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        raise ConfigError("web-config", str(path), allowed) from None
    users = doc.get("basic_auth_users") if isinstance(doc, dict) else None
    if set(doc) - {"basic_auth_users"} or not isinstance(users, dict) or not users or not all(
            isinstance(u, str) and isinstance(h, str) and h.startswith("$2") for u, h in users.items()):
        raise ConfigError("web-config", str(path), allowed + "; nothing else (no TLS settings)")
    return dict(users)


class BasicAuth:
    """A WSGI app that passes a request to ``app`` only with one of ``users``' names and passwords."""

    def __init__(self, app: WsgiApp, users: Mapping[str, str]):
        self.app = app
        self.users = dict(users)
        self._good: set[bytes] = set()
        self._lock = threading.Lock()

    def check(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header names a user and that user's password."""
        import bcrypt   # only a server with users needs it
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, sep, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep or user not in self.users:
            return False
        key = hashlib.sha256(f"{user}\0{password}\0{self.users[user]}".encode()).digest()
        with self._lock:
            if key in self._good:
                return True
        if not bcrypt.checkpw(password.encode(), self.users[user].encode()):
            return False
        with self._lock:
            self._good.add(key)
        return True

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if self.check(environ.get("HTTP_AUTHORIZATION")):
            return self.app(environ, start_response)
        start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                            ("WWW-Authenticate", 'Basic realm="perfkit"')])
        return [b"Unauthorized\n"]
