"""Frame mixes: a scenario whose frames are several sizes at fixed weights instead of one size.

perfkit knows one mix, ``imix``: the "simple IMIX" of Agilent/Spirent, 7:4:1 frames of 64, 594
and 1518 bytes (FCS included), which is also what TRex's ``stl/imix.py`` sends (60, 590 and 1514
bytes without FCS at 28:16:4 packets/s). Its mean frame is (7 x 64 + 4 x 594 + 1518) / 12 =
4342/12 = 361.83 bytes; a frame of the mix costs on average 381.83 bytes at layer 1 (each frame plus
20 bytes of preamble and inter-frame gap), so 10GbE carries 10e9 / (381.83 x 8) = 3.274 M IMIX
frames/s. (353.83 bytes, sometimes quoted for a simple IMIX, is the mean of 64/570/1518.)

A mix is a campaign's ``frame_sizes`` item (``[64, 1518, imix]``) and a CLI ``--frame-size imix``.
Each size is the dataplane's frame of that size (PGW-U: the user-side frame), built as the
dataplane builds any frame; the generator interleaves them by their weights. A scenario, a trial
and a stored record keep ``frame_size`` an integer, the mix's mean rounded (362), and name the mix
in ``frame_mix`` ("" for one size): ``label`` and ``sort_key`` are how tables and plots show them,
the mix after the fixed sizes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfkit.errors import ConfigError
from perfkit.units import FRAME_MAX, FRAME_MIN, L1_OVERHEAD


@dataclass(frozen=True)
class FrameMix:
    """Frame sizes sent at fixed relative counts."""

    name: str
    """How campaigns, the CLI and tables name it (``imix``)."""
    sizes: tuple[int, ...]
    """The frame sizes [bytes], FCS included (the dataplane's frame, as ``frame_size``)."""
    weights: tuple[int, ...]
    """Frames of each size per ``sum(weights)`` frames."""
    title: str = ""
    """For people: where the mix comes from."""

    @property
    def mean_size(self) -> float:
        """Mean frame size over the mix [bytes], FCS included: frames weighted by their counts."""
        return sum(s * w for s, w in zip(self.sizes, self.weights)) / sum(self.weights)

    @property
    def frame_size(self) -> int:
        """The mean, rounded: the integer ``frame_size`` of a scenario or trial of this mix [bytes]."""
        return round(self.mean_size)

    def mean_l1_bytes(self, overhead: int = 0) -> float:
        """Mean bytes per frame at layer 1 [bytes]: frame + ``L1_OVERHEAD``, averaged over the mix;
        ``overhead``: bytes every frame carries on top of its size (a tunnel's)."""
        return self.mean_size + overhead + L1_OVERHEAD


#: Agilent/Spirent's simple IMIX; TRex's stl/imix.py.
IMIX = FrameMix("imix", (64, 594, 1518), (7, 4, 1),
                "simple IMIX (Agilent/Spirent; TRex stl/imix.py): 7:4:1 frames of 64, 594 and 1518 bytes")
MIXES = {m.name: m for m in (IMIX,)}


def get(name: str) -> FrameMix:
    """The mix named ``name``; ConfigError otherwise."""
    try:
        return MIXES[name]
    except KeyError:
        raise ConfigError("frame_mix", name, sorted(MIXES)) from None


def allowed() -> str:
    """What a frame size may be, for error messages."""
    return f"{FRAME_MIN} .. {FRAME_MAX} bytes, or {' or '.join(MIXES)}"


def parse_frame_size(value: Any, where: str = "frame_size") -> int | str:
    """A frame size as written (YAML, CLI text, Python): an integer in ``FRAME_MIN .. FRAME_MAX``
    or a mix's name; ConfigError names ``where``."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in MIXES:
            return text.lower()
        try:
            value = int(text)
        except ValueError:
            raise ConfigError(where, value, allowed()) from None
    if isinstance(value, bool) or not isinstance(value, int) or not FRAME_MIN <= value <= FRAME_MAX:
        raise ConfigError(where, value, allowed())
    return value


def label(frame_size: Any, frame_mix: Any = "") -> str:
    """How tables and plots name a frame size: ``64``, ..., ``imix``."""
    mix = _mix_name(frame_mix)
    return mix if mix else str(int(frame_size))


def sort_key(frame_size: Any, frame_mix: Any = "") -> int:
    """Fixed sizes by size, then the mixes in ``MIXES``' order (as seed 003's figures order them)."""
    mix = _mix_name(frame_mix)
    return FRAME_MAX + 1 + list(MIXES).index(mix) if mix else int(frame_size)


def mean_l1_bytes(frame_size: Any, frame_mix: Any = "") -> float:
    """Mean bytes per frame at layer 1 of a (user-side) frame size or mix: frame + 20 [bytes]."""
    mix = _mix_name(frame_mix)
    return get(mix).mean_l1_bytes() if mix else float(frame_size) + L1_OVERHEAD


def _mix_name(value: Any) -> str:
    """A frame_mix column's value as a name ("" for none: also NaN/None of records without it)."""
    return value if isinstance(value, str) else ""
