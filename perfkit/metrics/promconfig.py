"""The configuration files of a local metrics stack: ``prometheus.yml`` (what Prometheus scrapes, and
how often: node-exporter, the Pushgateway and the dataplane exporters that register a target file in
the stack's ``targets/`` directory, ``perfkit.metrics.exporter``) and, with basic auth,
``web-config.yml`` (the servers' users, a bcrypt hash) and the ``scrape-password`` Prometheus
scrapes with."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from perfkit.errors import MetricsError

#: How often Prometheus scrapes node-exporter and the Pushgateway [s].
SCRAPE_INTERVAL = 1.0
WEB_CONFIG_FILE = "web-config.yml"
PASSWORD_FILE = "scrape-password"
#: The stack's directory of file_sd target files: a running ``perfkit exporter`` writes one there.
TARGETS_DIR = "targets"
#: How often Prometheus re-reads the target files besides watching them [s].
TARGETS_REFRESH = 1.0


def targets_dir(stack_dir: str | Path) -> Path:
    """Where dataplane exporters register with the stack in ``stack_dir``."""
    return Path(stack_dir) / TARGETS_DIR


def _bcrypt_hash(password: str) -> str:
    try:
        import bcrypt   # optional: only a stack with basic auth needs it
    except ImportError:
        raise MetricsError("basic auth for the local stack needs the Python package bcrypt "
                           "(pip install bcrypt) to write the web config's password hash") from None
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()


def write_prometheus_config(path: Path, node_targets: Sequence[str], pushgateway_target: str,
                            password_file: Path | None = None, username: str | None = None,
                            retention_note: str = "") -> Path:
    """prometheus.yml: 1 s scrapes of node-exporter (job ``node``), the Pushgateway (honor_labels) and the
    dataplane exporters whose target files are in ``targets/`` next to it (job ``dataplane``,
    honor_labels: each series says its dataplane and testbed)."""
    interval = f"{SCRAPE_INTERVAL:g}s"
    auth = {"basic_auth": {"username": username, "password_file": str(password_file)}} if username else {}
    cfg: dict[str, Any] = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {"job_name": "node", "static_configs": [{"targets": list(node_targets)}], **auth},
            {"job_name": "pushgateway", "honor_labels": True,
             "static_configs": [{"targets": [pushgateway_target]}], **auth},
            dataplane_job(path.parent),
        ],
    }
    path.write_text("# written by perfkit stack up" + retention_note + "\n" + yaml.safe_dump(cfg, sort_keys=False))
    return path


def dataplane_job(stack_dir: Path) -> dict[str, Any]:
    """The scrape job of the dataplane exporters registered in ``stack_dir``'s ``targets/``."""
    return {"job_name": "dataplane", "honor_labels": True,
            "file_sd_configs": [{"files": [str(targets_dir(stack_dir.absolute()) / "*.json")],
                                 "refresh_interval": f"{TARGETS_REFRESH:g}s"}]}


def add_dataplane_job(path: Path) -> bool:
    """Add the ``dataplane`` job to an existing prometheus.yml that lacks it; whether it did."""
    try:
        text = path.read_text()
        cfg = yaml.safe_load(text)
    except (OSError, yaml.YAMLError):
        return False
    jobs = cfg.get("scrape_configs") if isinstance(cfg, dict) else None
    if not isinstance(jobs, list) or any(j.get("job_name") == "dataplane" for j in jobs):
        return False
    jobs.append(dataplane_job(path.parent))   # the exporter asks for no password
    head = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    path.write_text(head + yaml.safe_dump(cfg, sort_keys=False))
    return True


def write_web_config(d: Path, username: str, password: str) -> tuple[Path, Path]:
    """``web-config.yml`` with ``username`` and a bcrypt hash of ``password``, and the password itself
    (mode 0600) for Prometheus's scrapes; returns both paths."""
    web_cfg = d / WEB_CONFIG_FILE
    web_cfg.write_text(yaml.safe_dump({"basic_auth_users": {username: _bcrypt_hash(password)}}))
    return web_cfg, write_private(d / PASSWORD_FILE, password)


def write_private(path: Path, text: str) -> Path:
    """``text`` in ``path``, readable by its owner only (mode 0600 before a byte of it is written)."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)
    os.chmod(path, 0o600)   # a file that existed keeps its mode through O_CREAT
    return path


def remove_web_config(d: Path) -> None:
    """A stack without basic auth: no stale users or password of an earlier one."""
    for stale in (WEB_CONFIG_FILE, PASSWORD_FILE):
        (d / stale).unlink(missing_ok=True)


def scrape_auth(d: Path, state: Mapping[str, Any]) -> tuple[str, str] | None:
    """(user, password) the stack in ``d`` was started with, for its health checks; None without auth."""
    user = state.get("username")
    pw_file = d / PASSWORD_FILE
    if user and pw_file.exists():
        return user, pw_file.read_text()
    return None
