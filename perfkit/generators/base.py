"""The ``Generator`` interface: one abstract method, the measurer."""
from __future__ import annotations

from abc import ABC, abstractmethod

from perfkit.scenario import Scenario
from perfkit.trial import TrialResult


class Generator(ABC):
    """A generator prepared for one scenario. Use it as a context manager so it always cleans up."""

    #: Short backend name written into every result (``xdp``, ``trex``, ``sim`` ...).
    name: str = "abstract"
    #: How often searches repeat a disturbed trial (``TrialResult.disturbed``: its loss explained by
    #: measured host stalls) before its loss counts.
    disturbed_retries: int = 3

    def __init__(self, scenario: Scenario):
        self.scenario = scenario

    @abstractmethod
    def measure(self, rate_pps: float, duration: float, packets: int | None = None) -> TrialResult:
        """Offer ``rate_pps`` [packets/s] for ``duration`` [s] (or exactly ``packets``) and report.

        The result separates intended, offered (``tx_packets``) and received (``rx_packets``) counts.
        """

    def close(self) -> None:
        """Release everything the generator set up (idempotent)."""

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
