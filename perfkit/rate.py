"""``Rate``: an offered load as the user wrote it (packets/s, L1 bits/s or percent of a line rate)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from perfkit.errors import ConfigError
from perfkit.units import L1_OVERHEAD, LINE_RATES

_RATE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmg]?)(pps|bps)\s*$|^\s*([0-9]*\.?[0-9]+)\s*%\s*$",
                      re.IGNORECASE)
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}


@dataclass(frozen=True)
class Rate:
    """An offered load as the user wrote it: packets/s, L1 bits/s, or percent of a line rate."""

    value: float
    """Magnitude in ``unit``."""
    unit: str
    """``pps``, ``bps`` (L1 bit/s) or ``%`` (of ``line_rate``)."""
    line_rate: str = "10GbE"
    """The nominal line rate a percentage refers to (a key of ``LINE_RATES``)."""

    def __post_init__(self) -> None:
        if self.unit not in ("pps", "bps", "%"):
            raise ConfigError("rate unit", self.unit, ("pps", "bps", "%"))
        if self.line_rate not in LINE_RATES:
            raise ConfigError("line_rate", self.line_rate, LINE_RATES)
        if not (self.value > 0 and math.isfinite(self.value)):
            raise ConfigError("rate", self.value, "a positive number")
        if self.unit == "%" and self.value > 100:
            raise ConfigError("rate", f"{self.value}%", "0 < percent <= 100")

    @classmethod
    def parse(cls, text: str | float | int | Rate, line_rate: str = "10GbE") -> Rate:
        """Parse ``2Mpps``, ``150kpps``, ``5Gbps``, ``40%`` or a bare number of packets/s."""
        if isinstance(text, Rate):
            return text
        if isinstance(text, (int, float)):
            return cls(float(text), "pps", line_rate)
        m = _RATE_RE.match(str(text))
        if not m:
            raise ConfigError("rate", text, "a number with pps, kpps, Mpps, bps, kbps, Mbps, Gbps or %, "
                              "e.g. 2Mpps, 5Gbps, 40%")
        if m.group(4) is not None:
            return cls(float(m.group(4)), "%", line_rate)
        value = float(m.group(1)) * _PREFIX[m.group(2).lower()]
        return cls(value, m.group(3).lower(), line_rate)

    def pps(self, wire_frame_size: int) -> float:
        """The rate in packets/s for frames of ``wire_frame_size`` bytes (FCS included)."""
        if self.unit == "pps":
            return self.value
        bits_per_frame = (wire_frame_size + L1_OVERHEAD) * 8
        bps = self.value if self.unit == "bps" else LINE_RATES[self.line_rate] * self.value / 100
        return bps / bits_per_frame

    def __str__(self) -> str:
        if self.unit == "%":
            return f"{self.value:g}% of {self.line_rate}"
        return f"{self.value:g}{self.unit}"
