"""perfkit's traffic as TRex streams: the plain stream specs (``StreamSpec``) a TRex worker turns
into real ``STLStream`` objects.

The data stream is perfkit's traffic profile translated 1:1 into TRex's field engine
(``vm_instructions``): flow i of the profile is the frame TRex sends when its flow variable is i.
A latency run adds a low-rate ``STLFlowLatencyStats`` stream whose rate is taken out of the data
stream's, so the port still offers exactly the intended rate (``split_load``).

perfkit builds plain data (frame bytes, field-engine instructions named by their TRex classes,
mode, flow stats) because TRex's library never runs in perfkit's process (``perfkit.trex.worker``).
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from perfkit.dataplane import Traffic
from perfkit.errors import ConfigError
from perfkit.stl.fieldengine import FieldEngine
from perfkit.trex.client import TRexWorker, build_streams_json
from perfkit.units import FCS_LEN

LATENCY_PPS = 1000.0
"""Rate of the latency stream [packets/s], at most ``LATENCY_SHARE`` of the trial's rate."""
LATENCY_SHARE = 0.1
RANDOM_SEED = 0x5EED
"""Seed of the field engine's ``random`` op: trials are reproducible."""
IP_PROTO_TCP, IP_PROTO_UDP = 6, 17
L4_CSUM_AT = {IP_PROTO_TCP: 16, IP_PROTO_UDP: 6}
"""Where the L4 checksum is in its header, by IPv4 protocol."""


def _vm(kind: str, **args: Any) -> dict[str, Any]:
    """One field-engine instruction, named by its TRex class (the worker instantiates it)."""
    return {"type": kind, "args": args}


def vm_instructions(engine: FieldEngine, frame: bytes) -> list[dict[str, Any]]:
    """perfkit's field engine as TRex STLVm* instructions, offset for offset.

    Variables are 4-byte ``STLVmFlowVar`` named ``flow<i>`` (TRex steps every variable once per
    packet, as perfkit's generator does); 4-byte writes are ``STLVmWrFlowVar``, narrower ones
    ``STLVmWrMaskFlowVar`` (``STLVmWrFlowVar`` writes the variable's full size). Checksums a write
    covers are fixed: the IPv4 header alone with ``STLVmFixIpv4``; an L4 checksum with
    ``STLVmFixChecksumHw``, which fixes the IPv4 header too (TRex's docs: "use it if both L4 and L3
    need to be fixed"), its ``l4_type`` from the frame's IPv4 protocol (TCP: checksum at l4+16,
    UDP: l4+6).
    """
    out = [_vm("STLVmFlowVar", name=f"flow{i}", min_value=v.min, max_value=v.max, size=4, step=v.step, op=v.op)
           for i, v in enumerate(engine.vars)]
    for w in engine.writes:
        if w.size == 4:
            out.append(_vm("STLVmWrFlowVar", fv_name=f"flow{w.var}", pkt_offset=w.offset, add_val=w.add,
                           is_big=True))
        elif w.size in (1, 2):
            out.append(_vm("STLVmWrMaskFlowVar", fv_name=f"flow{w.var}", pkt_offset=w.offset, pkt_cast_size=w.size,
                           mask=(1 << 8 * w.size) - 1, shift=0, add_value=w.add, is_big=True))
        else:
            raise ConfigError(f"field engine write {w.name} size", w.size, (1, 2, 4))
    covered = 0
    for w in engine.writes:
        covered |= w.csum_mask
    fixed = [off for i, off in enumerate(engine.csum_offsets) if covered >> i & 1]
    return out + _checksum_fixes(fixed, engine.l3_offset, engine.l4_offset, frame)


def _checksum_fixes(offsets: list[int], l3: int, l4: int, frame: bytes) -> list[dict[str, Any]]:
    if not offsets:
        return []
    proto = frame[l3 + 9] if 0 <= l3 < len(frame) - 9 else -1
    l4_csum = l4 + L4_CSUM_AT[proto] if l4 >= 0 and proto in L4_CSUM_AT else None
    allowed = f"the IPv4 header checksum ({l3 + 10})" + (f" or the L4 checksum ({l4_csum})" if l4_csum else "")
    for off in offsets:
        if off not in (l3 + 10, l4_csum):
            raise ConfigError("checksum offset", off, allowed)
    if l4_csum in offsets:
        return [_vm("STLVmFixChecksumHw", l3_offset=l3, l4_offset=l4,
                    l4_type="tcp" if proto == IP_PROTO_TCP else "udp")]
    return [_vm("STLVmFixIpv4", offset=l3)]


@dataclass(frozen=True)
class Load:
    """How one trial's rate (or packet count) is shared by the data and latency streams."""

    data_pps: float
    latency_pps: float
    """0 when there is no latency stream."""
    data_packets: int | None = None
    """Single-burst counts (None: continuous streams)."""
    latency_packets: int | None = None


def split_load(rate_pps: float, packets: int | None, latency_pps: float) -> Load:
    """Give the latency stream ``latency_pps`` (at most ``LATENCY_SHARE`` of the rate), the data stream
    the rest, so that the two together offer exactly ``rate_pps`` (and ``packets``)."""
    lat = min(latency_pps, rate_pps * LATENCY_SHARE) if latency_pps > 0 else 0.0
    if packets is None:
        return Load(rate_pps - lat, lat)
    lat_packets = min(packets - 1, round(packets * lat / rate_pps))
    if lat_packets < 1:
        return Load(rate_pps, 0.0, packets, None)
    return Load(rate_pps - lat, lat, packets - lat_packets, lat_packets)


def _mode(pps: float, packets: int | None) -> dict[str, Any]:
    return ({"type": "continuous", "pps": float(pps)} if packets is None
            else {"type": "single_burst", "pps": float(pps), "total_pkts": int(packets)})


@dataclass(frozen=True)
class StreamSpec:
    """One TRex stream as plain data: what perfkit decides, for TRex's ``STLStream`` to check and
    encode (``to_request`` is what the TRex worker receives)."""

    name: str
    frame: bytes
    """Without FCS (TRex adds it)."""
    mode: dict[str, Any]
    """``{"type": "continuous", "pps": x}`` or ``{"type": "single_burst", "pps": x, "total_pkts": n}``."""
    vm: tuple[dict[str, Any], ...] = ()
    """Field-engine instructions: ``{"type": "<STLVm class>", "args": {...}}``."""
    flow_stats: dict[str, Any] | None = None
    """``{"type": "latency", "pg_id": n}``: an ``STLFlowLatencyStats`` stream."""
    random_seed: int = 0
    packet_macs: bool = True
    """True: send the frame's MAC addresses; False: the port's (its L2/L3 mode)."""

    def to_request(self) -> dict[str, Any]:
        return {"name": self.name, "frame": base64.b64encode(self.frame).decode(), "mode": dict(self.mode),
                "vm": [dict(i) for i in self.vm], "flow_stats": self.flow_stats, "random_seed": self.random_seed,
                "mac_src_override_by_pkt": self.packet_macs,
                "mac_dst_override_mode": "pkt" if self.packet_macs else "cfg"}


def build_streams(profile: Traffic, rate_pps: float, packets: int | None = None, *, flow_op: str = "inc",
                  latency_pg_id: int | None = None, latency_pps: float = LATENCY_PPS,
                  random_seed: int = RANDOM_SEED, packet_macs: bool = True) -> list[StreamSpec]:
    """The streams of one trial: the profile's flows at ``rate_pps`` (a single burst of ``packets``
    if given), plus a latency stream of flow 0 when ``latency_pg_id`` is set.

    ``packet_macs``: TRex sends the profile's MAC addresses; False: the port's (its L2/L3 mode).
    """
    frame = profile.packet(0)
    frame += b"\0" * max(0, profile.wire_frame_size - FCS_LEN - len(frame))
    vm = tuple(vm_instructions(profile.field_engine(flow_op), frame))
    load = split_load(rate_pps, packets, latency_pps if latency_pg_id is not None else 0.0)
    streams = [StreamSpec("perfkit-data", frame, _mode(load.data_pps, load.data_packets), vm,
                          random_seed=random_seed, packet_macs=packet_macs)]
    if load.latency_pps:
        streams.append(StreamSpec("perfkit-latency", frame, _mode(load.latency_pps, load.latency_packets),
                                  flow_stats={"type": "latency", "pg_id": latency_pg_id}, packet_macs=packet_macs))
    return streams


def streams_json(streams: list[StreamSpec], worker: TRexWorker | None = None) -> list[dict[str, Any]]:
    """The streams as TRex's ``STLStream.to_json()`` makes them: what a TRex server receives."""
    return build_streams_json([s.to_request() for s in streams], worker=worker)
