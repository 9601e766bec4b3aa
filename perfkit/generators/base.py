"""The ``Generator`` interface: one abstract method, the measurer."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from perfkit import knobs
from perfkit.errors import ConfigError
from perfkit.scenario import Scenario
from perfkit.trial import TrialResult


class Generator(ABC):
    """A generator prepared for one scenario. Use it as a context manager so it always cleans up."""

    #: Short backend name written into every result (``xdp``, ``trex``, ``sim`` ...).
    name: str = "abstract"
    #: How often searches repeat a stalled trial (``TrialResult.stalled``: a DUT core stalled as long
    #: as its receive queue lasts, whatever it lost) before the last one is judged with its loss.
    disturbed_retries: int = 3
    #: Speed normalization: the reference CPU speed [ns per step of the stall probe's speed probe]
    #: every trial is judged at (``TrialResult.speed_reference_ns``; ``perfkit.search.judging``).
    #: None: off, trials are judged at their offered rate.
    speed_reference_ns: float | None = None
    #: The reference cost of the DUT's kernel path per packet [ns] that speed-normalized trials are
    #: judged at (``TrialResult.kernel_reference_ns``); None: the CPU speed alone.
    kernel_reference_ns: float | None = None
    #: Whether the generator sets the scenario's system knobs (``perfkit.knobs``) on the DUT.
    sets_knobs: bool = False
    #: Whether it counts traffic the dataplane passes to the DUT's kernel, at a socket there
    #: (``Traffic.to_socket``).
    counts_at_socket: bool = False
    #: The verdicts (``Traffic.verdict``) whose traffic it can count: out of the DUT's other port
    #: (XDP_REDIRECT), back out of the ingress port (XDP_TX), at the DUT's kernel without a socket
    #: (XDP_PASS), or at the DUT's drop counters (XDP_DROP).
    verdicts: frozenset[str] = frozenset({"XDP_REDIRECT"})
    #: Whether it sends frame mixes (``Scenario.frame_mix``: imix) as their weighted sizes.
    sends_mixes: bool = False

    def __init__(self, scenario: Scenario):
        self.check_knobs_and_path(scenario)
        self.scenario = scenario

    @classmethod
    def check_knobs_and_path(cls, scenario: Scenario) -> None:
        """Refuse knobs this generator does not set or under which the DUT cannot be measured,
        traffic for the DUT's kernel when it has no socket sink, and a frame mix it does not send (a
        ConfigError naming the field)."""
        if scenario.knobs and not cls.sets_knobs:
            name, value = next(iter(scenario.knobs.items()))
            raise ConfigError("--knob", f"{name}={value}", f"only with a generator that sets knobs on its DUT "
                              f"(xdp: the local testbed; lab: the DUT host), not {cls.name}")
        knobs.check_measurable(scenario.knobs)
        if scenario.mix and not cls.sends_mixes:
            raise ConfigError("frame_size", scenario.frame_mix, f"a size in bytes with the {cls.name} generator "
                              "(frame mixes: the xdp and sim generators)")
        traffic = scenario.traffic()
        socket = traffic.to_socket
        if not socket and traffic.verdict not in cls.verdicts:
            raise ConfigError("traffic verdict", traffic.verdict, f"{', '.join(sorted(cls.verdicts))}: what the "
                              f"{cls.name} generator counts (all four: xdp, the local testbed)")
        if socket and not cls.counts_at_socket:
            raise ConfigError("traffic", f"to a socket on the DUT at {socket[0]}:{socket[1]}",
                              f"traffic out of the DUT's egress port: {cls.name} has no socket sink on the DUT "
                              "(xdp, the local testbed, has)")

    @classmethod
    def check_scenario(cls, scenario: Scenario) -> None:
        """Refuse, before any testbed comes up, a scenario this generator cannot run (campaigns check
        every scenario with it before they start)."""
        cls.check_knobs_and_path(scenario)

    @abstractmethod
    def measure(self, rate_pps: float, duration: float, packets: int | None = None) -> TrialResult:
        """Offer ``rate_pps`` [packets/s] for ``duration`` [s] (or exactly ``packets``) and report.

        The result separates intended, offered (``tx_packets``) and received (``rx_packets``) counts.
        """

    def set_speed_reference(self, reference: float | str | None) -> None:
        """Turn speed normalization on at ``reference`` [ns per step], at what the generator
        measures on its DUT cores (``"auto"``: ``measure_reference``, the kernel path's cost too
        where it can), or off (None)."""
        self.kernel_reference_ns = None
        if reference is None:
            self.speed_reference_ns = None
        elif reference == "auto":
            self.speed_reference_ns, self.kernel_reference_ns = self.measure_reference()
        elif isinstance(reference, (int, float)) and not isinstance(reference, bool) and 0 < reference < 1e4:
            self.speed_reference_ns = float(reference)
        else:
            raise ConfigError("speed_reference", reference, "auto, a CPU speed in ns per probe step (0 < x < 10000), or none")

    def measure_reference(self) -> tuple[float, float | None]:
        """The references of ``"auto"``: the DUT cores' speed [ns per probe step] and the DUT's kernel
        path cost per packet [ns] (None: not measured; here the speed alone, ``measure_speed``)."""
        return self.measure_speed(), None

    def measure_speed(self) -> float:
        """The DUT cores' speed now [ns per step of the speed probe] (generators that can measure it)."""
        raise ConfigError("speed_reference", "auto", f"a number: the {self.name} generator cannot measure the DUT's CPU speed")

    def perf_recorder(self, frequency: int | None = None) -> Any:
        """A context manager that ``perf record``s the DUT cores around a trial, its ``profile`` (a
        ``perfkit.perf.record.PerfProfile``) after a clean exit; generators whose DUT perfkit can
        profile provide it."""
        raise ConfigError("perf", True, f"false: the {self.name} generator cannot profile its DUT")

    def close(self) -> None:
        """Release everything the generator set up (idempotent)."""

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
