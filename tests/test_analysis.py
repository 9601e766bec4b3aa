"""Tidy frames of a run, the CPU source choice, the CPU models and the capacity table."""
from __future__ import annotations

import math
import uuid

import numpy as np
import pandas as pd
import pytest

from perfkit import analysis
from perfkit.search import line_rate_pps
from perfkit.store import RunStore
from perfkit.scenario import Scenario
from perfkit.trial import TrialResult
from tests.campaign_fixtures import session_runs


@pytest.fixture(scope="module")
def run() -> analysis.RunData:
    runs = session_runs()
    return analysis.load_run(runs.current, runs.root)


def test_trial_frame_derives_units_labels_and_rates(run):
    t = run.trials
    assert t["in_result"].all()
    assert set(t["flow_mode"]) == {"single", "multi"}
    assert (t["scenario_key"] + "__" + t["label"] == t["unit"]).all()
    assert np.allclose(t["rx_mpps"], t["rx_pps"] / 1e6)
    assert (t["phase"] != "").all() and set(t["method_name"]) == {"maxrate", "ndrpdr"}


def test_throughput_table_one_row_per_unit_and_goal(run):
    tp = analysis.throughput_table(run)
    n_scen = run.trials["scenario_key"].nunique()
    assert len(tp[tp["goal"] == "max"]) == n_scen
    assert set(tp["goal"]) == {"max", "ndr", "pdr0.5%"}
    summaries = {s["unit"]: s for s in run.searches}
    for row in tp.to_dict("records"):
        res = summaries[row["unit"]]["result"]
        trial = run.trials[run.trials["trial_id"] == row["trial_id"]].iloc[0]
        if row["goal"] == "max":
            assert row["throughput_pps"] == pytest.approx(trial["rx_pps"])
        else:
            goal = next(g for g in res["goals"] if g["name"] == row["goal"])
            assert row["throughput_pps"] == goal["lower_bound"]
            assert trial["loss_ratio"] <= goal["loss_tolerance"]                # the bound rests on a good trial
            assert trial["offered_pps"] == pytest.approx(goal["lower_bound"])
        assert row["throughput_gbps"] == pytest.approx(row["throughput_pps"] * (row["frame_size"] + 20) * 8 / 1e9)
    assert set(tp["hosts"]) == {"local"}   # this machine measured every trial


def test_hosts_text_names_the_lab_hosts_of_a_trial():
    from perfkit.analysis.throughput import hosts_text
    assert hosts_text('{"dut": ["dut1"], "tester": ["tester1", "tester2"]}') == "DUT dut1, tester tester1 tester2"
    assert hosts_text("{}") == hosts_text("") == hosts_text(None) == "local"


def test_throughput_matches_the_simulated_dut(run):
    """smoke.yaml: a smooth DUT forwarding 1.5 Mpps; NDR is 1.5 Mpps, or the line rate when lower."""
    tp = analysis.throughput_table(run)
    for row in tp[tp["goal"] == "ndr"].to_dict("records"):
        line = line_rate_pps(Scenario(params={"direction": row["variant"]}, frame_size=row["frame_size"]))
        truth = min(1.5e6, line)
        assert truth * (1 - 0.021) <= row["throughput_pps"] <= truth * (1 + 1e-9), row["scenario_key"]


def test_search_path_is_each_units_trials_in_order(run):
    path = analysis.search_path(run)
    assert not path.empty
    for unit, g in path.groupby("unit"):
        assert list(g["step"]) == list(range(1, len(g) + 1))
        assert g["phase"].iloc[0] == "max"
        no_loss = g["verdict"] == "no loss"
        assert (g.loc[no_loss, "loss_ratio"] == 0).all() and (g.loc[~no_loss, "loss_ratio"] > 0).all()
        summary = next(s for s in run.searches if s["unit"] == unit)
        assert len(g) == len(summary["trial_ids"])


def test_latency_is_measured_at_the_goals_found(run):
    """smoke.yaml's ndrpdr measures latency at 100 % of its NDR and PDR once it has found them."""
    tp = analysis.throughput_table(run)
    at = analysis.goal_latency_table(run)
    searches = tp[tp["goal"] != "max"]
    assert len(at) == len(searches) and set(at["load"]) == {"100% of NDR", "100% of PDR0.5%"}
    figures = searches.set_index(["unit", "goal"])
    for row in at.to_dict("records"):
        figure = figures.loc[(row["unit"], row["goal"])]
        assert row["throughput_mpps"] == pytest.approx(figure["throughput_mpps"])
        assert row["rate_mpps"] == pytest.approx(row["throughput_mpps"], rel=1e-6)
        assert row["at_least"] == figure["at_least"] and row["limited_by"] == figure["limited_by"]
        assert 0 < row["latency_p50_us"] <= row["latency_p99_us"] <= row["latency_max_us"]
        trial = run.trials[run.trials["trial_id"] == row["trial_id"]].iloc[0]
        assert trial["phase"] == f"latency {row['goal']} 100%" and trial["trial_id"] != figure["trial_id"]
    lat = analysis.latency_table(run)
    assert set(lat["percentile"]) == {"p50", "p90", "p99", "p99.9", "max"}
    assert set(lat["load"]) == {"100% of NDR", "100% of PDR0.5%"}
    assert (lat["latency_us"] > 0).all()


# -- CPU sources ---------------------------------------------------------------------------------
def _result(trial_id: str, frame_size: int, offered: float, busy_cpu1: float, **kw) -> TrialResult:
    return TrialResult(dataplane="pgwu", params={"direction": "ul"}, frame_size=frame_size, wire_frame_size=frame_size + 36,
                       flows=1, dut_cores=1, generator="test", duration=1.0, intended_pps=offered,
                       intended_packets=int(offered), tx_packets=int(offered), rx_packets=int(offered),
                       elapsed=1.0, start_time=1.7e9, end_time=1.7e9 + 1, trial_id=trial_id, method="maxrate/max",
                       dut_cpu={"1": busy_cpu1},
                       cpu_modes={"0": {"user": 0.5, "system": 0.1, "softirq": 0.0, "idle": 0.4},
                                  "1": {"user": 0.0, "system": 0.1, "softirq": busy_cpu1 - 0.1,
                                        "idle": 1 - busy_cpu1}}, **kw)


@pytest.fixture()
def handmade(tmp_path) -> analysis.RunData:
    store = RunStore.create("hand", tmp_path)
    for i, fs in enumerate((64, 512, 1500)):
        store.append(_result(f"t{i}", fs, 1e6, 0.9 - i * 0.2))
    return analysis.load_run("hand", tmp_path)


def test_cpu_from_proc_stat_is_the_dut_cores_softirq_plus_system(handmade):
    cpu, source = analysis.cpu_per_trial(handmade)
    assert source.name == "proc_stat" and source.covered == source.total == 3
    assert "/proc/stat" in source.label
    got = dict(zip(cpu["trial_id"], cpu["cpu_pct"]))
    assert got == pytest.approx({"t0": 90.0, "t1": 70.0, "t2": 50.0})   # cpu 1 only: cpu 0 is not the DUT's
    assert (cpu["cpu_cores_pct"] == cpu["cpu_pct"]).all()


def test_prometheus_cpu_is_preferred_only_when_it_covers_every_trial(handmade):
    def prom(trial_ids, softirq):
        return pd.DataFrame([{"run_id": "hand", "trial_id": t, "instance": "dut:9100", "cpu": 1, "mode": m,
                              "seconds": 1.0, "fraction": f, "busy": m != "idle", "dut": True}
                             for t in trial_ids for m, f in (("softirq", softirq), ("system", 0.0),
                                                             ("idle", 1 - softirq))])

    handmade.store.write_prometheus_cpu(prom(["t0", "t1"], 0.33))
    cpu, source = analysis.cpu_per_trial(handmade)
    assert source.name == "proc_stat"                                      # Prometheus lacks t2
    cpu, source = analysis.cpu_per_trial(handmade, ["t0", "t1"])
    assert source.name == "prometheus" and cpu["cpu_pct"].tolist() == pytest.approx([33.0, 33.0])
    assert "Prometheus" in source.label and "(2/2 trials)" in source.label


def test_cpu_falls_back_to_the_trials_busy_fraction(tmp_path):
    store = RunStore.create("busy", tmp_path)
    r = _result("t0", 64, 1e6, 0.8)
    r.cpu_modes = {}
    r.dut_cpu = {"1": 0.8, "2": 0.6}
    store.append(r)
    cpu, source = analysis.cpu_per_trial(analysis.load_run("busy", tmp_path))
    assert source.name == "trial_busy"
    assert cpu["cpu_pct"].iloc[0] == pytest.approx(70.0) and cpu["cpu_cores_pct"].iloc[0] == pytest.approx(140.0)
    assert math.isnan(cpu["cpu_softirq_pct"].iloc[0])


# -- models --------------------------------------------------------------------------------------
def _synthetic(n: int = 60, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    fs = rng.choice([64, 128, 256, 512, 1024, 1500], n)
    cores = rng.choice([1, 2, 4], n)
    mpps = rng.uniform(0.1, 2.0, n) * cores
    work = 5 + 0.01 * fs + 300 / fs + 2 * cores + 40 * mpps
    return pd.DataFrame({"trial_id": [f"t{i}" for i in range(n)], "dataplane": "pgwu", "variant": rng.choice(["ul", "dl"], n),
                         "frame_size": fs, "inv_frame_size": 1 / fs, "dut_cores": cores, "offered_mpps": mpps,
                         "flow_mode": "single", "cpu_cores_pct": work, "cpu_pct": work / cores})


def test_linear_fit_recovers_known_coefficients():
    fit = analysis.fit_linear(_synthetic(), analysis.FEATURES, "cpu_cores_pct", "multivariate")
    assert fit.r2_ == pytest.approx(1.0)
    assert fit.intercept_ == pytest.approx(5, abs=1e-6)
    assert fit.coef_ == pytest.approx({"frame_size": 0.01, "inv_frame_size": 300, "dut_cores": 2,
                                       "offered_mpps": 40}, abs=1e-6)
    assert np.allclose(fit.residuals_["residual"], 0, atol=1e-6)
    assert "40 x offered_mpps" in fit.equation()
    assert fit.cv_r2_ == pytest.approx(1.0) and not fit.weak             # each row its own group: leave one out
    assert fit.to_dict()["cv_r2"] == pytest.approx(1.0)


def test_a_cpu_share_fit_is_cross_validated_over_scenarios():
    """Leaving one scenario out at a time: a target that follows the features holds up; one that
    ignores them is weak, in words; with two scenarios there is nothing to cross-validate."""
    d = _synthetic(60, seed=2)
    d["scenario_key"] = [f"s{i % 6}" for i in range(len(d))]
    fit = analysis.fit_linear(d, analysis.FEATURES, "cpu_cores_pct")
    assert fit.cv_groups_ == 6 and fit.cv_r2_ == pytest.approx(1.0) and not fit.weak
    d["cpu_cores_pct"] = np.random.default_rng(2).uniform(10, 90, len(d))
    null = analysis.fit_linear(d, analysis.FEATURES, "cpu_cores_pct")
    assert null.cv_r2_ < 0.2 and null.weak and "weak" in null.r2_words()
    assert (null.residuals_["cv_predicted"] != null.residuals_["predicted"]).all()
    d["scenario_key"] = [f"s{i % 2}" for i in range(len(d))]
    two = analysis.fit_linear(d, analysis.FEATURES, "cpu_cores_pct")
    assert math.isnan(two.cv_r2_) and two.weak and "not cross-validated (2 scenarios" in two.r2_words()


def test_constant_features_are_dropped_and_too_few_rows_give_no_fit():
    d = _synthetic()
    d["dut_cores"] = 1
    fit = analysis.fit_linear(d, analysis.FEATURES, "cpu_cores_pct")
    assert fit.dropped == ("dut_cores",) and fit.constants == {"dut_cores": 1.0}
    assert analysis.fit_linear(d.head(3), analysis.FEATURES, "cpu_cores_pct") is None


def test_fit_cpu_models_per_variant_and_core_count():
    d = _synthetic(120)
    models = analysis.fit_cpu_models(d)
    assert [m.variant for m in models] == ["dl", "ul"]
    assert [m.label for m in models] == ["DL (GTP-U encap)", "UL (GTP-U decap)"]
    for m in models:
        assert [f.group["dut_cores"] for f in m.per_cores] == [1, 2, 4]
        assert all(f.features == ("frame_size",) for f in m.per_cores)
        assert m.multivariate.r2_ == pytest.approx(1.0)
        assert set(m.correlations["feature"]) == {"frame_size", "inv_frame_size", "dut_cores", "offered_mpps"}
    coefs = analysis.coefficients_table(models)
    assert set(coefs["model"]) == {"1 core", "2 cores", "4 cores", "multivariate"}


def test_capacity_table_inverts_the_model():
    fit = analysis.fit_linear(_synthetic(), analysis.FEATURES, "cpu_cores_pct", "multivariate", {"variant": "ul"})
    cap = analysis.capacity_table(fit, [10], [64, 1500], utilization=80)
    for row in cap.to_dict("records"):
        fs, mpps = row["frame_size"], 10e3 / ((row["frame_size"] + 20) * 8)
        per_core = lambda c: (5 + 0.01 * fs + 300 / fs + 2 * c + 40 * mpps) / c  # noqa: E731
        c = row["cores_needed"]
        assert per_core(c) <= 80 < per_core(c - 1) if c > 1 else per_core(1) <= 80
        assert row["predicted_cpu_pct"] == pytest.approx(per_core(c))
    assert cap.set_index("frame_size").loc[64, "extrapolated"]               # 14.9 Mpps: beyond the data
    pivot = analysis.capacity_pivot(cap)
    assert list(pivot.columns) == [("ul", "10 Gbit/s")]


def test_capacity_with_one_core_count_assumes_the_work_does_not_depend_on_cores():
    d = _synthetic()
    d = d[d["dut_cores"] == 1]
    fit = analysis.fit_linear(d, analysis.FEATURES, "cpu_cores_pct", "multivariate", {"variant": "dl"})
    cap = analysis.capacity_table(fit, [1, 40], [512], utilization=50, max_cores=4)
    assert "independent of the core count" in cap["assumption"].iloc[0]
    one, forty = cap["cores_needed"].tolist()
    work_1 = 5 + 0.01 * 512 + 300 / 512 + 2 + 40 * (1e3 / (532 * 8))
    assert one == math.ceil(work_1 / 50)
    assert math.isnan(forty)                                                   # more than 4 cores


def test_run_summary_and_notes(run):
    facts = dict(analysis.run_summary(run).values)
    assert facts["run id"] == run.run_id and facts["status"] == "complete"
    assert any("simulated" in n for n in analysis.run_notes(run))


def test_runs_made_outside_campaigns_still_have_figures(tmp_path):
    store = RunStore.create("plain", tmp_path)
    for rate, rx in ((1e6, 1e6), (2e6, 1.5e6)):
        r = _result(f"n{rate}", 64, rate, 0.5)
        r.method, r.rx_packets = "ndr/linear", int(rx)
        store.append(r)
    run = analysis.load_run("plain", tmp_path)
    tp = analysis.throughput_table(run)
    assert tp["goal"].tolist() == ["ndr"]
    assert tp["throughput_pps"].iloc[0] == 1e6 and tp["upper_pps"].iloc[0] == 2e6


def test_disturbed_trials_are_shown_and_never_carry_a_figure(tmp_path):
    """A search whose trial at 1.5 Mpps was disturbed, run again and then clean: the run's tables
    keep the disturbed trial with its evidence, count it, and rest the NDR on the clean one."""
    store = RunStore.create("stalled", tmp_path)
    trials = [(1.0e6, 1.0e6, False), (1.5e6, 1.49e6, True), (1.5e6, 1.5e6, False), (2.0e6, 1.8e6, False)]
    for i, (rate, rx, disturbed) in enumerate(trials):
        r = _result(f"s{i}", 64, rate, 0.5, stalls={"1": {"longest_us": 3000.0, "steal_us": 2900.0}})
        r.method, r.rx_packets = "ndr/linear", int(rx)
        if disturbed:
            r.disturbed, r.disturbance = True, "10000 DUT ring overflows; a DUT core stalled 3000 µs ..."
            r.dut_stall_us, r.dut_drops = 3000.0, {"rx_ring_full": int(rate - rx)}
            r.notes.append("disturbed (...): run again (1 of 3)")
        store.append(r)
    run = analysis.load_run("stalled", tmp_path)
    assert run.trials["retried"].tolist() == [False, True, False, False]
    tp = analysis.throughput_table(run)
    assert tp["throughput_pps"].iloc[0] == 1.5e6 and tp["trial_id"].iloc[0] == "s2"
    assert tp["disturbed_trials"].iloc[0] == 1 and tp["disturbed_seconds"].iloc[0] == 1.0
    dt = analysis.disturbed_table(run)
    assert dt["lost_packets"].tolist() == [10000] and dt["retried"].tolist() == [True]
    assert dt["dut_stall_us"].iloc[0] == 3000.0 and dt["steal_us"].iloc[0] == 2900.0
    assert "ring overflows" in dt["disturbance"].iloc[0]
    path = analysis.search_path(run)
    assert path["verdict"].tolist()[1] == "disturbed, run again"
    assert any("1 trial(s) had a DUT core stalled" in n and "1 of them lost frames" in n for n in analysis.run_notes(run))


def test_a_search_judged_at_a_slightly_short_offer_finds_its_figure_trial(tmp_path):
    """The generator offers 2 % less than asked: the search judges trials at the offered rate, and
    the stored run's NDR row must rest on the same trial (once a 5 % rule in the analysis and a
    0.1 % rule in the searches left NDR rows without a trial, and NaN figures)."""
    from perfkit.search import BinarySearch, binary_search

    class ShortOffer:
        scenario = Scenario(params={"direction": "ul"}, frame_size=64)

        def measure(self, rate, duration):
            tx = int(rate * duration * 0.98)
            rx = tx if tx / duration <= 1e6 else int(tx * 0.9)
            r = _result("", 64, rate, 0.5)
            r.trial_id, r.duration, r.elapsed = str(uuid.uuid4()), duration, duration
            r.intended_packets, r.tx_packets, r.rx_packets, r.method = int(rate * duration), tx, rx, "ndr"
            return r

    store = RunStore.create("short", tmp_path)
    res = binary_search(ShortOffer(), BinarySearch(max_rate=2e6, duration=1.0, relative_width=0.01),
                        on_trial=store.append)
    store.write_search("u", {"unit": "u", "scenario": {"dataplane": "pgwu", "frame_size": 64, "flows": 1,
                                                       "dut_cores": 1, "params": {"direction": "ul"}},
                             "scenario_key": "pgwu-ul-64B-1flow-1core", "method": "ndr", "label": "ndr",
                             "repeat": 1, "result": res.to_dict(with_trials=False),
                             "trial_ids": [t.trial_id for t in res.trials]})
    tp = analysis.throughput_table(analysis.load_run("short", tmp_path))
    row = tp[tp["goal"] == "ndr"].iloc[0]
    assert row["throughput_pps"] == res.lower_bound and 0.98e6 < res.lower_bound <= 1e6
    assert row["offered_mpps"] * 1e6 == pytest.approx(res.lower_bound)   # the trial at the bound itself
    assert row["trial_id"] in {t.trial_id for t in res.trials if t.loss_ratio == 0}
    assert not tp[["throughput_mpps", "rx_mpps", "rx_gbps", "loss_ratio"]].isna().any().any()


# -- the DUT load model ---------------------------------------------------------------------------
#: The known cost of the synthetic DUTs: a wake-up [ns] (only where a test adds it to the load: the
#: model does not regress on wake-ups, an outcome of the load), the fixed share per DUT core [cores].
WAKE_NS, FIXED_PER_CORE = 18_000.0, 0.05
RATES = (5e4, 2e5, 5e5, 9e5)


def _known_marginal(fs: int, ul: bool, sessions: int, cores: int) -> float:
    """ns per packet: 300 + 0.2 x frame size + 150 (uplink) + 40 x log10(1 + sessions) + 10 x cores."""
    return 300 + 0.2 * fs + 150 * ul + 40 * math.log10(1 + sessions) + 10 * cores


def _wakeups(pps: float) -> float:
    """Wake-ups per second: one per packet at low rates, fewer as the thread stays busy (not linear in
    the rate, as on the testbed)."""
    return 25_000 * pps / (pps + 1e5) * (1 - pps / 1.2e6)


def _load_trial(i: int, fs: int, ul: bool, sessions: int, cores: int, pps: float, load: float,
                **kw) -> TrialResult:
    r = _result(f"l{i}", fs, pps, load / cores, **kw)
    r.params = {**r.params, "direction": "ul" if ul else "dl", "sessions": sessions}
    r.dut_cores, r.method, r.dut_busy = cores, "ndrpdr/binary", load / cores
    r.dut_wakeups = int(_wakeups(pps))
    return r


def _load_run(tmp_path, marginal, load_of=None, name: str = "load") -> analysis.RunData:
    """12 scenarios (3 frame sizes x 2 directions x 2 table sizes; 2 cores at 512 B), each at
    ``RATES``, with the load ``fixed + marginal(scenario) x pps`` (or ``load_of(i, pps)``); the
    trials count wake-ups (``_wakeups``) all the same."""
    store = RunStore.create(name, tmp_path)
    i = 0
    for fs in (64, 512, 1024):
        for ul in (False, True):
            for sessions in (0, 100_000):
                cores = 1 + (fs == 512)
                m = marginal(fs, ul, sessions, cores)
                for pps in RATES:
                    load = FIXED_PER_CORE * cores + m * 1e-9 * pps if load_of is None else load_of(i, pps)
                    store.append(_load_trial(i, fs, ul, sessions, cores, pps, load))
                    i += 1
    return analysis.load_run(name, tmp_path)


def test_the_load_model_recovers_a_known_linear_cost(tmp_path):
    """Trials of DUTs whose load is ``0.05 x cores + marginal x pps``, with the marginal cost linear in
    the features: both stages find every coefficient, and hold up when a scenario is left out."""
    run = _load_run(tmp_path, _known_marginal)
    frame = analysis.load_frame(run)
    assert len(frame) == 48 and frame["pps"].tolist() == pytest.approx([p for _ in range(12) for p in RATES])
    model = analysis.fit_load(frame)
    assert model.scenarios["resolved"].all() and model.notes == [] and model.marginal.held_at_zero == {}
    assert model.fixed_per_core_ == pytest.approx(FIXED_PER_CORE, abs=1e-6)
    for row in model.scenarios.to_dict("records"):
        truth = _known_marginal(row["frame_size"], row["variant"] == "ul", row["sessions"], row["dut_cores"])
        assert row["marginal_ns"] == pytest.approx(truth, rel=1e-6)
        assert row["fixed_cores"] == pytest.approx(FIXED_PER_CORE * row["dut_cores"], abs=1e-6)
    fit = model.marginal
    assert fit.intercept_ == pytest.approx(300, abs=1e-3)
    assert fit.coef_ == pytest.approx({"frame_size": 0.2, "dut_cores": 10, "log_sessions": 40, "variant_ul": 150},
                                      abs=1e-4)
    assert model.r2_ == pytest.approx(1.0) and model.cv_r2_ == pytest.approx(1.0) and fit.cv_r2_ == pytest.approx(1.0)
    assert not model.weak and not fit.weak and "weak" not in model.r2_words()
    assert model.cv_groups_ == fit.cv_groups_ == 12
    assert model.trials["cv_predicted"].to_numpy() == pytest.approx(model.trials["load_cores"].to_numpy(), rel=1e-6)
    saved = model.to_dict()
    assert saved["cv_r2"] == pytest.approx(1.0) and saved["weak"] is False and saved["marginal"]["cv_r2"] == pytest.approx(1.0)


def test_a_scenario_measured_at_nearly_one_rate_counts_little(tmp_path):
    """A 13th scenario whose trials ran within 6 % of one rate, with 1 % of noise on its load: its
    own line's slope is far off, but the second stage weighs it by what its rates can say and
    still finds the known cost."""
    run = _load_run(tmp_path, _known_marginal)
    store = run.store
    for j, (pps, noise) in enumerate(((5.0e5, 0.01), (5.15e5, 0.0), (5.3e5, -0.01))):
        load = FIXED_PER_CORE + _known_marginal(256, True, 0, 1) * 1e-9 * pps
        store.append(_load_trial(100 + j, 256, True, 0, 1, pps, load + noise))
    model = analysis.fit_load(analysis.load_frame(analysis.load_run("load", tmp_path)))
    odd = model.scenarios.set_index("scenario_key").loc["pgwu-ul-256B-1flow-1core"]
    assert abs(odd["marginal_ns"] - _known_marginal(256, True, 0, 1)) > 300        # its own line is far off
    assert odd["marginal_weight"] < 0.02 * model.scenarios["marginal_weight"].median()
    assert model.marginal.coef_ == pytest.approx({"frame_size": 0.2, "dut_cores": 10, "log_sessions": 40,
                                                  "variant_ul": 150}, rel=0.05)


def test_the_load_frame_counts_processed_packets_and_picks_no_trial_by_its_load(tmp_path):
    """The rate is what the program processed (offered less the ring's overflows) over the trial's
    window; an idle DUT stays in; a trial that shared a core or lost frames to host stalls does not."""
    store = RunStore.create("frame", tmp_path)
    kept = _load_trial(0, 64, True, 0, 1, 1e6, 0.9)
    kept.dut_drops, kept.end_time = {"rx_ring_full": 200_000, "drop_no_session": 5}, kept.start_time + 2.0
    idle = _load_trial(1, 64, True, 0, 1, 1e4, 0.02)
    shared = _load_trial(2, 64, True, 0, 1, 1e5, 0.3, shared_cores=True)
    stalled = _load_trial(3, 64, True, 0, 1, 1e5, 0.3)
    stalled.disturbed = True
    for r in (kept, idle, shared, stalled):
        store.append(r)
    frame = analysis.load_frame(analysis.load_run("frame", tmp_path))
    assert frame["trial_id"].tolist() == ["l0", "l1"]
    assert frame["pps"].tolist() == pytest.approx([(1e6 - 200_000) / 2.0, 1e4])      # the program's drops count
    assert frame["window_s"].tolist() == pytest.approx([2.0, 1.0])
    assert frame["load_cores"].tolist() == pytest.approx([0.9, 0.02])
    assert frame["wakeups_per_s"].iloc[0] == pytest.approx(int(_wakeups(1e6)) / 2.0)


def test_a_marginal_cost_that_does_not_depend_on_the_features_is_weak(tmp_path):
    """Each scenario's load is a perfect line in its rate, but its marginal cost is drawn at random:
    the lines fit (in-sample R² 1), the second stage finds nothing to predict a scenario left out
    with (cross-validated R² near 0 or below) and says so in words."""
    rng = np.random.default_rng(7)
    drawn = {}
    run = _load_run(tmp_path, lambda *key: drawn.setdefault(key, float(rng.uniform(200, 1200))))
    model = analysis.fit_load(analysis.load_frame(run))
    assert model.r2_ == pytest.approx(1.0)
    fit = model.marginal
    assert fit.cv_r2_ < 0.2 and fit.weak
    assert "weak" in fit.r2_words() and "cross-validated" in fit.r2_words()
    assert any("weak" in line for line in model.summary())


def test_a_load_that_depends_on_nothing_is_weak_and_gets_no_capacity_table(tmp_path):
    """Loads that are noise: whatever the lines make of them, the model predicts a scenario left out
    no better than their mean (cross-validated R² near 0 or below): weak, and no capacity table."""
    rng = np.random.default_rng(11)
    run = _load_run(tmp_path, _known_marginal, load_of=lambda i, pps: float(rng.uniform(0.2, 0.8)))
    model = analysis.fit_load(analysis.load_frame(run))
    assert model.cv_r2_ < 0.1 and model.weak and "weak" in model.r2_words()
    answer = analysis.capacity_answer(model, [], [10], [64])
    assert answer.table.empty and answer.source == ""
    assert answer.reason.startswith("No table of DUT cores for X Gbit/s") and "DUT load model" in answer.reason


def test_load_capacity_is_the_fixed_share_and_the_marginal_cost_inverted(tmp_path):
    """Cores needed: the fewest c with ``0.05 c + marginal(c) x pps <= 0.8 c``; extrapolated beyond the
    measured frame sizes, core counts and packets per core."""
    model = analysis.fit_load(analysis.load_frame(_load_run(tmp_path, _known_marginal)))
    cap = analysis.load_capacity(model, [1, 10], [64, 1024, 1500], utilization=80)
    typical = model.scenarios["log_sessions"].mode().iloc[0]       # the table holds the other features there
    for row in cap.to_dict("records"):
        def need(c: int) -> float:
            m = 300 + 0.2 * row["frame_size"] + 150 * (row["variant"] == "ul") + 40 * typical + 10 * c
            return (FIXED_PER_CORE * c + m * 1e-9 * row["mpps"] * 1e6) / c
        c = row["cores_needed"]
        assert need(c) <= 0.8 and (c == 1 or need(c - 1) > 0.8), row
        assert row["predicted_cpu_pct"] == pytest.approx(need(c) * 100)
        per_core = row["mpps"] / c
        assert row["extrapolated"] == (row["frame_size"] == 1500 or not 1 <= c <= 2 or per_core > 0.9 * 1.05), row
    assert cap.set_index(["variant", "frame_size", "gbps"]).loc[("dl", 64, 1), "cores_needed"] == 1
    pivot = analysis.capacity_pivot(cap)
    assert list(pivot.columns) == [("dl", "1 Gbit/s"), ("dl", "10 Gbit/s"), ("ul", "1 Gbit/s"), ("ul", "10 Gbit/s")]
    assert pivot.loc[1500].str.endswith("*").all()


def test_one_capacity_table_from_the_model_that_holds_up(tmp_path):
    """The load model holds up, the CPU-share model (noise) does not: the table is the load model's,
    and the line says both cross-validated R²."""
    model = analysis.fit_load(analysis.load_frame(_load_run(tmp_path, _known_marginal)))
    noise = _synthetic(60, seed=5)
    noise["cpu_cores_pct"] = np.random.default_rng(5).uniform(10, 90, len(noise))
    noise["scenario_key"] = [f"s{i % 6}" for i in range(len(noise))]
    cpu_models = analysis.fit_cpu_models(noise)
    assert all(m.multivariate.weak for m in cpu_models)
    answer = analysis.capacity_answer(model, cpu_models, [10], [64])
    assert answer.source == "DUT load model" and len(answer.table) == 2
    assert answer.table.equals(analysis.load_capacity(model, [10], [64]))
    assert "DUT load model 1.00" in answer.reason and "CPU-share model -" in answer.reason


def test_wake_ups_are_no_regressor_but_explain_what_the_lines_leave(tmp_path):
    """Wake-ups are an outcome of the load: the model is the same whether the trials counted them or
    not. Where they cost CPU (18 µs each, falling as the rate rises), the lines in the rate leave a
    residual that the wake-ups explain, and the page says by how much (``wakeup_r_``); no cost goes
    negative for them."""
    def trials(store, counted: bool, wake_ns: float) -> None:
        for i, pps in enumerate(RATES * 3):
            load = 0.1 + _known_marginal(64, True, 0, 1) * 1e-9 * pps + wake_ns * 1e-9 * int(_wakeups(pps))
            r = _load_trial(i, (64, 512, 1024)[i // 4], True, 0, 1, pps, load)
            r.dut_wakeups = r.dut_wakeups if counted else None
            store.append(r)

    models = {}
    for name, counted, wake_ns in (("counted", True, 0.0), ("uncounted", False, 0.0), ("paid", True, WAKE_NS)):
        trials(RunStore.create(name, tmp_path), counted, wake_ns)
        models[name] = analysis.fit_load(analysis.load_frame(analysis.load_run(name, tmp_path)))
    assert "wake" not in models["counted"].equation()
    for name in ("counted", "uncounted"):
        assert models[name].scenarios["marginal_ns"].tolist() == pytest.approx([_known_marginal(64, True, 0, 1)] * 3)
    paid = models["paid"]
    assert (paid.scenarios["marginal_ns"] >= 0).all() and (paid.scenarios["fixed_cores"] >= 0).all()
    assert paid.wakeup_r_ > 0.5 and math.isnan(models["uncounted"].wakeup_r_)
    assert any("wake-ups are an outcome of the load" in line and "r = " in line for line in paid.summary())


def _falls(scenario: int, load_of):
    """``load_of(i, pps)`` for the trials of scenario number ``scenario`` (``_load_run``'s order),
    the known cost for the others."""
    truth = {}
    for n, (fs, ul, sessions) in enumerate((fs, ul, s) for fs in (64, 512, 1024) for ul in (False, True)
                                           for s in (0, 100_000)):
        cores = 1 + (fs == 512)
        truth[n] = (cores, _known_marginal(fs, ul, sessions, cores))

    def load(i: int, pps: float) -> float:
        n = i // len(RATES)
        cores, m = truth[n]
        return load_of(pps) if n == scenario else FIXED_PER_CORE * cores + m * 1e-9 * pps
    return load


def test_a_load_that_falls_with_the_rate_is_not_resolved_and_no_cost_is_negative(tmp_path):
    """A scenario whose load falls as the rate rises (an unconstrained line: -100 ns per packet, a
    fixed share of 0.6 cores): its marginal cost is held at 0, the page says it is not resolved and
    what the unconstrained line said, and the second stage, fitted without it, still finds the
    known cost of the others."""
    run = _load_run(tmp_path, _known_marginal, load_of=_falls(0, lambda pps: 0.6 - 100e-9 * pps))
    model = analysis.fit_load(analysis.load_frame(run))
    scen = model.scenarios.set_index("scenario_key")
    odd = scen.loc["pgwu-dl-64B-1flow-1core"]
    assert odd["marginal_free_ns"] == pytest.approx(-100, rel=1e-6) and odd["marginal_ns"] == 0
    assert not odd["resolved"] and odd["held_at_zero"] == "marginal" and odd["fixed_cores"] > 0
    assert scen.drop(index="pgwu-dl-64B-1flow-1core")["resolved"].all()
    assert (scen["marginal_ns"] >= 0).all() and (scen["fixed_cores"] >= 0).all() and model.fixed_per_core_ >= 0
    assert (scen["marginal_predicted"] >= 0).all()
    (note,) = [n for n in model.notes if "not resolved" in n]
    assert note.startswith("1 scenario(s) not resolved: their load did not rise with the rate")
    assert "pgwu-dl-64B-1flow-1core (-100 ns)" in note and note in model.summary()
    assert model.marginal.coef_ == pytest.approx({"frame_size": 0.2, "dut_cores": 10, "log_sessions": 40,
                                                  "variant_ul": 150}, rel=1e-4)
    assert model.fixed_per_core_ == pytest.approx(FIXED_PER_CORE, abs=1e-6)


def test_a_negative_fixed_share_is_held_at_zero(tmp_path):
    """A scenario whose load is a line with a negative intercept (-0.3 cores, as the one of the issue
    with -1.03): fixed share 0, its marginal cost the best one with that bound, and a note."""
    run = _load_run(tmp_path, _known_marginal, load_of=_falls(3, lambda pps: -0.3 + 2000e-9 * pps))
    model = analysis.fit_load(analysis.load_frame(run))
    odd = model.scenarios.set_index("scenario_key").loc["pgwu-ul-64B-1flow-1core-100000sess"]
    assert odd["fixed_free"] == pytest.approx(-0.3, rel=1e-6) and odd["fixed_cores"] == 0
    assert odd["resolved"] and odd["held_at_zero"] == "fixed" and odd["marginal_ns"] > 1000
    assert (model.scenarios["fixed_cores"] >= 0).all() and (model.scenarios["marginal_ns"] >= 0).all()
    assert any(n.startswith("1 scenario(s) with a fixed share held at 0") and "(-0.300 cores)" in n
               for n in model.notes)


def test_a_second_stage_that_would_go_negative_holds_the_term_at_zero(tmp_path):
    """Marginal costs that fall with the frame size (-0.25 ns per byte): unconstrained, the second
    stage's frame-size coefficient is negative, and its intercept with it; bounded, both are >= 0,
    so is every prediction, and the page names the term held and what it was."""
    def marginal(fs, ul, sessions, cores):
        return 400 - 0.25 * fs + 150 * ul + 40 * math.log10(1 + sessions) + 10 * cores

    model = analysis.fit_load(analysis.load_frame(_load_run(tmp_path, marginal)))
    fit = model.marginal
    assert fit.intercept_ >= 0 and all(c >= 0 for c in fit.coef_.values())
    assert fit.coef_["frame_size"] == 0 and fit.held_at_zero["frame_size"] == pytest.approx(-0.25, rel=1e-3)
    cap = analysis.load_capacity(model, [10], [64, 1500])
    assert (cap["marginal_ns"] >= 0).all() and (model.scenarios["marginal_predicted"] >= 0).all()
    assert any(line.startswith("marginal cost per packet: held at 0 (a cost is not negative): frame_size")
               for line in model.summary())
    assert fit.to_dict()["held_at_zero"] == fit.held_at_zero


def test_the_trial_frame_judges_speed_normalized_trials_as_the_searches_do():
    """offered_pps is the rate a search judged the trial at: x its speed factor when normalized,
    the offered rate for trials that are not (and for records older than the speed probe)."""
    from perfkit.generators.sim import SimGenerator

    gen = SimGenerator(Scenario(), threshold=1e6, speed_sigma=0.1, seed=1, speed_reference=9.0)
    normalized = [gen.measure(r, 1.0) for r in (2e5, 4e5)]
    plain = SimGenerator(Scenario(), threshold=1e6, speed_sigma=0.1, seed=1).measure(3e5, 1.0)
    old = {k: v for k, v in plain.to_record().items() if k not in ("speed_reference_ns", "dut_speed_ns_per_step")}
    df = analysis.run.trial_frame(pd.DataFrame([t.to_record() for t in (*normalized, plain)] + [old]))
    assert df["offered_pps"].tolist() == pytest.approx([t.judged_pps for t in (*normalized, plain)] + [3e5])
    assert normalized[0].judged_pps != 2e5 and plain.judged_pps == 3e5


def test_a_run_whose_trials_the_load_model_cannot_use_gives_an_empty_frame(tmp_path):
    """Every trial disturbed (a run killed and resumed, say): no trial is left, and the CPU page
    says so instead of failing (the ring-drop column of no rows once kept a string dtype)."""
    store = RunStore.create("none", tmp_path)
    for i in range(3):
        r = _result(f"n{i}", 64, 1e6, 0.9)
        r.dut_busy, r.disturbed, r.dut_drops = 0.9, True, {"rx_ring_full": 10}
        store.append(r)
    frame = analysis.load_frame(analysis.load_run("none", tmp_path))
    assert frame.empty


def test_the_dut_cores_time_by_mode_is_a_heatmap_with_title_units_and_legend():
    from perfkit import plots

    modes = pd.DataFrame([{"scenario_key": "s1", "cpu": 1, "mode": m, "share_pct": v, "trials": 3}
                          for m, v in (("system", 20.0), ("softirq", 70.0), ("idle", 8.0), ("steal", 2.0))])
    fig = plots.cpu_mode_heatmap(modes, "run r")
    assert plots.problems(fig) == []
    grid = np.ma.masked_invalid(fig.axes[0].collections[0].get_array())
    assert sorted(float(v) for v in grid.compressed()) == [2.0, 8.0, 20.0, 70.0]
    assert plots.problems(plots.cpu_mode_heatmap(modes.iloc[:0], "run r")) == []


def test_features_collinear_on_the_trials_are_left_out_and_the_fit_does_not_warn():
    """Two frame sizes: ``inv_frame_size`` is then a linear function of ``frame_size`` and the
    intercept, and its coefficient would not be determined. It is left out, named, and the bounded
    fit (whose cross-validation folds are rank-deficient too) recovers the others without a warning."""
    import warnings

    from perfkit.analysis.models import FEATURES, fit_linear

    rows = [{"scenario_key": f"s{fs}-{i % 3}", "frame_size": fs, "inv_frame_size": 1 / fs, "dut_cores": 1,
             "offered_mpps": mpps, "cpu_cores_pct": 10 + 0.02 * fs + 20 * mpps}
            for fs in (64, 512) for i, mpps in enumerate((0.1, 0.3, 0.5, 0.7, 0.9, 1.1))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = fit_linear(pd.DataFrame(rows), FEATURES, "cpu_cores_pct", nonnegative=True)
    assert fit.collinear == ("inv_frame_size",) and fit.dropped == ("dut_cores",)
    assert fit.intercept_ == pytest.approx(10) and fit.coef_ == pytest.approx({"frame_size": 0.02, "offered_mpps": 20})
    assert fit.to_dict()["collinear"] == ["inv_frame_size"]
