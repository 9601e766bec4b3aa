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
