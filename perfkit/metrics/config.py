"""Where the metrics go and come from: the Prometheus and Pushgateway endpoints (``Endpoints``).

``load_endpoints()`` merges, later sources winning:

1. defaults: the local stack's ``endpoints.json`` (written by ``perfkit stack up`` into
   ``$PERFKIT_HOME/stack/``) if there is one, else ``http://127.0.0.1:9090`` / ``:9091``;
2. a YAML or JSON config file: the ``path`` argument, else ``$PERFKIT_METRICS_CONFIG``. Its keys are
   the fields of ``Endpoints`` (``prometheus_url``, ``pushgateway_url``, ``username``, ``password``,
   ``password_file``, ``verify_tls``, ``timeout``, ``scrape_interval``, ``node_selector``), either at
   the top level or under a ``metrics:`` section;
3. environment variables (``ENV_VARS``): ``PERFKIT_PROMETHEUS_URL``, ``PERFKIT_PUSHGATEWAY_URL``,
   ``PERFKIT_METRICS_USER``, ``PERFKIT_METRICS_PASSWORD``, ``PERFKIT_METRICS_PASSWORD_FILE``,
   ``PERFKIT_METRICS_VERIFY_TLS`` (true/false or a CA bundle path), ``PERFKIT_METRICS_TIMEOUT``,
   ``PERFKIT_SCRAPE_INTERVAL``, ``PERFKIT_NODE_SELECTOR``;
4. keyword overrides (what the CLI options give; ``None`` means "not given").

Every value is checked; a bad one raises ``ConfigError`` naming the field (and its source), the value
and what is allowed. The password never appears in ``repr`` or ``to_dict``.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

import yaml

from perfkit.errors import ConfigError
from perfkit.paths import data_dir
from perfkit.yamlload import load_yaml

#: Defaults of the local stack (``perfkit stack up``); a lab sets its own URLs.
DEFAULT_PROMETHEUS_URL = "http://127.0.0.1:9090"
DEFAULT_PUSHGATEWAY_URL = "http://127.0.0.1:9091"
#: The file ``perfkit stack up`` writes with the URLs of the stack it started.
STACK_ENDPOINTS_FILE = "endpoints.json"

ENV_VARS: dict[str, str] = {
    "PERFKIT_PROMETHEUS_URL": "prometheus_url",
    "PERFKIT_PUSHGATEWAY_URL": "pushgateway_url",
    "PERFKIT_METRICS_USER": "username",
    "PERFKIT_METRICS_PASSWORD": "password",
    "PERFKIT_METRICS_PASSWORD_FILE": "password_file",
    "PERFKIT_METRICS_VERIFY_TLS": "verify_tls",
    "PERFKIT_METRICS_TIMEOUT": "timeout",
    "PERFKIT_SCRAPE_INTERVAL": "scrape_interval",
    "PERFKIT_NODE_SELECTOR": "node_selector",
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_SELECTOR_RE = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*,?\s*)*$')


def default_stack_dir() -> Path:
    """``stack`` of perfkit's home (``paths.data_dir``: ``data/stack`` of the working directory by default)."""
    return data_dir() / "stack"


@dataclass(frozen=True)
class Endpoints:
    """The servers perfkit talks to and how."""

    prometheus_url: str = DEFAULT_PROMETHEUS_URL
    """Base URL of Prometheus (``/api/v1/...`` is appended), e.g. ``https://prom.lab:9090/prom``."""
    pushgateway_url: str = DEFAULT_PUSHGATEWAY_URL
    """Base URL of the Pushgateway (``/metrics/job/...`` is appended)."""
    username: str | None = None
    """HTTP basic auth user for both servers (None: no auth)."""
    password: str | None = field(default=None, repr=False)
    """HTTP basic auth password (never printed)."""
    verify_tls: bool | str = True
    """Verify HTTPS certificates: True, False, or the path of a CA bundle."""
    timeout: float = 10.0
    """Per-request timeout [s]."""
    scrape_interval: float = 1.0
    """How often Prometheus scrapes node-exporter [s]; windows shorter than 3 of these are refused."""
    node_selector: str = 'job="node"'
    """PromQL label matchers picking the DUT's node-exporter series, e.g. ``instance="dut1:9100"``."""
    source: str = "defaults"
    """Where the values came from (for messages), e.g. ``defaults < lab.yaml < env``."""

    def __post_init__(self) -> None:
        _check_url("prometheus_url", self.prometheus_url, self.source)
        _check_url("pushgateway_url", self.pushgateway_url, self.source)
        for name in ("prometheus_url", "pushgateway_url"):   # one spelling: no trailing slash
            object.__setattr__(self, name, getattr(self, name).rstrip("/"))
        if self.password is not None and not self.username:
            raise ConfigError("username", self.username,
                              "a user name whenever a password is set (PERFKIT_METRICS_USER)")
        if isinstance(self.verify_tls, str) and not Path(self.verify_tls).is_file():
            raise ConfigError("verify_tls", self.verify_tls,
                              "true, false or the path of an existing CA bundle file")
        if not (isinstance(self.timeout, (int, float)) and 0 < self.timeout <= 600):
            raise ConfigError("timeout", self.timeout, "0 < seconds <= 600")
        if not (isinstance(self.scrape_interval, (int, float)) and 0 < self.scrape_interval <= 3600):
            raise ConfigError("scrape_interval", self.scrape_interval, "0 < seconds <= 3600")
        if not _SELECTOR_RE.match(self.node_selector or ""):
            raise ConfigError("node_selector", self.node_selector,
                              'PromQL label matchers such as job="node", instance=~"dut.*"')

    @property
    def auth(self) -> tuple[str, str] | None:
        """``(user, password)`` for requests, or None."""
        return (self.username, self.password or "") if self.username else None

    def to_dict(self, redact: bool = True) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if redact and d["password"] is not None:
            d["password"] = "***"
        return d


def _check_url(name: str, url: object, source: str) -> None:
    check_url(f"{name} (from {source})", url)


def check_url(field: str, url: object) -> None:
    """Refuse ``url`` unless it is an http(s) URL with a host (a ConfigError naming ``field``)."""
    allowed = "an http:// or https:// URL with a host, e.g. http://prometheus.lab:9090"
    if not isinstance(url, str):
        raise ConfigError(field, url, allowed)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        raise ConfigError(field, url, allowed) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ConfigError(field, url, allowed)


def _parse_bool_or_path(name: str, value: object) -> bool | str:
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    if text and Path(text).is_file():
        return text
    raise ConfigError(name, value, "true, false or the path of an existing CA bundle file")


def _parse_float(name: str, value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(name, value, "a number of seconds") from None


_FIELDS = {f.name for f in dataclasses.fields(Endpoints)} - {"source"} | {"password_file"}


def _normalise(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Check names and convert types of one source's values."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if key not in _FIELDS:
            raise ConfigError(f"metrics config key (in {source})", key, sorted(_FIELDS))
        if key == "verify_tls":
            value = _parse_bool_or_path(f"verify_tls (from {source})", value)
        elif key in ("timeout", "scrape_interval"):
            value = _parse_float(f"{key} (from {source})", value)
        elif key == "password_file":
            p = Path(str(value))
            if not p.is_file():
                raise ConfigError(f"password_file (from {source})", str(value), "a readable file")
            key, value = "password", p.read_text().rstrip("\r\n")
        elif key in ("prometheus_url", "pushgateway_url"):
            _check_url(key, value, source)
            value = str(value).rstrip("/")
        else:
            value = str(value)
        out[key] = value
    return out


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The metrics settings of a YAML/JSON file (top level or its ``metrics:`` section), unchecked."""
    p = Path(path)
    try:
        data = load_yaml(p.read_text(), f"metrics config file {p}")  # a key given twice is refused
    except FileNotFoundError:
        raise ConfigError("metrics config file", str(p), "an existing YAML or JSON file") from None
    except yaml.YAMLError as err:
        raise ConfigError("metrics config file", str(p), f"valid YAML or JSON ({err})") from None
    if data is None:
        return {}
    if isinstance(data, dict) and isinstance(data.get("metrics"), dict):
        data = data["metrics"]
    if not isinstance(data, dict):
        raise ConfigError("metrics config file", str(p), "a mapping of settings (prometheus_url: ...)")
    return data


def load_endpoints(path: str | Path | None = None, env: Mapping[str, str] | None = None,
                   stack_dir: str | Path | None = None, **overrides: Any) -> Endpoints:
    """The effective ``Endpoints``: defaults < config file < environment < ``overrides``."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources = ["defaults"]
    stack_file = Path(stack_dir or default_stack_dir()) / STACK_ENDPOINTS_FILE
    if stack_file.is_file():
        values.update(_normalise(read_config_file(stack_file), str(stack_file)))
        sources = [str(stack_file)]
    path = path or env.get("PERFKIT_METRICS_CONFIG") or None
    if path:
        values.update(_normalise(read_config_file(path), str(path)))
        sources.append(str(path))
    from_env = {ENV_VARS[k]: v for k, v in env.items() if k in ENV_VARS and v != ""}
    if from_env:
        values.update(_normalise(from_env, "environment"))
        sources.append("environment")
    given = {k: v for k, v in overrides.items() if v is not None}
    if given:
        values.update(_normalise(given, "arguments"))
        sources.append("arguments")
    return Endpoints(**values, source=" < ".join(sources))


def write_endpoints_file(path: str | Path, endpoints: Endpoints) -> Path:
    """Write the non-secret part of ``endpoints`` as JSON (what ``stack up`` leaves for the others)."""
    d = endpoints.to_dict()
    d.pop("source")
    if d.pop("password") is not None:
        d.pop("username")   # a password is never written; without it the user name is useless
    p = Path(path)
    p.write_text(json.dumps(d, indent=2) + "\n")
    return p


# -- explaining failures -------------------------------------------------------------------------
def describe_request_error(err: BaseException, endpoints: Endpoints | None = None) -> str:
    """A short human cause for a failed HTTP request (connection refused, TLS, timeout ...)."""
    text = str(err)
    low = text.lower()
    if "connection refused" in low:
        return "connection refused (is the server running and listening on that port?)"
    if "name or service not known" in low or "nodename nor servname" in low or \
            "temporary failure in name resolution" in low or "failed to resolve" in low:
        return "host name not found (DNS)"
    if "certificate verify failed" in low or "ssl" in low and "verify" in low:
        return ("TLS certificate verification failed (set verify_tls / PERFKIT_METRICS_VERIFY_TLS to a CA "
                "bundle, or false)")
    if "wrong version number" in low or "record layer failure" in low:
        return "TLS handshake failed (is it http:// rather than https://?)"
    if "timed out" in low or "timeout" in type(err).__name__.lower():
        t = f" within {endpoints.timeout:g} s" if endpoints else ""
        return f"no answer{t} (timeout)"
    if "invalid url" in low or "no connection adapters" in low or "invalid label" in low:
        return f"malformed URL ({text[:200]})"
    if "remote end closed" in low or "connection reset" in low or "connection aborted" in low:
        return "the server closed the connection (is it https://, or not a server of that kind?)"
    return f"{type(err).__name__}: {text[:300]}"


def describe_http_status(status: int, body: str = "") -> str:
    """A short human cause for an HTTP error status, with the server's own words."""
    hint = {
        401: "unauthorized: wrong or missing basic-auth user/password (PERFKIT_METRICS_USER, "
             "PERFKIT_METRICS_PASSWORD)",
        403: "forbidden: the user may not do this",
        404: "not found: is the base URL right (path prefix, Prometheus vs Pushgateway)?",
        405: "method not allowed: is this the right server?",
        400: "bad request",
        422: "the query could not be executed",
        503: "service unavailable (server starting or shutting down?)",
    }.get(status, "HTTP error")
    body = " ".join(body.split())[:300]
    return f"HTTP {status} {hint}" + (f": {body}" if body else "")
