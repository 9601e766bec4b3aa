"""Retiring old runs from the Pushgateway, with the real Prometheus and Pushgateway: only groups
Prometheus has are deleted, and a retired run is still read back from Prometheus at its push times."""
from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from perfkit.campaign.metrics_session import MetricsSession
from perfkit.errors import MetricsError
from perfkit.metrics import push, query, retire, servers
from perfkit.metrics.config import Endpoints
from perfkit.store import RunStore
from tests.metrics_fixtures import free_ports, make_result, metrics_stack, server  # noqa: F401

PERFKIT = Path(sys.executable).with_name("perfkit")
WAIT = 30.0      # generous: Prometheus scrapes the Pushgateway every second


def _run_id() -> str:
    return "r" + uuid.uuid4().hex[:10]


def _pushed_run(ep: Endpoints, root: Path, trials: int = 2) -> tuple[RunStore, list]:
    """A run of ``trials`` trials on disk and pushed; returns once Prometheus has scraped them all."""
    store = RunStore.create(_run_id(), root=root)
    results = [make_result(rx_packets=5950017 - i) for i in range(trials)]
    for r in results:
        assert push.store_and_push(store, r, ep).error is None
    query.trial_metrics_frame(store.run_id, ep, trial_ids=[r.trial_id for r in results], wait=WAIT)
    return store, results


def _until(predicate, what: str, timeout: float = WAIT) -> None:
    """Poll ``predicate`` (the Pushgateway applies deletes right after answering them)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.2)


def _until_scraped(ep: Endpoints, run_id: str, trial_ids: set[str]) -> None:
    """Until Prometheus has the groups as the Pushgateway holds them (a re-push needs a new scrape)."""
    def done() -> bool:
        view = retire.prometheus_view(ep)
        groups = [g for g in retire.perfkit_groups(ep) if g.run_id == run_id and g.trial_id in trial_ids]
        return len(groups) == len(trial_ids) and all(retire.scraped(g, view) for g in groups)
    _until(done, f"Prometheus has the groups of run {run_id}")


@pytest.fixture
def lone_gateway(tmp_path):
    """A second Pushgateway that no Prometheus scrapes (its own persistence file: Debian's default
    is the system's /var/lib/prometheus/pushgateway.data)."""
    port = free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    argv = [servers.find_binary("pushgateway"), f"--web.listen-address=127.0.0.1:{port}",
            f"--persistence.file={tmp_path / 'lone-pushgateway.db'}"]
    with server(argv, url + "/-/ready", tmp_path / "lone-pushgateway.log"):
        yield url


def test_retire_deletes_scraped_groups_of_other_runs_and_they_stay_queryable(metrics_stack, tmp_path):
    ep = metrics_stack.endpoints()
    old, old_results = _pushed_run(ep, tmp_path / "runs")
    new, new_results = _pushed_run(ep, tmp_path / "runs", trials=1)
    before = query.pushed_trials_frame(old.run_id, ep, old.push_times())
    assert set(before["trial_id"]) == {r.trial_id for r in old_results}
    _until_scraped(ep, old.run_id, {r.trial_id for r in old_results})

    res = retire.retire_runs(ep, keep=[new.run_id])

    assert sorted(res.retired[old.run_id]) == sorted(r.trial_id for r in old_results)
    assert new.run_id not in res.retired and res.kept[new.run_id] == [new_results[0].trial_id]
    _until(lambda: push.gateway_trial_ids(ep, old.run_id) == set(), "the old run's groups are deleted")
    assert push.gateway_trial_ids(ep, new.run_id) == {new_results[0].trial_id}
    # deleted groups go stale in Prometheus: a query at now loses them ...
    _until(lambda: query.trial_metrics_frame(old.run_id, ep).empty, "the old run's series are stale")
    # ... read at their push times they are all there, with the same values as before
    after = query.pushed_trials_frame(old.run_id, ep, old.push_times())
    assert after.equals(before)
    assert list(after["rx_packets"]) == [float(r.rx_packets) for r in sorted(old_results, key=lambda r: r.start_time)]

    # the CLI reads a run of the local run store at its push times
    out = subprocess.run([str(PERFKIT), "metrics", "trials", "--run", old.run_id, "--root", str(tmp_path / "runs"),
                          "--prometheus-url", ep.prometheus_url, "--pushgateway-url", ep.pushgateway_url, "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert {row["trial_id"] for row in json.loads(out.stdout)} == {r.trial_id for r in old_results}


def test_a_group_prometheus_does_not_have_is_not_deleted(metrics_stack, lone_gateway, tmp_path):
    ep = metrics_stack.endpoints()
    lone = Endpoints(prometheus_url=ep.prometheus_url, pushgateway_url=lone_gateway)
    unseen = make_result(_run_id())
    push.push_trial(unseen, lone)
    # a trial Prometheus has from the scraped Pushgateway, pushed to the lone one too: another push
    store, (seen,) = _pushed_run(ep, tmp_path / "runs", trials=1)
    push.push_trial(seen, lone)

    res = retire.retire_runs(lone, keep=[])

    assert res.retired == {}
    assert res.unscraped == {unseen.run_id: [unseen.trial_id], store.run_id: [seen.trial_id]}
    assert push.gateway_trial_ids(lone, unseen.run_id) == {unseen.trial_id}
    assert push.gateway_trial_ids(lone, store.run_id) == {seen.trial_id}


def test_a_push_not_scraped_yet_is_not_deleted(metrics_stack, tmp_path):
    """Prometheus has an earlier push of the trial; the Pushgateway holds a newer one."""
    ep = metrics_stack.endpoints()
    store, (r,) = _pushed_run(ep, tmp_path / "runs", trials=1)
    _until_scraped(ep, store.run_id, {r.trial_id})
    groups = {g.trial_id: g for g in retire.perfkit_groups(ep) if g.run_id == store.run_id}
    view = retire.prometheus_view(ep)
    assert retire.scraped(groups[r.trial_id], view)
    newer = retire.Group(store.run_id, r.trial_id, groups[r.trial_id].push_time + 1.0, groups[r.trial_id].series)
    fewer = retire.Group(store.run_id, r.trial_id, groups[r.trial_id].push_time, groups[r.trial_id].series + 1)
    assert not retire.scraped(newer, view) and not retire.scraped(fewer, view)


def test_prometheus_down_nothing_is_deleted(metrics_stack, tmp_path):
    ep = metrics_stack.endpoints()
    store, results = _pushed_run(ep, tmp_path / "runs", trials=1)
    dead = Endpoints(prometheus_url=f"http://127.0.0.1:{free_ports(1)[0]}", pushgateway_url=ep.pushgateway_url,
                     timeout=2.0)
    with pytest.raises(MetricsError, match="Prometheus http://127.0.0.1"):
        retire.retire_runs(dead, keep=[])
    assert push.gateway_trial_ids(ep, store.run_id) == {results[0].trial_id}


def test_min_age_keeps_runs_that_pushed_recently(metrics_stack, tmp_path):
    ep = metrics_stack.endpoints()
    store, results = _pushed_run(ep, tmp_path / "runs", trials=1)
    res = retire.retire_runs(ep, keep=[], min_age=3600)
    assert res.retired == {} and res.kept[store.run_id] == [results[0].trial_id]
    assert push.gateway_trial_ids(ep, store.run_id) == {results[0].trial_id}


def test_session_retires_other_runs_and_warns_once_when_it_cannot(metrics_stack, tmp_path, monkeypatch):
    ep = metrics_stack.endpoints()
    old, old_results = _pushed_run(ep, tmp_path / "runs", trials=1)
    _until_scraped(ep, old.run_id, {old_results[0].trial_id})
    monkeypatch.setattr("perfkit.campaign.metrics_session.RETIRE_MIN_AGE", 0.0)
    said: list[str] = []
    ms = MetricsSession(endpoints=ep, prometheus_ok=True, say=said.append)
    ms.retire_old_runs("current")
    assert old.run_id in ms.retire_note or "retired" in ms.retire_note
    _until(lambda: push.gateway_trial_ids(ep, old.run_id) == set(), "the old run's group is deleted")
    assert said and said[0].startswith("metrics: Pushgateway") and "retired" in said[0]

    dead = Endpoints(prometheus_url=f"http://127.0.0.1:{free_ports(1)[0]}", pushgateway_url=ep.pushgateway_url,
                     timeout=2.0)
    _pushed_run(ep, tmp_path / "runs", trials=1)          # something to retire, so Prometheus is asked
    said.clear()
    ms = MetricsSession(endpoints=dead, prometheus_ok=True, say=said.append)
    ms.retire_old_runs("current")                          # must not raise
    assert len(said) == 1 and said[0].startswith("warning: old runs not retired") and "the run goes on" in said[0]


@pytest.mark.slow   # make test keeps the same retirement through the Python API
def test_cli_retire_json_and_bad_input(metrics_stack, tmp_path):
    ep = metrics_stack.endpoints()
    store, results = _pushed_run(ep, tmp_path / "runs", trials=1)
    _until_scraped(ep, store.run_id, {results[0].trial_id})
    base = [str(PERFKIT), "metrics", "retire", "--prometheus-url", ep.prometheus_url,
            "--pushgateway-url", ep.pushgateway_url]
    out = subprocess.run(base + ["--keep", store.run_id, "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["keep"] == [store.run_id] and d["kept"][store.run_id] == [results[0].trial_id]
    assert store.run_id not in d["retired"]
    for bad, field in ((["--keep", "no/such run"], "--keep"), (["--min-age", "-1"], "--min-age")):
        out = subprocess.run(base + bad, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and field in lines[0] and repr(bad[1]) in lines[0] and "allowed" in lines[0], lines
    assert push.gateway_trial_ids(ep, store.run_id) == {results[0].trial_id}


def test_backfill_does_not_push_retired_trials_again_but_lost_ones(metrics_stack, tmp_path):
    ep = metrics_stack.endpoints()
    store, (kept,) = _pushed_run(ep, tmp_path / "runs", trials=1)
    _until_scraped(ep, store.run_id, {kept.trial_id})
    never = make_result()
    store.append(never)
    store.mark_pushed(never.trial_id, "http://x")           # recorded as pushed, never reached anything
    retire.retire_runs(ep, keep=[])
    _until(lambda: push.gateway_trial_ids(ep, store.run_id) == set(), "the run's group is deleted")

    res = push.backfill(store, ep)

    assert res.retired == [kept.trial_id] and res.lost == [never.trial_id] and res.pushed == [never.trial_id]
    assert push.gateway_trial_ids(ep, store.run_id) == {never.trial_id}
