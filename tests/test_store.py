"""The run store's derived trial cache: a large run's trials are read once, and every later read
gives exactly what reading every trial file gives."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfkit import store as store_mod
from perfkit.generators.sim import SimGenerator
from perfkit.scenario import Scenario
from perfkit.store import TRIALS_CACHE_FILE, RunStore


def _every_file(store: RunStore) -> pd.DataFrame:
    """The trials as the store read them before the cache: every trial file, in order."""
    return pd.concat([pd.read_parquet(f) for f in sorted((store.path / "trials").glob("[0-9]*.parquet"))],
                     ignore_index=True)


def _append(store: RunStore, gen: SimGenerator, n: int) -> None:
    for i in range(n):
        # some trials lose frames, some carry extra columns: the frame is not uniform
        store.append(gen.measure(0.5e6 + 1e4 * (i % 80), 0.01), extra={"unit": f"u{i % 3}", "attempt": 1 + i % 2})


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The trial files each read opens (the cache rebuilt after 20 new ones)."""
    opened: list[Path] = []
    real = store_mod._read_parquet

    def counting(path: Path, advice: str) -> pd.DataFrame:
        opened.append(path)
        return real(path, advice)

    monkeypatch.setattr(store_mod, "_read_parquet", counting)
    monkeypatch.setattr(store_mod, "CACHE_MIN_NEW", 20)
    return opened


def test_the_cache_gives_what_every_file_gives_and_reads_only_new_files(tmp_path: Path, reads: list[Path]) -> None:
    store = RunStore.create("cached", tmp_path)
    gen = SimGenerator(Scenario(), threshold=1e6, model="noisy", seed=1)
    _append(store, gen, 60)
    first = store.trials()
    assert len(reads) == 60 and (store.path / TRIALS_CACHE_FILE).is_file()
    pd.testing.assert_frame_equal(first, _every_file(store))
    reads.clear()
    pd.testing.assert_frame_equal(store.trials(), first)
    assert reads == []                                        # all from the cache
    _append(store, gen, 5)                                    # the run goes on
    pd.testing.assert_frame_equal(store.trials(), _every_file(store))
    assert len(reads) == 5


def test_a_trial_set_aside_drops_out_and_a_torn_cache_is_rebuilt(tmp_path: Path, reads: list[Path]) -> None:
    store = RunStore.create("aside", tmp_path)
    _append(store, SimGenerator(Scenario(), threshold=1e6, seed=2), 40)
    store.trials()
    aside = sorted((store.path / "trials").glob("[0-9]*.parquet"))[7]
    aside.rename(aside.with_name(aside.name + store_mod.CORRUPT_SUFFIX))
    after = store.trials()
    assert len(after) == 39 and aside.stem.split("-", 1)[1] not in set(after["trial_id"])
    pd.testing.assert_frame_equal(after, _every_file(store))
    (store.path / TRIALS_CACHE_FILE).write_bytes(b"PAR1 torn")
    reads.clear()
    pd.testing.assert_frame_equal(store.trials(), _every_file(store))
    assert len(reads) == 39                                   # read again from the trial files


# -- old runs: stored trials are read as plain data, never validated against today's dataplane ------
OLD = """
name: old
dataplane: calib
params: {work_iterations: [0, 500]}
frame_sizes: [64]
flows: [1]
dut_cores: [1]
generator:
  backend: sim
  options: {model: smooth, threshold: 1.2Mpps}
methods:
  - method: maxrate
    params: {duration: 0.5}
metrics: false
"""


def _tighten_work(monkeypatch: pytest.MonkeyPatch, maximum: int) -> None:
    """calib's ``work_iterations`` allowed up to ``maximum`` only, as a later version might."""
    import dataclasses

    from perfkit.dataplanes.calib import CalibDataplane

    monkeypatch.setattr(CalibDataplane, "params", tuple(dataclasses.replace(p, maximum=maximum)
                                                        if p.name == "work_iterations" else p
                                                        for p in CalibDataplane.params))


def test_a_run_stored_before_a_parameter_was_tightened_or_its_dataplane_renamed_still_reads_and_compares(tmp_path, monkeypatch, capsys):
    from perfkit.analysis import load_run
    from perfkit.cli import main
    from perfkit.compare import compare_runs
    from perfkit.errors import ConfigError
    from tests.campaign_fixtures import produce_run

    (tmp_path / "old.yaml").write_text(OLD)
    for run in ("base", "head"):
        produce_run(tmp_path / "old.yaml", tmp_path / "runs", run)
    _tighten_work(monkeypatch, 100)
    with pytest.raises(ConfigError, match="^work_iterations: 500"):   # a new trial is checked
        Scenario("calib", params={"work_iterations": 500})
    store = RunStore.open("head", tmp_path / "runs")
    keys = {"calib-64B-1flow-1core-w0", "calib-64B-1flow-1core-w500"}
    assert set(store.trials()["scenario_key"]) == keys
    results = store.results()
    assert sorted(r.params["work_iterations"] for r in results) == [0, 500]
    assert {r.scenario_key for r in results} == keys and {r.variant for r in results} == {"0", "500"}
    store.cpu_frame()   # reads every trial through TrialResult.from_record
    cmp = compare_runs(load_run("head", tmp_path / "runs"), load_run("base", tmp_path / "runs"))
    assert set(cmp.rows["scenario_key"]) == keys
    assert main(["compare", "--run", "head", "--baseline", "base", "--root", str(tmp_path / "runs"), "--json"]) == 0
    assert "calib-64B-1flow-1core-w500" in capsys.readouterr().out
    # the same runs after their dataplane was renamed (no dataplane of the stored name is left)
    for run in ("base", "head"):
        for f in (tmp_path / "runs" / run / "trials").glob("*.parquet"):
            pd.read_parquet(f).assign(dataplane="calib-old").to_parquet(f, index=False)
    assert {r.dataplane for r in RunStore.open("head", tmp_path / "runs").results()} == {"calib-old"}
    assert main(["compare", "--run", "head", "--baseline", "base", "--root", str(tmp_path / "runs")]) == 0
    assert "calib-64B-1flow-1core-w500" in capsys.readouterr().out


def test_a_stored_trial_of_a_dataplane_that_is_gone_reads_as_it_was_stored():
    from perfkit.trial import TrialResult

    rec = SimGenerator(Scenario("calib", params={"work_iterations": 10})).measure(1e5, 0.01).to_record()
    rec.update(dataplane="mylb", scenario_key="mylb-64B-1flow-1core-w10", params='{"work_iterations": 10}')
    r = TrialResult.from_record(rec)
    assert (r.dataplane, r.scenario_key, r.variant, r.params) == ("mylb", "mylb-64B-1flow-1core-w10", "10",
                                                                  {"work_iterations": 10})
    assert r.to_record()["scenario_key"] == "mylb-64B-1flow-1core-w10"
