"""A description's traffic: the user's TRex STL profile, as the local generator sends it.

The profile is loaded by TRex's own library with the scenario's tunables (``perfkit.stl.profile``)
and compiled for the testbed (``perfkit.testbed.stlgen.for_testbed``: perfkit's signature where it
fits, addresses mapped into the testbed's ranges). The XDP generator sends its streams
(``DescribedTraffic.stl_profile``) exactly as it sends a ``--trex-profile``; ``packet`` gives a
stream's frame with a signature, for BPF_PROG_TEST_RUN and the model. The profile's own field
engine is TRex's; ``field_engine`` (perfkit's, for other backends) varies nothing.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

from perfkit.dataplane import PortMacs, Traffic
from perfkit.describe.schema import Description
from perfkit.errors import ConfigError
from perfkit.stl import profile as stlprofile
from perfkit.stl.fieldengine import FieldEngine, flow_engine
from perfkit.stl.macs import testbed_macs
from perfkit.stl.profile import StlProfile
from perfkit.stl.signature import SIGNATURE, SIGNATURE_MAGIC
from perfkit.testbed import stlgen
from perfkit.testbed.stlgen import Compiled

#: The model's signature: the expected output frame (bytes), or a verdict (``XDP_DROP`` ...), for an input frame.
Model = Callable[[bytes, "DescribedTraffic"], Any]


@dataclass(frozen=True)
class DescribedTraffic(Traffic):
    """The traffic of one scenario of a description."""

    frame_size: int
    flows: int
    stl_profile: StlProfile = field(compare=False)
    """What the XDP generator sends (``perfkit.generators.xdp``)."""
    compiled: Compiled = field(compare=False)
    params: tuple[tuple[str, Any], ...] = ()
    ingress: str = "a"
    verdict: str = "XDP_REDIRECT"
    """The verdict its packets should get (``Traffic.verdict``)."""
    socket: tuple[str, int] | None = None
    macs: PortMacs = field(default_factory=PortMacs)
    model: Model | None = field(default=None, compare=False)

    @property
    def to_socket(self) -> tuple[str, int] | None:
        return self.socket

    @property
    def streams(self) -> int:
        return len(self.compiled.streams)

    def packet(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """Stream ``stream``'s frame (without FCS) with a signature where the generator writes one,
        addressed from the tester to the DUT's ingress port."""
        s = self.compiled.streams[stream % self.streams]
        frame = bytearray(s.frame)
        src, dst = self.macs.into(self.ingress)
        frame[0:6], frame[6:12] = bytes.fromhex(dst.replace(":", "")), bytes.fromhex(src.replace(":", ""))
        if s.sig_offset:
            SIGNATURE.pack_into(frame, s.sig_offset, SIGNATURE_MAGIC, stream, seq, ts)
        return bytes(frame)

    def expected_output(self, flow: int = 0, seq: int = 0, stream: int = 0, ts: int = 0) -> bytes:
        """The model's output frame for ``packet(...)``; ConfigError without a model, or when the
        model gives a verdict rather than a frame."""
        if self.model is None:
            raise ConfigError("model", None, "a model (module:function) in the description: it has none")
        out = self.model(self.packet(flow, seq, stream, ts), self)
        if not isinstance(out, (bytes, bytearray)):
            raise ConfigError("model", out, "an output frame (bytes) for a forwarded packet")
        return bytes(out)

    @property
    def output_frame_size(self) -> int:
        """The model's output size; without a model, the offered size (what the MTU is set up for)."""
        if self.model is None or self.verdict in ("XDP_DROP", "XDP_PASS"):
            return self.wire_frame_size
        return super().output_frame_size

    def field_engine(self, flow_op: str = "inc") -> FieldEngine:
        return flow_engine([], 1, [], [], self.compiled.sig_offset, flow_op)

    def on_ports(self, macs: PortMacs) -> DescribedTraffic:
        return dataclasses.replace(self, macs=macs)


def profile_words(desc: Description, frame_size: int, flows: int, params: dict[str, Any]) -> list[str]:
    """The profile's tunables for a scenario, ``KEY=VALUE``."""
    spec = desc.traffic
    words = [f"{t.name}={params.get(t.name, t.default)}" for t in spec.tunables]
    if spec.frame_size:
        words.append(f"{spec.frame_size}={frame_size}")
    if spec.flows:
        words.append(f"{spec.flows}={flows}")
    return words


def build(desc: Description, frame_size: int, flows: int, params: dict[str, Any],
          model: Model | None = None) -> DescribedTraffic:
    """The traffic of a scenario: the profile loaded with its tunables (cached: TRex's library takes
    seconds to load one)."""
    spec = desc.traffic
    words = profile_words(desc, frame_size, flows, params)
    profile, compiled = _load(str(spec.profile), tuple(words), spec.ingress, spec.profile.stat().st_mtime_ns)
    own = tuple(sorted((k, v) for k, v in params.items()))
    return DescribedTraffic(frame_size=frame_size, flows=flows, stl_profile=profile, compiled=compiled, params=own,
                            ingress=spec.ingress, verdict=spec.verdict, socket=spec.socket, model=model)


@lru_cache(maxsize=64)
def _load(path: str, words: tuple[str, ...], ingress: str, _mtime: int) -> tuple[StlProfile, Compiled]:
    port = stlprofile.port_of(ingress)
    profile = stlprofile.load(path, list(words), port, macs=testbed_macs(port))
    return profile, stlgen.for_testbed(profile)

