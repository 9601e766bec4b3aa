"""Search goals with the attributes of draft-ietf-bmwg-mlrsearch (perfkit.search.goals), ndrpdr's
conditional throughput, and the MLRsearch library as method mlrsearch -- on the simulated DUT."""
from __future__ import annotations

import json
import math
import random
import statistics

import pytest
from MLRsearch.discrete_load import DiscreteLoad
from MLRsearch.discrete_result import DiscreteResult
from MLRsearch.discrete_width import DiscreteWidth
from MLRsearch.load_rounding import LoadRounding
from MLRsearch.target_spec import TargetSpec
from MLRsearch.target_stat import TargetStat

from perfkit.campaign import Campaign
from perfkit.campaign.schema import from_mapping
from perfkit.cli import main as cli_main
from perfkit.errors import ConfigError
from perfkit.generators import create
from perfkit.generators.sim import SimGenerator
from perfkit.scenario import Scenario
from perfkit.search import Goal, MlrSearch, NdrPdr, mlrsearch, ndrpdr, run_method
from perfkit.search.goals import LoadStat
from perfkit.search.mlr import TrialMeasurer
from perfkit.trial import TrialResult

SC = Scenario("pgwu", frame_size=64, params={"direction": "ul"})
T = 1e6
#: Today's NDR (before goals had attributes) of the rare-loss DUT, seeds 0..9: a loss event in
#: the wrong trial pulls it down by up to 2.7 %.
OLD_NDR = [997496.8671630002, 997496.8671630002, 992410.1318889024, 997496.8671630002, 992509.3828271852,
           997496.8671630002, 997496.8671630002, 972807.5759436926, 997397.1174762838, 982510.8408233107]


def rare(seed: int) -> SimGenerator:
    """A DUT forwarding T without loss, of whose trials 20 % lose 1e-4 of their packets at any rate."""
    return SimGenerator(SC, model="noisy", threshold=T, sigma=0.0, seed=seed, spike_probability=0.2, spike_loss=1e-4)


def search(seed: int, **goal: float) -> NdrPdr:
    return NdrPdr(goals=(0.0,), max_rate=2 * T, initial_duration=1.0, final_duration=10.0, **goal)


def test_exceed_ratio_half_gives_one_conditional_throughput_over_rare_loss_events() -> None:
    found = [ndrpdr(rare(seed), search(seed, exceed_ratio=0.5, duration_sum=21.0)).goals[0] for seed in range(10)]
    throughputs = [b.conditional_throughput for b in found]
    middle = statistics.median(throughputs)
    assert all(abs(t - middle) <= 0.02 * middle for t in throughputs), throughputs
    assert all(b.lower_bound <= T * 1.005 and b.upper_bound > T for b in found)
    # exceed ratio 0: a loss event in the wrong trial pulls the NDR down (2.7 % at seed 7)
    old = [ndrpdr(rare(seed), search(seed)).lower_bound for seed in range(10)]
    assert min(old) < 0.98 * middle


def test_exceed_ratio_zero_reproduces_the_old_ndr() -> None:
    for seed, expected in enumerate(OLD_NDR):
        explicit = ndrpdr(rare(seed), NdrPdr(goals=(Goal(0.0, exceed_ratio=0.0, duration_sum=10.0),), max_rate=2 * T,
                                             initial_duration=1.0, final_duration=10.0))
        assert explicit.lower_bound == pytest.approx(expected, rel=1e-12)
        assert explicit.goals[0].conditional_throughput == explicit.lower_bound  # a lossless lower bound
        assert [t.intended_pps for t in explicit.trials] == [t.intended_pps for t in ndrpdr(rare(seed), search(seed)).trials]


def _library_stat(trials: list[tuple[float, float]], loss_ratio: float, exceed: float, final: float,
                  dursum: float) -> TargetStat:
    rounding = LoadRounding(min_load=1e3, max_load=1e7, float_goals=[0.005])
    spec = TargetSpec(loss_ratio=loss_ratio, exceed_ratio=exceed, discrete_width=DiscreteWidth(rounding, 0.005),
                      trial_duration=final, duration_sum=dursum, expansion_coefficient=2, fail_fast=False,
                      preceding=None)
    stat = TargetStat(spec)
    load = DiscreteLoad(rounding=rounding, float_load=5e5).rounded_down()
    for duration, loss in trials:
        count = 1_000_000
        stat.add(DiscreteResult(intended_duration=duration, intended_load=float(load), offered_count=count,
                                loss_count=round(loss * count), discrete_load=load))
    return stat


def test_load_classification_is_the_libraries() -> None:
    rng = random.Random(1)
    for _ in range(400):
        exceed, final = rng.choice([0.0, 0.1, 0.5, 0.9]), rng.choice([1.0, 5.0, 10.0])
        dursum = final * rng.choice([1, 2, 3.5])
        goal = Goal(0.005, exceed, 0.005, 0.5, final, dursum)
        trials = [(rng.choice([0.5, final]), rng.choice([0.0, 0.001, 0.004, 0.01, 0.2])) for _ in range(rng.randint(0, 8))]
        lib = _library_stat(trials, 0.005, exceed, final, dursum)
        ours = LoadStat(goal)
        for d, loss in trials:
            ours.add(d, loss)
        assert ours.estimates() == lib.estimates(), (goal, trials)
        if ours.classification == "lower":
            assert ours.pessimistic_loss_ratio == pytest.approx(lib.pessimistic_loss_ratio), (goal, trials)


def test_mlrsearch_and_ndrpdr_agree_on_the_same_goals() -> None:
    params = dict(goals=(0.0, 0.005), max_rate=2 * T, initial_duration=1.0, final_duration=5.0, exceed_ratio=0.5,
                  duration_sum=10.0)
    ours, theirs = ndrpdr(rare(4), NdrPdr(**params)), mlrsearch(rare(4), MlrSearch(**params))
    assert theirs.method == "mlrsearch" and {t.method for t in theirs.trials} == {"mlrsearch/trial"}
    for a, b in zip(ours.goals, theirs.goals):
        assert a.name == b.name and a.goal == b.goal
        width = a.goal.relative_width
        assert b.lower_bound * (1 - width) <= a.lower_bound <= b.upper_bound
        assert a.lower_bound * (1 - width) <= b.lower_bound <= a.upper_bound
        assert b.conditional_throughput <= b.lower_bound


class OneTrialLog:
    """Constructed data: a ``TrialLog`` stand-in whose every trial is ``trial``."""

    def __init__(self, trial: TrialResult):
        self.trial = trial

    def run(self, rate_pps: float, duration: float, phase: str) -> TrialResult:
        return self.trial


@pytest.mark.parametrize("tx, rx, loss", [(5500, 5500, 0.0),   # asked for more, offered all: no loss
                                          (4000, 4000, 0.2),   # offered less than intended: unsent
                                          (5000, 4990, 0.002)])
def test_mlrsearch_counts_unsent_but_not_perfkits_compensation_as_loss(tx: int, rx: int, loss: float) -> None:
    trial = TrialResult.for_scenario(SC, wire_frame_size=64, generator="sim", duration=0.5, intended_pps=11_000,
                                     intended_packets=5500, tx_packets=tx, rx_packets=rx)
    result = TrialMeasurer(OneTrialLog(trial)).measure(0.5, 10_000)
    assert result.loss_ratio == pytest.approx(loss)


def test_goals_with_attributes_in_a_campaign_and_their_errors() -> None:
    raw = {"name": "g", "dataplane": "pgwu", "frame_sizes": [64], "generator": {"backend": "sim"}, "metrics": False,
           "methods": [{"method": "ndrpdr", "params": {"goals": [0.0, {"loss_ratio": 0.005, "exceed_ratio": 0.5,
                                                                          "duration_sum": 3}], "final_duration": 1}}]}
    assert isinstance(from_mapping(raw), Campaign)
    params = NdrPdr(goals=(0.0, {"loss_ratio": 0.005, "exceed_ratio": 0.5, "duration_sum": 3}), final_duration=1.0)
    assert [(g.loss_ratio, g.exceed_ratio, g.duration_sum, g.final_trial_duration) for g in params.search_goals()] == [
        (0.0, 0.0, 1.0, 1.0), (0.005, 0.5, 3.0, 1.0)]
    for goal, field in (({"loss_ratio": 0.005, "exceed": 0.5}, "goals.exceed"), ({"exceed_ratio": 0.5}, "goals.loss_ratio"),
                        ({"loss_ratio": 0.0, "exceed_ratio": 1.0}, "goals.exceed_ratio"),
                        ({"loss_ratio": 0.0, "duration_sum": 0.5}, "goals.duration_sum")):
        raw["methods"][0]["params"]["goals"] = [goal]
        with pytest.raises(ConfigError) as err:
            from_mapping(raw)
        assert err.value.field == f"campaign.methods[0].params.{field}", err.value


def test_search_json_names_the_specifications_bounds(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["search", "ndrpdr", "--generator", "sim", "--sim-model", "sharp", "--sim-threshold", "1Mpps",
                     "--rate", "2Mpps", "--duration", "2", "--goals", "0,0.5%", "--exceed-ratio", "0.5",
                     "--duration-sum", "4", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0
    for g in d["goals"]:
        assert g["relevant_lower_bound"] == g["lower_bound"] and g["relevant_upper_bound"] == g["upper_bound"]
        assert 0 < g["conditional_throughput"] <= g["relevant_lower_bound"]
        assert g["goal"]["exceed_ratio"] == 0.5 and g["goal"]["duration_sum"] == 4.0
    res = run_method("mlrsearch", SimGenerator(SC, threshold=T), {"max_rate": 2 * T, "final_duration": 2.0})
    assert res.goals[0].to_dict()["relevant_lower_bound"] == res.lower_bound


# make test-slow: four searches on the real testbed (about a minute)
@pytest.mark.slow
def test_mlrsearch_on_the_testbed_agrees_with_ndrpdr_within_their_widths() -> None:
    """The calibrated DUT behind a NIC-sized queue, one flow: MLRsearch through perfkit's generator
    and perfkit's ndrpdr, the same goals, alternating twice on one testbed. This VM's capacity drifts
    by 5-8 % from one search to the next (2026-12-02: ndrpdr 154.5..158.7 kpps, then MLRsearch
    166.8..175.6 kpps, then ndrpdr 166.8..167.6 kpps), so one search of each cannot be held to one
    width; the span of each method's two searches must overlap the other's, one width of allowance
    either side (a measurer that failed every low rate, as before e763b4e, gave 10 kpps)."""
    params = dict(goals=(0.0, 0.005), exceed_ratio=0.5, duration_sum=2.0, initial_duration=0.5, final_duration=1.0,
                  relative_width=0.05, max_rate=1e6, min_rate=1e4)
    with create("xdp", Scenario("calib", frame_size=64, flows=1, params={"work_iterations": 600}), rx_queue=4096) as gen:
        searches = [(ndrpdr(gen, NdrPdr(**params)), mlrsearch(gen, MlrSearch(**params))) for _ in range(2)]
    for i, name in enumerate(("ndr", "pdr0.5%")):
        ours, theirs = ([r.goals[i] for r in results] for results in zip(*searches))
        for a, b in zip(ours, theirs):
            print(f"\n{name}: ndrpdr {a.lower_bound}..{a.upper_bound}, mlrsearch {b.lower_bound}..{b.upper_bound}")
        assert all(g.name == name and g.lower_bound is not None for g in ours + theirs)
        lo_a, hi_a = min(g.lower_bound for g in ours), max(g.upper_bound or math.inf for g in ours)
        lo_b, hi_b = min(g.lower_bound for g in theirs), max(g.upper_bound or math.inf for g in theirs)
        assert lo_b * (1 - 0.05) <= hi_a and lo_a * (1 - 0.05) <= hi_b, (name, lo_a, hi_a, lo_b, hi_b)
    ratio = sum(r.trial_seconds for r, _ in searches) / sum(r.trial_seconds for _, r in searches)
    print(f"trial seconds, ndrpdr / MLRsearch: {ratio:.2f}")
