"""``perfkit export``: a stored run's trial frame as CSV or Parquet, one row per trial, nothing lost."""
from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from perfkit.cli import main
from perfkit.store import RunStore
from tests.campaign_fixtures import session_runs


@pytest.fixture(scope="module")
def stored():
    runs = session_runs()
    return runs, RunStore.open(runs.current, runs.root).trials()


def test_parquet_is_the_stored_frame(stored, tmp_path):
    runs, trials = stored
    out = tmp_path / "t.parquet"
    assert main(["export", "--run", runs.current, "--root", str(runs.root), "--parquet", "-o", str(out)]) == 0
    back = pd.read_parquet(out)
    assert len(back) == len(trials) > 0
    pd.testing.assert_frame_equal(back, trials)


def test_csv_has_one_row_per_trial_and_nested_fields_as_json(stored, tmp_path):
    runs, trials = stored
    out = tmp_path / "t.csv"
    assert main(["export", "--run", runs.current, "--root", str(runs.root), "--csv", "-o", str(out)]) == 0
    back = pd.read_csv(out)
    assert list(back.columns) == list(trials.columns)
    assert back["trial_id"].tolist() == trials["trial_id"].tolist()
    assert back["rx_packets"].tolist() == trials["rx_packets"].tolist()
    assert back["notes"].tolist() == trials["notes"].tolist()
    assert all(isinstance(json.loads(n), list) for n in back["notes"])


def test_csv_to_stdout(stored):
    runs, trials = stored
    p = subprocess.run([sys.executable, "-m", "perfkit", "export", "--run", runs.current, "--root", str(runs.root),
                        "--csv", "-o", "-"], capture_output=True, text=True, check=True)
    assert len(p.stdout.strip().splitlines()) == len(trials) + 1


@pytest.mark.parametrize("argv, needle", [
    (["export", "--run", "no-such-run", "--csv"], "--run"),
    (["export", "--run", "x"], "--csv"),
    (["export", "--run", "x", "--csv", "--parquet"], "--parquet"),
])
def test_bad_input_is_one_line_exit_2(argv, needle, tmp_path):
    p = subprocess.run([sys.executable, "-m", "perfkit", *argv, "--root", str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and needle in p.stderr
