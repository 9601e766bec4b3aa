"""Every exception perfkit raises on purpose, in one place.

Each carries the facts a user needs to fix the problem; the CLI prints ``str(err)`` on one line and
exits with ``err.exit_code``.
"""
from __future__ import annotations

from typing import Iterable


class PerfkitError(Exception):
    """Base class: an error the user can act on (bad input, missing privilege, server down)."""

    exit_code = 2


class ConfigError(PerfkitError, ValueError):
    """A field has a value that is not allowed.

    The message names the field, the value given and what is allowed, e.g.
    ``direction: 'up' is not allowed; allowed: ul, dl``.
    """

    def __init__(self, field: str, value: object, allowed: str | Iterable[object]):
        if not isinstance(allowed, str):
            allowed = ", ".join(str(a) for a in allowed)
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}: {value!r} is not allowed; allowed: {allowed}")


class BpfError(PerfkitError, OSError):
    """A libbpf or bpf(2) call failed; ``what`` says which call and on what."""

    def __init__(self, what: str, errno_: int):
        import os

        self.what = what
        self.errno_ = abs(errno_)
        super().__init__(f"{what}: {os.strerror(self.errno_)} (errno {self.errno_})")


class TestbedError(PerfkitError):
    """Setting up or tearing down namespaces, links or XDP attachments failed."""


class MetricsError(PerfkitError):
    """Prometheus, Pushgateway or node-exporter could not be reached or refused a request."""


class SearchError(PerfkitError):
    """A throughput search could not reach a result (e.g. the DUT loses packets at every rate)."""


class StoreError(PerfkitError):
    """A run directory is missing, incomplete or does not match the campaign being resumed."""


class RegressionFound(PerfkitError):
    """``perfkit compare`` found at least one scenario worse than its threshold and noise."""

    exit_code = 1
