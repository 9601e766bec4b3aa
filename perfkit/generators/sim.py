"""Simulated DUTs with known behaviour, for tests and for benchmarking the searches.

A ``SimGenerator`` answers ``measure(rate_pps, duration)`` instantly (no sleeping) with honest
counts: intended = rate x duration, offered = intended (or less when ``max_offer`` caps the
simulated generator), received = offered minus what the model loses. The trial still reports
``duration`` as its length, so a search's trial seconds are what a real testbed would spend.

Models (``SimModel.kind``), with ``T`` = ``threshold`` [pps]:

- ``sharp``: no loss up to ``T``; above, the DUT forwards exactly ``T`` (loss = 1 - T/rate).
  NDR = T, PDR(g) = T / (1 - g).
- ``noisy``: ``sharp`` with a threshold drawn per trial from a normal law (mean T, relative
  standard deviation ``sigma``), plus, with probability ``spike_probability``, a loss spike of
  ``spike_loss`` (a fraction of the offered packets) at any rate.
- ``smooth``: loss grows smoothly from ``T``: loss = (1 - T/rate)^2 above it, so forwarding keeps
  rising towards 2T at overload. NDR = T, PDR(g) = T / (1 - sqrt(g)).
- ``buffered``: a sharp DUT behind a ``buffer_packets`` queue: the excess (rate - T) x duration
  is lost only once the queue is full, so short trials look better than long ones.

A VM's varying CPU speed (``speed_sigma``, any model): each trial runs at a speed drawn from a
normal law (mean 1, relative standard deviation ``speed_sigma``; with ``speed_per_second`` that
is for 1 s trials, and a trial of d seconds gets ``speed_sigma / sqrt(d)``); T scales with it, and the trial
reports ``dut_speed_ns_per_step = SIM_STEP_NS / speed`` as the speed probe would. With
``speed_reference`` (``"auto"``: ``SIM_STEP_NS``) trials are speed-normalized, and a search finds
T at the reference speed.

Loss counts are rounded up: any positive modelled loss loses at least one packet, so NDR is T
exactly whatever the trial length. The DUT loses by overflowing its receive queue (``dut_drops``'
``rx_ring_full``), and its cores are busy ``min(1, rate / T)`` (``dut_busy``, and per core).

Host stalls (``SimStalls``, off by default): stalls of the DUT's cores at a Poisson rate, each of
a length drawn uniformly, seen by a simulated stall probe (± half its period, as the real one);
the trials' stall evidence, ``stalled`` and ``disturbed`` come from ``perfkit.host.disturbance``'s own rules.
A stall of a DUT core that keeps up overflows its queue by what arrives beyond the queue's room;
one of a DUT already losing frames costs the frames it would have forwarded meanwhile. A share of
the stalls take the whole VM (``whole_vm``): the generator stops too, nothing arrives and nothing
overflows, but the probe sees the DUT core stall all the same -- the stalls that made the old retry
rule favour the DUT (``perfkit.search.trials``).
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from perfkit.host import disturbance, stallprobe
from perfkit.errors import ConfigError
from perfkit.generators.base import Generator
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.trial import RING_DROP, TrialResult

#: The models a ``SimModel`` can be.
MODELS = ("sharp", "noisy", "smooth", "buffered")
#: The simulated CPU's time per speed-probe step at speed 1 [ns].
SIM_STEP_NS = 10.0


@dataclass(frozen=True)
class SimModel:
    """How a simulated DUT loses packets and delays them."""

    kind: str = "sharp"
    """One of ``MODELS``."""
    threshold: float = 1e6
    """Forwarding capacity T [pps] (the NDR of the sharp, smooth and buffered models)."""
    sigma: float = 0.02
    """``noisy``: relative standard deviation of the per-trial threshold [1]."""
    spike_probability: float = 0.0
    """``noisy``: probability that a trial suffers a loss spike at any rate [1]."""
    spike_loss: float = 1e-5
    """``noisy``: fraction of offered packets a spike loses [1]."""
    buffer_packets: int = 200_000
    """``buffered``: packets the DUT can queue before it starts to drop [packets]."""
    speed_sigma: float = 0.0
    """Relative standard deviation of the CPU's speed from trial to trial; T scales with it [1]."""
    speed_per_second: bool = False
    """Whether ``speed_sigma`` holds for 1 s trials and averages down as 1 / sqrt(duration [s]) for
    others (speed that varies independently from second to second; this VM's was 8 % in 1 s trials
    and 2.2 % in 10 s ones) rather than for every trial alike."""
    base_latency_ns: float = 20_000.0
    """One-way latency of an idle DUT [ns]."""
    max_latency_ns: float = 2_000_000.0
    """Latency once the DUT's queue is full (at or above T) [ns]."""

    def __post_init__(self) -> None:
        if self.kind not in MODELS:
            raise ConfigError("sim model", self.kind, MODELS)
        if not (self.threshold > 0 and math.isfinite(self.threshold)):
            raise ConfigError("sim threshold", self.threshold, "a positive rate [pps]")
        if not 0 <= self.sigma < 0.5:
            raise ConfigError("sim sigma", self.sigma, "0 <= sigma < 0.5")
        if not 0 <= self.spike_probability <= 1:
            raise ConfigError("sim spike_probability", self.spike_probability, "0 .. 1")
        if not 0 <= self.spike_loss < 1:
            raise ConfigError("sim spike_loss", self.spike_loss, "0 <= spike_loss < 1")
        if self.buffer_packets < 0:
            raise ConfigError("sim buffer_packets", self.buffer_packets, "an integer >= 0")
        if not 0 <= self.speed_sigma < 0.5:
            raise ConfigError("sim speed_sigma", self.speed_sigma, "0 <= speed_sigma < 0.5")

    def pdr(self, loss_tolerance: float, duration: float = math.inf) -> float:
        """The true highest rate [pps] whose loss ratio is <= ``loss_tolerance`` in trials of
        ``duration`` [s] (only ``buffered`` depends on it). ``noisy``: at the median threshold."""
        if self.kind == "smooth":
            return self.threshold / (1.0 - math.sqrt(loss_tolerance))
        if self.kind == "buffered":
            return (self.threshold + self.buffer_packets / duration) / (1.0 - loss_tolerance)
        return self.threshold / (1.0 - loss_tolerance)

    def lost(self, rate_pps: float, duration: float, offered: int, rng: random.Random, speed: float = 1.0) -> int:
        """Packets lost out of ``offered`` sent at ``rate_pps`` for ``duration`` seconds on a CPU
        running at ``speed`` (1: nominal)."""
        threshold = self.threshold * speed
        if self.kind == "noisy":
            threshold *= max(0.05, rng.gauss(1.0, self.sigma))
        if rate_pps <= threshold or offered == 0:
            ratio = 0.0
        elif self.kind == "smooth":
            ratio = (1.0 - threshold / rate_pps) ** 2
        elif self.kind == "buffered":
            excess = (rate_pps - threshold) * duration - self.buffer_packets
            ratio = max(0.0, excess) / (rate_pps * duration)
        else:
            ratio = 1.0 - threshold / rate_pps
        if self.kind == "noisy" and rng.random() < self.spike_probability:
            ratio = ratio + (1.0 - ratio) * self.spike_loss
        return min(offered, math.ceil(ratio * offered - 1e-9)) if ratio > 0 else 0

    def latency_ns(self, rate_pps: float) -> dict[str, float]:
        """Latency percentiles [ns] at ``rate_pps``: a queue that fills as the load nears T."""
        load = min(rate_pps / self.threshold, 1.0)
        queue = self.max_latency_ns if load >= 1.0 else min(
            self.max_latency_ns, self.base_latency_ns * load / (1.0 - load))
        p50 = self.base_latency_ns + queue * 0.7
        return {"min": self.base_latency_ns * 0.8, "p50": p50, "p90": p50 + queue * 0.6,
                "p99": p50 + queue * 1.2, "p99.9": p50 + queue * 1.6,
                "max": p50 + queue * 2.0, "mean": p50 + queue * 0.1}


@dataclass(frozen=True)
class SimStalls:
    """Host stalls of the simulated DUT's cores (see the module doc)."""

    per_second: float = 0.0
    """Stalls per second of trial, on the DUT cores (Poisson) [1/s]."""
    min_ms: float = 1.0
    """Shortest stall [ms]."""
    max_ms: float = 12.0
    """Longest stall [ms] (lengths uniform in between; this VM's host: 1-12 ms)."""
    whole_vm: float = 0.0
    """Share of the stalls that stop the whole VM, the generator too: nothing overflows [0..1]."""
    queue_frames: int = 256
    """The DUT cores' receive queue [frames] (a veth ring: 256; ``--rx-queue``: up to 16384)."""
    period_us: float = stallprobe.TRIAL_PERIOD_US
    """The simulated probe's timer period [µs]: a stall is seen ± half of it."""
    report_us: float = stallprobe.TRIAL_REPORT_US
    """A tick later than the period by more than this is a stall [µs]."""

    def __post_init__(self) -> None:
        if not (0 <= self.per_second < 1e4):
            raise ConfigError("sim stalls per_second", self.per_second, "0 <= x < 10000 stalls per second")
        if not (0 < self.min_ms <= self.max_ms < 1e4):
            raise ConfigError("sim stalls max_ms", self.max_ms, f">= min_ms ({self.min_ms:g}) and > 0 [ms]")
        if not 0 <= self.whole_vm <= 1:
            raise ConfigError("sim stalls whole_vm", self.whole_vm, "a share, 0 .. 1")
        if not (isinstance(self.queue_frames, int) and self.queue_frames > 0):
            raise ConfigError("sim stalls queue_frames", self.queue_frames, "an integer > 0 [frames]")

    def draw(self, duration: float, rng: random.Random) -> list[tuple[float, bool]]:
        """The stalls of one trial: (length [s], whether the whole VM stopped), in no order."""
        count, budget = 0, rng.expovariate(self.per_second) if self.per_second > 0 else math.inf
        while budget < duration:  # Poisson arrivals
            count += 1
            budget += rng.expovariate(self.per_second)
        return [(rng.uniform(self.min_ms, self.max_ms) / 1e3, rng.random() < self.whole_vm) for _ in range(count)]

    def seen_us(self, length_s: float, rng: random.Random) -> float | None:
        """What the probe reports for a stall of ``length_s`` [µs], or None when it sees none (its
        tick is not late enough): the length ± half a period."""
        seen = length_s * 1e6 + rng.uniform(-self.period_us / 2, self.period_us / 2)
        return seen if seen >= self.period_us / 2 + self.report_us else None


class SimGenerator(Generator):
    """A generator whose DUT is a ``SimModel``; trials take no time but report their duration."""

    name = "sim"
    sends_mixes = True

    def __init__(self, scenario: Scenario, model: str | SimModel = "sharp",
                 threshold: float | str | None = None, sigma: float | None = None,
                 seed: int | None = 0, max_offer: float | str | None = None, capture: str | None = None,
                 speed_reference: float | str | None = None, stalls: SimStalls | None = None,
                 **model_options: float):
        """``model`` is a ``SimModel`` or its kind; ``threshold``/``sigma`` and ``model_options``
        override its fields; ``max_offer`` [pps] caps what the simulated generator can send;
        ``stalls``: host stalls of the DUT cores (``SimStalls``; None: a host that does not stall);
        ``speed_reference`` turns speed normalization on (``Generator.set_speed_reference``);
        ``capture`` is accepted for interface parity and ignored (nothing is on a wire)."""
        super().__init__(scenario)
        if isinstance(model, str):
            fields: dict[str, object] = dict(model_options)
            if threshold is not None:
                fields["threshold"] = _pps(threshold, scenario)
            if sigma is not None:
                fields["sigma"] = sigma
            model = SimModel(kind=model, **fields)  # type: ignore[arg-type]
        elif threshold is not None or sigma is not None or model_options:
            raise ConfigError("sim model", model, "a model kind when threshold/sigma are given")
        self.model = model
        self.max_offer = _pps(max_offer, scenario) if max_offer is not None else None
        # a frame mix: its mean frames, rounded (the model does not look at sizes)
        mix = scenario.traffics()
        self.wire_frame_size = round(sum(t.wire_frame_size * w for t, w in mix) / sum(w for _, w in mix))
        self.output_frame_size = round(sum(t.output_frame_size * w for t, w in mix) / sum(w for _, w in mix))
        self._rng = random.Random(seed)
        self.stalls = stalls
        # the stalls' own draws: the DUT's draws stay those of a host that does not stall
        self._stall_rng = random.Random(f"stalls-{seed}")
        self.set_speed_reference(speed_reference)

    def measure_speed(self) -> float:
        return SIM_STEP_NS

    def measure(self, rate_pps: float, duration: float, packets: int | None = None) -> TrialResult:
        if rate_pps is None or not (rate_pps > 0 and math.isfinite(rate_pps)):
            raise ConfigError("rate", rate_pps, "a positive number of packets/s (the simulated DUT needs one)")
        if not (duration > 0 and math.isfinite(duration)):
            raise ConfigError("duration", duration, "a positive number of seconds")
        if packets is not None and (isinstance(packets, bool) or not isinstance(packets, int) or packets < 1):
            raise ConfigError("packets", packets, "an integer >= 1")
        if packets is not None:
            duration = packets / rate_pps
        intended = packets if packets is not None else max(1, round(rate_pps * duration))
        offered_pps = min(rate_pps, self.max_offer) if self.max_offer else rate_pps
        offered = min(intended, round(offered_pps * duration))
        sigma = self.model.speed_sigma / (math.sqrt(duration) if self.model.speed_per_second else 1.0)
        speed = max(0.05, self._rng.gauss(1.0, sigma)) if sigma else 1.0
        lost = self.model.lost(offered_pps, duration, offered, self._rng, speed)
        capacity = self.model.threshold * speed
        cores = list(range(self.scenario.dut_cores))
        stall_loss, evidence, stalled_cores = self._stalls(offered_pps, capacity, bool(lost), duration, cores)
        lost = min(offered, lost + stall_loss)
        received = offered - lost
        start = time.time()
        sc = self.scenario
        busy = min(1.0, offered_pps / capacity)
        result = TrialResult.for_scenario(
            sc, wire_frame_size=self.wire_frame_size, generator=self.name, duration=duration, intended_pps=rate_pps,
            intended_packets=intended, tx_packets=offered, rx_packets=received,
            tx_bytes=offered * self.wire_frame_size, rx_bytes=received * self.output_frame_size,
            elapsed=duration, start_time=start, end_time=start + duration,
            latency_ns=self.model.latency_ns(offered_pps) if received else {},
            dut_cpu={str(c): min(1.0, offered_pps / self.model.threshold)
                     for c in range(sc.dut_cores)},
            dut_speed_ns_per_step=SIM_STEP_NS / speed, speed_reference_ns=self.speed_reference_ns,
            dut_drops={RING_DROP: lost} if lost else {}, dut_busy=busy,
            dut_busy_per_core={str(c): busy for c in cores},
            ring_cores=(cores if lost > stall_loss else stalled_cores) if lost else [], **evidence,
            notes=[f"simulated DUT: {self.model.kind} at {self.model.threshold:.6g} pps"],
        )
        if self.stalls:
            queues = {c: disturbance.Queue(self.stalls.queue_frames, 1 / len(cores)) for c in cores}
            why = disturbance.stalled(result, queues)
            result.stalled, result.disturbance = bool(why), disturbance.disturbance(result, queues)
            result.disturbed = bool(result.disturbance)
        return result

    def _stalls(self, rate: float, capacity: float, losing: bool, duration: float,
                cores: list[int]) -> tuple[int, dict, list[int]]:
        """The frames host stalls cost a trial at ``rate`` [pps] on a DUT of ``capacity`` [pps] (per
        the module doc), the trial's stall evidence (``TrialResult`` fields, as
        ``perfkit.host.stallprobe.evidence`` gives them), and the cores whose queue they overflowed."""
        if not self.stalls:
            return 0, {}, []
        rng, per_core = self._stall_rng, rate / len(cores)
        seen: dict[int, list[float]] = {c: [] for c in cores}
        tester: list[float] = []
        frames, overflowed = 0, set()
        for length, whole_vm in self.stalls.draw(duration, rng):
            core = rng.choice(cores)
            us = self.stalls.seen_us(length, rng)
            if us is not None:
                seen[core].append(us)
                if whole_vm:
                    tester.append(us)
            if whole_vm:
                continue  # the generator stopped too: nothing arrived to overflow the queue
            lost = (capacity / len(cores) * length if losing
                    else max(0.0, per_core * length - self.stalls.queue_frames))
            if lost >= 1:
                frames += math.ceil(lost)
                overflowed.add(core)
        evidence = {
            "stalls": {str(c): {"longest_us": max(s, default=0.0), "stalls": len(s), "stalled_us": sum(s),
                                "longest_wait_us": 0.0, "waits": 0, "waited_us": 0.0,
                                "period_us": self.stalls.period_us} for c, s in seen.items()},
            "dut_stall_us": max((max(s) for s in seen.values() if s), default=0.0),
            "tester_stall_us": max(tester, default=0.0)}
        return frames, evidence, sorted(overflowed)


def _pps(value: float | str, scenario: Scenario) -> float:
    return Rate.parse(value, scenario.line_rate).pps(scenario.wire_frame_size)
