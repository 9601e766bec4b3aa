"""The simulated DUTs: honest counts and the loss laws their docs promise."""
from __future__ import annotations

import math

import pytest

from perfkit.errors import ConfigError
from perfkit.generators import create
from perfkit.generators.sim import SimGenerator, SimModel
from perfkit.scenario import Scenario

T = 1e6


def gen(model: str = "sharp", **kw: object) -> SimGenerator:
    return SimGenerator(Scenario(), model=model, threshold=T, **kw)


def test_created_by_name_and_labelled_sim() -> None:
    g = create("sim", Scenario(params={"direction": "dl"}), model="smooth", threshold="2Mpps")
    assert isinstance(g, SimGenerator) and g.model.threshold == 2e6
    r = g.measure(1e5, 1.0)
    assert r.generator == "sim" and r.params["direction"] == "dl" and r.variant == "dl" and any("simulated" in n for n in r.notes)


def test_counts_are_honest_and_trials_take_no_time() -> None:
    r = gen().measure(2e6, 10.0)
    assert r.intended_packets == r.tx_packets == 20_000_000
    assert r.rx_packets == 10_000_000 and r.loss_ratio == pytest.approx(0.5)
    assert r.elapsed == r.duration == 10.0 and r.end_time - r.start_time == 10.0
    wire = Scenario().traffic().wire_frame_size
    assert r.wire_frame_size == wire and r.tx_bytes == r.tx_packets * wire


@pytest.mark.parametrize("model, rate, loss", [
    ("sharp", 1e6, 0.0), ("sharp", 1.25e6, 0.2), ("smooth", 1e6, 0.0), ("smooth", 2e6, 0.25),
    ("buffered", 1.1e6, 0.0),  # 100k excess packets fit the 200k buffer in 1 s
])
def test_loss_laws(model: str, rate: float, loss: float) -> None:
    assert gen(model).measure(rate, 1.0).loss_ratio == pytest.approx(loss, abs=1e-6)


def test_any_modelled_loss_loses_a_packet() -> None:
    assert gen().measure(T * (1 + 1e-7), 1.0).lost_packets == 1


def test_buffered_short_trials_look_better_than_long_ones() -> None:
    g = gen("buffered")
    assert g.measure(1.1e6, 1.0).loss_ratio == 0 < g.measure(1.1e6, 10.0).loss_ratio
    assert g.model.pdr(0.0, 10.0) == pytest.approx(T + 20_000)


def test_true_pdr_matches_the_model() -> None:
    for model in ("sharp", "smooth"):
        g = gen(model)
        pdr = g.model.pdr(0.005)
        assert g.measure(pdr * 0.999, 1.0).loss_ratio <= 0.005 < g.measure(pdr * 1.001, 1.0).loss_ratio
    assert gen("smooth").model.pdr(0.005) == pytest.approx(T / (1 - math.sqrt(0.005)))


def test_noisy_is_reproducible_by_seed_and_varies_per_trial() -> None:
    g, h = gen("noisy", seed=7, sigma=0.05), gen("noisy", seed=7, sigma=0.05)
    rx_g = [g.measure(T, 1.0).rx_packets for _ in range(20)]
    rx_h = [h.measure(T, 1.0).rx_packets for _ in range(20)]
    assert rx_g == rx_h
    assert len(set(rx_g)) > 1  # sometimes lossy, sometimes not


def test_noisy_spikes_lose_packets_at_low_rate() -> None:
    g = gen("noisy", sigma=0.0, spike_probability=1.0, spike_loss=1e-3)
    assert g.measure(1e5, 1.0).loss_ratio == pytest.approx(1e-3)


def test_latency_and_cpu_grow_with_load() -> None:
    g = gen()
    trials = [g.measure(r, 1.0) for r in (1e5, 5e5, 9e5, 2e6)]
    p50 = [t.latency_ns["p50"] for t in trials]
    assert p50 == sorted(p50) and p50[0] < p50[2] < p50[3]
    assert all(t.latency_ns["p50"] <= t.latency_ns["p99"] <= t.latency_ns["max"] for t in trials)
    cpu = [t.dut_cpu["0"] for t in trials]
    assert cpu == sorted(cpu) and cpu[-1] == 1.0


def test_max_offer_caps_the_offered_count() -> None:
    r = gen(max_offer="500kpps").measure(2e6, 2.0)
    assert r.intended_packets == 4_000_000 and r.tx_packets == 1_000_000
    assert r.loss_ratio == 0.0  # what was offered got through


def test_packets_mode_sends_exactly_that_many() -> None:
    r = gen().measure(5e5, 1.0, packets=1000)
    assert r.intended_packets == r.tx_packets == 1000 and r.duration == pytest.approx(0.002)


@pytest.mark.parametrize("kw, field", [
    ({"kind": "cliff"}, "sim model"), ({"threshold": 0}, "sim threshold"), ({"sigma": 0.7}, "sim sigma"),
    ({"spike_probability": 2}, "sim spike_probability"), ({"buffer_packets": -1}, "sim buffer_packets"),
])
def test_invalid_model_names_the_field(kw: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        SimModel(**kw)
    assert err.value.field == field


def test_invalid_trial_inputs() -> None:
    with pytest.raises(ConfigError, match="rate"):
        gen().measure(0, 1.0)
    with pytest.raises(ConfigError, match="duration"):
        gen().measure(1e5, -1)


# -- host stalls (issue 22): the rules of perfkit.host.disturbance on simulated evidence -----------
def test_stalls_overflow_the_queue_and_the_probe_sees_them() -> None:
    """A DUT that keeps up (0.5 of its capacity) behind a 256-frame queue: a stall overflows the
    queue by what arrives beyond its room, and the trial is stalled and disturbed; through stalls
    that stop the generator too nothing overflows, yet the probe saw the DUT core stall."""
    from perfkit.generators.sim import SimStalls

    own = gen(stalls=SimStalls(per_second=20, min_ms=5, max_ms=5, queue_frames=256)).measure(T / 2, 1.0)
    assert own.lost_packets > 0 and own.dut_drops == {"rx_ring_full": own.lost_packets}
    assert own.lost_packets == pytest.approx(own.stalls["0"]["stalls"] * (T / 2 * 0.005 - 256), rel=0.05)
    assert own.stalled and own.disturbed and "DUT ring overflows" in own.disturbance and own.ring_cores == [0]
    assert 4750 <= own.dut_stall_us <= 5250 and own.dut_busy == own.dut_busy_per_core["0"] == 0.5
    vm = gen(stalls=SimStalls(per_second=20, min_ms=5, max_ms=5, queue_frames=256, whole_vm=1.0)).measure(T / 2, 1.0)
    assert vm.lost_packets == 0 and vm.stalled and not vm.disturbed and vm.tester_stall_us >= 4750


def test_a_queue_that_outlasts_the_stalls_loses_nothing_and_no_trial_is_stalled() -> None:
    from perfkit.generators.sim import SimStalls

    g = gen(stalls=SimStalls(per_second=20, queue_frames=16384))  # 16 ms at 1 Mpps; stalls <= 12 ms
    trials = [g.measure(T * 0.9, 1.0) for _ in range(5)]
    assert all(t.lost_packets == 0 and not t.stalled and t.stalls["0"]["stalls"] > 0 for t in trials)


def test_without_stalls_the_dut_draws_what_it_always_drew() -> None:
    """The stalls draw from their own generator: the DUT's noise is the same with them (stalls that
    stop the generator too cost no frames)."""
    from perfkit.generators.sim import SimStalls

    quiet, stalled = gen("noisy", seed=3), gen("noisy", seed=3, stalls=SimStalls(per_second=5, whole_vm=1.0))
    assert [quiet.measure(T, 1.0).lost_packets for _ in range(5)] == [stalled.measure(T, 1.0).lost_packets for _ in range(5)]


@pytest.mark.parametrize("kw, field", [
    ({"per_second": -1}, "per_second"), ({"min_ms": 5, "max_ms": 1}, "max_ms"), ({"whole_vm": 2}, "whole_vm"),
    ({"queue_frames": 0}, "queue_frames"),
])
def test_invalid_stalls_name_the_field(kw: dict, field: str) -> None:
    from perfkit.generators.sim import SimStalls

    with pytest.raises(ConfigError, match=field):
        SimStalls(**kw)
