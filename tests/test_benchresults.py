"""Bench results on record: what a bench appends, what the pages read back, and what they say without one."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit import benchresults
from perfkit.paths import FILES_ROOT, bench_results_dir

PROBE = {"cpu": 1, "work_iterations": 400, "rounds": 15, "trial_period_us": 500.0,
         "periods": [{"period_us": 200.0, "ratio_median": 1.1, "ratio_min": 1.05, "ratio_max": 1.2, "us_per_tick": 20.0},
                     {"period_us": 500.0, "ratio_median": 1.04, "ratio_min": 1.0, "ratio_max": 1.1, "us_per_tick": 20.0},
                     {"period_us": 1000.0, "ratio_median": 1.017, "ratio_min": 1.0, "ratio_max": 1.05,
                      "us_per_tick": 17.0}]}


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PERFKIT_BENCH_RESULTS", str(tmp_path / "bench" / "results"))
    return tmp_path / "bench" / "results"


def test_the_results_live_in_the_checkout_unless_told_otherwise(monkeypatch):
    """A report's notebooks run in reports/<run_id>/: the path must not depend on the working directory."""
    monkeypatch.delenv("PERFKIT_BENCH_RESULTS", raising=False)
    assert bench_results_dir() == FILES_ROOT / "bench" / "results"
    monkeypatch.setenv("PERFKIT_BENCH_RESULTS", "rel/dir")
    assert bench_results_dir().is_absolute() and bench_results_dir().parts[-2:] == ("rel", "dir")


def test_a_record_carries_date_host_and_figures_and_the_history_stays(results):
    first = benchresults.record("probe_cost", PROBE, "first", [str(FILES_ROOT / "bench" / "probe_cost.py"), "--rounds", "3"])
    second = benchresults.record("probe_cost", {**PROBE, "rounds": 9}, "second", ["bench/probe_cost.py"])
    lines = (results / "probe_cost.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["figures"] == PROBE
    assert first.command == "bench/probe_cost.py --rounds 3"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first.measured_at)
    host = first.host
    assert host.hostname and host.kernel and host.cpu_model and host.nproc >= 1
    assert benchresults.latest("probe_cost") == second
    assert [r.figures["rounds"] for r in benchresults.records("probe_cost")] == [15, 9]
    md = (results.parent / "RESULTS.md").read_text()
    assert md.startswith(benchresults.RESULTS_MD_HEADER)
    dated = md[len(benchresults.RESULTS_MD_HEADER):].splitlines()
    assert len(dated) == 2 and dated[0].startswith(f"- {first.date}, {host.describe()}, commit ")
    assert "**probe_cost**: first (`bench/probe_cost.py --rounds 3`)" in dated[0]


def test_a_torn_last_line_is_skipped(results):
    benchresults.record("probe_cost", PROBE, "ok", ["bench/probe_cost.py"])
    with open(results / "probe_cost.jsonl", "a") as f:
        f.write('{"bench": "probe_cost", "measured_')
    assert benchresults.latest("probe_cost").figures == PROBE


def test_without_a_record_the_pages_say_so_and_show_no_number(results):
    for text in (benchresults.probe_tick_cost([200.0, 500.0]), benchresults.perf_overhead_text()):
        assert "has not been run on record" in text
        assert not re.search(r"\d", text.replace(str(results), "")), text   # no figure from nowhere


def test_the_probe_cost_quoted_is_the_records_at_the_periods_asked(results):
    rec = benchresults.record("probe_cost", PROBE, "s", ["bench/probe_cost.py"])
    text = benchresults.probe_tick_cost([500.0, 200.0])
    assert "10.0 % at 200 µs (20.0 µs per tick) and 4.0 % at 500 µs (20.0 µs per tick)" in text
    assert "1000 µs" not in text and rec.date in text and rec.host.hostname in text and "15 paired rounds" in text
    # periods the record lacks: every period it has
    assert "1.7 % at 1000 µs (17.0 µs per tick)" in benchresults.probe_tick_cost([1600.0])


def test_the_perf_overhead_quoted_is_the_records(results):
    figures = {"scenario": "pgwu-ul-64B-1flow-1core", "rate_pps": None, "duration": 2.0, "rounds": 16,
               "median": {"without": {"perf_cpu": None}, "999 Hz": {"perf_cpu": 0.0004}, "4999 Hz": {"perf_cpu": 0.002}},
               "paired_ratio_quartiles": {"4999 Hz": {"dut_ns_per_packet": [1.03, 1.09, 1.13], "rx_mpps": None},
                                          "999 Hz": {"dut_ns_per_packet": [0.95, 0.99, 1.05], "rx_mpps": [0.88, 1.01, 1.06]}}}
    rec = benchresults.record("perf_overhead", figures, "s", ["bench/perf_overhead.py", "--rounds", "16"])
    text = benchresults.perf_overhead_text()
    assert text.startswith("perf's own cost on a trial (pgwu-ul-64B-1flow-1core at max rate, 16 rounds of 2.0 s")
    assert rec.provenance() in text and rec.date in text
    assert ("at 999 Hz, the DUT's ns per packet with perf / without: median 0.99, quartiles 0.95-1.05 (within the "
            "noise: the quartiles include 1); received rate: median 1.01, quartiles 0.88-1.06; the perf process "
            "itself used 0.04 % of a tester core") in text
    assert "at 4999 Hz, the DUT's ns per packet with perf / without: median 1.09, quartiles 1.03-1.13 (+9 %)" in text
    assert "received rate: not measured" in text
    assert text.index("at 999 Hz") < text.index("at 4999 Hz")    # by frequency, not as text sorts


@pytest.mark.parametrize("bench", ["probe_cost", "perf_overhead"])
def test_the_benches_refuse_bad_input_before_recording_anything(results, bench):
    """A refused run records nothing (and needs no testbed, so no lock)."""
    bad = ["--rounds", "0"] if bench == "probe_cost" else ["--direction", "up"]
    out = subprocess.run([sys.executable, str(FILES_ROOT / "bench" / f"{bench}.py"), *bad], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert not results.exists()
