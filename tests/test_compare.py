"""Run vs baseline: changes, noise bands, verdicts, markdown/JSON output and the CI exit status."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from perfkit import analysis, compare
from perfkit.cli import main
from perfkit.errors import ConfigError
from tests.campaign_fixtures import produce_run, session_runs

BASE = """
name: cmp
params: {direction: ul}
frame_sizes: [64, 1518]
flows: [1]
dut_cores: [1]
generator:
  backend: sim
  options: {model: sharp, threshold: 1.5Mpps}
methods:
  - method: maxrate
    params: {duration: 1}
  - method: ndrpdr
    label: ndr
    params: {goals: [0.0], initial_duration: 0.5, final_duration: 1, relative_width: 0.005}
metrics: false
"""


def _run(tmp_path: Path, run_id: str, **changes: object) -> analysis.RunData:
    raw = yaml.safe_load(BASE)
    for key, value in changes.items():
        if key == "options":
            raw["generator"]["options"].update(value)
        else:
            raw[key] = value
    path = tmp_path / f"{run_id}.yaml"
    path.write_text(yaml.safe_dump(raw))
    produce_run(path, tmp_path / "runs", run_id)
    return analysis.load_run(run_id, tmp_path / "runs")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, analysis.RunData]:
    tmp = tmp_path_factory.mktemp("cmp")
    return {"base": _run(tmp, "base"),
            "slower": _run(tmp, "slower", options={"threshold": "1.35Mpps"}),      # -10 %
            "slightly": _run(tmp, "slightly", options={"threshold": "1.47Mpps"}),  # -2 %
            "fewer": _run(tmp, "fewer", frame_sizes=[64]),
            "root": tmp / "runs"}


def _row(cmp: compare.Comparison, frame_size: int, goal: str) -> dict:
    sel = cmp.rows[(cmp.rows["frame_size"] == frame_size) & (cmp.rows["goal"] == goal)]
    assert len(sel) == 1
    return sel.iloc[0].to_dict()


def test_a_drop_beyond_threshold_and_noise_is_a_regression(runs):
    cmp = compare.compare_runs(runs["slower"], runs["base"], threshold_pct=5)
    ndr = _row(cmp, 64, "ndr")
    assert ndr["change_pct"] == pytest.approx(-10, abs=0.6)
    assert ndr["verdict"] == "regression"
    assert ndr["noise_pct"] > 0 and ndr["band_pct"] == 5                   # bracket widths, below the threshold
    assert _row(cmp, 64, "max")["verdict"] == "regression"                  # 64 B max rate: the DUT limit fell
    assert _row(cmp, 1518, "max")["verdict"] == "within noise"              # 1518 B: the line rate limits both
    assert set(cmp.regressions["scenario_key"]) == {"pgwu-ul-64B-1flow-1core"}
    assert cmp.counts["regression"] == 2


def test_a_drop_within_threshold_or_the_other_way_is_not(runs):
    cmp = compare.compare_runs(runs["slightly"], runs["base"], threshold_pct=5)
    assert cmp.regressions.empty
    assert _row(cmp, 64, "ndr")["change_pct"] == pytest.approx(-2, abs=0.6)
    back = compare.compare_runs(runs["base"], runs["slower"], threshold_pct=5)
    assert _row(back, 64, "ndr")["verdict"] == "improvement"
    strict = compare.compare_runs(runs["slightly"], runs["base"], threshold_pct=1)
    assert _row(strict, 64, "ndr")["verdict"] == "regression"


def test_missing_and_new_figures(runs):
    cmp = compare.compare_runs(runs["fewer"], runs["base"])
    assert set(cmp.rows.loc[cmp.rows["verdict"] == "missing", "frame_size"]) == {1518}
    back = compare.compare_runs(runs["base"], runs["fewer"])
    assert set(back.rows.loc[back.rows["verdict"] == "new", "frame_size"]) == {1518}
    assert cmp.regressions.empty


def test_noise_band_from_repeats_and_brackets(monkeypatch):
    runs = session_runs()
    cur = analysis.load_run(runs.current, runs.root)
    tp = analysis.throughput_table(cur)
    figures = compare.scenario_figures(cur)
    ndr = figures[figures["goal"] == "ndr"]
    widths = tp[tp["goal"] == "ndr"].set_index("scenario_key")["relative_width"].fillna(0) * 100
    assert ndr.set_index("scenario_key")["noise_pct"].to_dict() == pytest.approx(widths.to_dict())
    # three repeats of a max-rate figure: 2 x the coefficient of variation
    fake = tp[tp["goal"] == "max"].head(1)
    fake = fake.loc[fake.index.repeat(3)].reset_index(drop=True)
    fake["throughput_pps"] = [0.9e6, 1.0e6, 1.1e6]
    monkeypatch.setattr(compare, "throughput_table", lambda run: fake)
    f = compare.scenario_figures(cur)
    assert f["noise_pct"].iloc[0] == pytest.approx(20.0)                    # 2 x (0.1 / 1.0) x 100
    assert f["value_pps"].iloc[0] == pytest.approx(1.0e6) and f["n"].iloc[0] == 3
    noisy = compare.compare_runs(cur, cur, threshold_pct=5)
    assert noisy.rows["band_pct"].iloc[0] == pytest.approx(20.0 * 2 ** 0.5)  # both runs' noise, combined


def test_lower_bounds_below_a_dut_figure_leave_the_mean_and_the_noise(monkeypatch):
    runs = session_runs()
    cur = analysis.load_run(runs.current, runs.root)
    tp = analysis.throughput_table(cur)
    fake = tp[tp["goal"] == "max"].head(1)
    fake = fake.loc[fake.index.repeat(3)].reset_index(drop=True)
    # a DUT figure, a testbed-limited repeat far below it (left out), one above it (kept)
    fake["throughput_pps"] = [0.88e6, 0.40e6, 0.92e6]
    fake["limited_by"] = ["dut", "testbed", "generator"]
    fake["at_least"] = [False, True, True]
    monkeypatch.setattr(compare, "throughput_table", lambda run: fake)
    f = compare.scenario_figures(cur).iloc[0]
    assert (f["n"], f["n_lower"]) == (2, 1) and f["value_pps"] == pytest.approx(0.90e6)
    assert f["noise_pct"] == pytest.approx(200 * np.std([0.88, 0.92], ddof=1) / 0.90)
    note = compare.compare_runs(cur, cur).rows["note"].iloc[0]
    assert "1 baseline repeat(s) below a DUT-limited one left out" in note
    # with no DUT-limited repeat, every lower bound counts
    fake["limited_by"], fake["at_least"] = "testbed", True
    f = compare.scenario_figures(cur).iloc[0]
    assert (f["n"], f["n_lower"]) == (3, 0)


def test_markdown_and_json(runs):
    cmp = compare.compare_runs(runs["slower"], runs["base"], threshold_pct=5)
    md = cmp.to_markdown()
    assert md.startswith("### perfkit compare: `slower` vs baseline `base`")
    assert "**2 regression(s)" in md
    assert "| :red_circle: | `pgwu-ul-64B-1flow-1core` | ndr | NDR |" in md
    assert "<details><summary>2 figure(s) within noise</summary>" in md
    assert ":red_circle:" not in cmp.to_markdown(marks="text") and "**REGRESSION**" in cmp.to_markdown(marks="text")
    d = json.loads(json.dumps(cmp.to_dict()))
    assert d["regressed"] is True and d["counts"]["regression"] == 2 and len(d["rows"]) == 4
    with pytest.raises(ConfigError, match="marks: 'html' is not allowed"):
        cmp.to_markdown(marks="html")
    with pytest.raises(ConfigError, match="threshold: -1 is not allowed"):
        compare.compare_runs(runs["slower"], runs["base"], threshold_pct=-1)


def _with_probe(run: analysis.RunData, period_us: float | None) -> analysis.RunData:
    """``run`` as if its trials had been live, their stall probe ticking every ``period_us`` (None:
    stored before the period was recorded)."""
    cpu = {"longest_us": 0.0, **({"period_us": period_us} if period_us else {})}
    return dataclasses.replace(run, trials=run.trials.assign(stalls=json.dumps({"0": cpu, "1": cpu})))


def test_runs_whose_stall_probes_ticked_at_different_periods_carry_a_caveat(runs):
    """The probe's ticks take time of the DUT core: a baseline measured with the 200 µs probe (before
    the period was recorded) and a run with the 500 µs one differ by the probe, not the DUT."""
    old, new = _with_probe(runs["base"], None), _with_probe(runs["slightly"], 500.0)
    cmp = compare.compare_runs(new, old)
    assert len(cmp.caveats) == 1
    assert cmp.caveats[0].startswith("the stall probe ticked every 200 µs in the baseline and every 500 µs in this run")
    assert f"> :warning: {cmp.caveats[0]}" in cmp.to_markdown()
    assert f"> caveat: {cmp.caveats[0]}" in cmp.to_markdown(marks="text")
    assert f"caveat: {cmp.caveats[0]}" in cmp.to_text() and cmp.to_dict()["caveats"] == cmp.caveats
    assert compare.compare_runs(new, _with_probe(runs["base"], 500.0)).caveats == []
    assert compare.compare_runs(runs["slightly"], runs["base"]).caveats == []  # simulated: no probe at all


def test_the_caveat_quotes_the_probe_cost_on_record_with_date_and_host_or_says_it_is_not(runs, tmp_path, monkeypatch):
    """How much a tick costs is no fixed text: the latest bench/probe_cost.py run on record, dated,
    with its host; without one the caveat says so and shows no cost."""
    from perfkit import benchresults

    monkeypatch.setenv("PERFKIT_BENCH_RESULTS", str(tmp_path / "results"))
    old, new = _with_probe(runs["base"], None), _with_probe(runs["slightly"], 500.0)
    bare = compare.compare_runs(new, old).caveats[0]
    assert "bench/probe_cost.py` has not been run on record" in bare and "µs per tick" not in bare
    figures = {"rounds": 7, "periods": [{"period_us": 200.0, "ratio_median": 1.123, "us_per_tick": 24.6},
                                        {"period_us": 500.0, "ratio_median": 1.041, "us_per_tick": 20.5}]}
    rec = benchresults.record("probe_cost", figures, "s", ["bench/probe_cost.py"])
    caveat = compare.compare_runs(new, old).caveats[0]
    assert ("slowed work on the probed CPU by 12.3 % at 200 µs (24.6 µs per tick) and 4.1 % at 500 µs "
            "(20.5 µs per tick), median of 7 paired rounds") in caveat
    assert rec.date in caveat and rec.host.describe() in caveat


def test_cli_exit_status_is_1_on_regression(runs, capsys):
    root = str(runs["root"])
    assert main(["compare", "--run", "slower", "--baseline", "base", "--root", root, "--markdown"]) == 1
    captured = capsys.readouterr()
    assert "| :red_circle: |" in captured.out
    assert "2 figure(s) regressed" in captured.err and "pgwu-ul-64B-1flow-1core" in captured.err
    assert main(["compare", "--run", "slightly", "--baseline", "base", "--root", root, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["regressed"] is False
    assert main(["compare", "--run", "slower", "--baseline", "base", "--root", root, "--threshold", "15"]) == 0
    assert "no regression" in capsys.readouterr().out
    assert main(["compare", "--run", "slower", "--baseline", "nope", "--root", root]) == 2
    assert "--baseline: 'nope' is not allowed; allowed: the id of a run under" in capsys.readouterr().err
