"""Metrics: the local Prometheus stack, pushing trial results, querying them and the DUT's CPU back.

- ``perfkit.metrics.config``: ``Endpoints`` and ``load_endpoints()`` (URLs, basic auth, TLS).
- ``perfkit.metrics.stack``: ``up()``, ``down()``, ``status()`` of a local Prometheus + Pushgateway +
  node-exporter; its server processes are ``servers``, its configuration files ``promconfig``, its
  recorded state and the registry of stack directories ``stackstate``.
- ``perfkit.metrics.series``: the series a trial is pushed as (names, labels, values) and the frame
  columns they are read back as.
- ``perfkit.metrics.push``: ``push_trial()``, ``store_and_push()``, ``backfill()``.
- ``perfkit.metrics.retire``: ``retire_runs()``: delete old runs' groups from the Pushgateway once
  Prometheus has scraped them.
- ``perfkit.metrics.query``: ``cpu_frame()``, ``cpu_busy_frame()``, ``trial_metrics_frame()``,
  ``pushed_trials_frame()`` (a run read at its push times, also once retired).
"""
from __future__ import annotations

from perfkit.metrics.config import Endpoints, load_endpoints

__all__ = ["Endpoints", "load_endpoints"]
