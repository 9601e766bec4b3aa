"""TRex STL profiles for perfkit's local XDP generator: the streams a profile gives TRex, read from
the JSON a TRex server receives (``perfkit.trex.client.load_profile``: the real
``STLProfile.load_py(...).to_json()`` in TRex's own environment), checked for what the local
generator can send, and held as plain data (``StlProfile``).

What the local generator sends: continuous streams, single bursts and multi-bursts (several, at
their relative rates; a stream's ISG delays its start, a multi-burst's IBG separates its bursts),
each a frame and its field engine -- ``flow_var`` (inc, dec, random; sizes 1, 2, 4, 8; min, max, step,
init), ``tuple_flow_var``, ``write_flow_var`` (``add_value``; ``offset_fixup`` is already part of
``pkt_offset`` in the JSON), ``write_mask_flow_var``, ``fix_checksum_ipv4``, ``fix_checksum_hw``
(IPv4 header, TCP, UDP) and ``fix_checksum_icmpv6``. Everything else is refused with one line
naming the mode or instruction (``ConfigError``): next-stream chains,
streams that do not start by themselves, flow statistics and latency streams, ``next_var`` and
``value_list`` variables, ``flow_var_rand_limit``, ``trim_pkt_size`` and the VM's cache.

The semantics of the field engine (what TRex puts in the n-th packet) are in ``perfkit.stl.vm``;
how the XDP generator runs it, in ``perfkit.testbed.stlgen``. The frames are TRex's as sent
(``perfkit.stl.macs``): MAC addresses by the stream's override flags and the port's, padded to 60
bytes.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from perfkit.errors import ConfigError
from perfkit.stl.macs import PortMacs, as_sent
from perfkit.trex.client import load_profile

#: The instructions the local generator runs.
SUPPORTED_INSTRUCTIONS = ("flow_var", "tuple_flow_var", "write_flow_var", "write_mask_flow_var", "fix_checksum_ipv4",
                          "fix_checksum_hw", "fix_checksum_icmpv6")
SUPPORTED_MODES = ("continuous", "single_burst", "multi_burst")
RATE_TYPES = ("pps", "bps_L1", "bps_L2", "percentage")
VAR_OPS = ("inc", "dec", "random")
VAR_SIZES = (1, 2, 4, 8)
#: TRex's CTRexVmInsFixHwCs.L4_TYPE_*.
L4_UDP, L4_TCP, L4_IP = 11, 13, 17
#: Ethernet preamble + inter-frame gap, and FCS [bytes]: what TRex's L1/L2 rates count beyond the frame.
L1_EXTRA, FCS = 20, 4


@dataclass(frozen=True)
class VarSpec:
    """A flow variable (``flow_var``) or the IP/port pair of a ``tuple_flow_var``."""

    name: str
    op: str
    """inc, dec, random, or tuple."""
    size: int
    """Bytes (1, 2, 4, 8); a tuple's IP is 4 bytes, its port 2."""
    min: int
    max: int
    """Inclusive."""
    step: int = 1
    init: int = 0
    """The first packet's value (TRex: ``init_value``; defaults to min for inc, max for dec)."""
    port_min: int = 0
    port_max: int = 0
    limit: int = 0
    """tuple: flows before the walk restarts (``limit_flows``); 0: no limit."""


@dataclass(frozen=True)
class Instr:
    """One VM instruction in the profile's order."""

    kind: str
    """update (of ``var``), write, write_mask, csum_ipv4, csum_hw, csum_icmpv6."""
    var: int = -1
    """Index into ``StlStream.vars``."""
    port: bool = False
    """Writes: the source is the tuple variable's port (``<name>.port``), not its IP."""
    offset: int = 0
    """Writes: byte offset in the frame; csum_ipv4: the IPv4 header's offset."""
    size: int = 0
    """Writes: bytes written (the variable's size); write_mask: ``pkt_cast_size``."""
    add: int = 0
    big_endian: bool = True
    mask: int = 0
    shift: int = 0
    l2_len: int = 0
    """csum_hw, csum_icmpv6: the L3 header's offset."""
    l3_len: int = 0
    """csum_hw, csum_icmpv6: the L3 header's length."""
    l4_type: int = 0
    """csum_hw: L4_UDP, L4_TCP or L4_IP."""


@dataclass(frozen=True)
class StlStream:
    """One stream: its frame (without FCS, as TRex sends it), rate, mode and field engine."""

    name: str
    frame: bytes
    rate: float
    rate_type: str
    """One of RATE_TYPES; ``pps()`` turns it into packets per second."""
    vars: tuple[VarSpec, ...]
    program: tuple[Instr, ...]
    flags: int = 0
    """TRex's stream flags: bit 0 the packet's source MAC, bits 1-2 the destination's origin (``perfkit.stl.macs``)."""
    isg: float = 0.0
    """Start delay (TRex's inter-stream gap) [us]."""
    count: int = 0
    """Packets the stream sends in all (bursts); 0: continuous."""
    burst: int = 0
    """Packets per burst of a multi-burst (``pkts_per_burst``); 0: one burst."""
    ibg: float = 0.0
    """Gap after each burst of a multi-burst (TRex's inter-burst gap) [us]."""

    def pps(self) -> float:
        """The stream's rate in packets/s (percentage: per cent, comparable between streams only)."""
        if self.rate_type == "bps_L1":
            return self.rate / ((len(self.frame) + FCS + L1_EXTRA) * 8)
        if self.rate_type == "bps_L2":
            return self.rate / ((len(self.frame) + FCS) * 8)
        return self.rate


@dataclass(frozen=True)
class StlProfile:
    """A TRex STL profile as the local generator sends it."""

    source: str
    """The profile's path and tunables, for people."""
    streams: tuple[StlStream, ...]

    def mean_wire_size(self) -> float:
        """Bytes per frame (FCS included), averaged over the streams at their relative rates."""
        return sum(share * (len(s.frame) + FCS) for share, s in zip(self.shares(), self.streams))

    def shares(self) -> list[float]:
        """Each stream's share of the packets (relative rates)."""
        types = {s.rate_type == "percentage" for s in self.streams}
        if len(types) > 1:
            raise ConfigError("stream rates", [s.rate_type for s in self.streams],
                              "all percentages or none (a percentage of the line rate has no packet rate here)")
        total = sum(s.pps() for s in self.streams)
        return [s.pps() / total for s in self.streams]


# -- loading ----------------------------------------------------------------------------------------
def load(path: str | Path, tunables: Sequence[str] = (), port_id: int = 0, parity: int | None = None,
         macs: PortMacs | None = None) -> StlProfile:
    """Load the profile at ``path`` with TRex's own library (in its worker process) and check it, as
    TRex's console loads it for port ``port_id`` (profiles get ``parity``, by default ``port_id % 2``,
    as their direction argument); frames carry the MACs TRex sends from a port with ``macs`` (None:
    the packet's own)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("--trex-profile", str(path), "an existing TRex STL profile (.py)")
    if p.suffix.lower() != ".py":
        raise ConfigError("--trex-profile", str(path), "a Python STL profile (.py); pcap and YAML profiles (bursts "
                          "chained by next streams) are not supported by the local generator")
    words = check_tunables(tunables)
    streams = streams_of(p, words, port_id, parity)
    return parse(streams, f"{p}" + (f" -t {','.join(words)}" if words else ""), macs)


#: Streams this process was given for a profile instead of loading it with TRex's library, by
#: ``given_key``: a lab host has no TRex library, the controller loads the profile of a description
#: and sends its streams with it (``perfkit.lab.descriptions``).
GIVEN: dict[tuple[str, tuple[str, ...], int, int], list[dict[str, Any]]] = {}


def given_key(path: str | Path, tunables: Sequence[str], port_id: int, parity: int | None = None
              ) -> tuple[str, tuple[str, ...], int, int]:
    return (str(Path(path).resolve()), tuple(check_tunables(tunables)), int(port_id),
            int(port_id) % 2 if parity is None else int(parity))


def streams_of(path: str | Path, tunables: Sequence[str], port_id: int, parity: int | None = None) -> list[dict[str, Any]]:
    """The profile's streams as TRex's library builds them (JSON-ready), or as this process was given them."""
    key = given_key(path, tunables, port_id, parity)
    if key in GIVEN:
        return GIVEN[key]
    words = list(key[1])
    return load_profile(str(path), [",".join(words)] if words else [], port_id, key[3])


def port_of(ingress: str) -> int:
    """The TRex port that sends traffic entering the DUT's port ``ingress``: TRex port 0 faces the
    DUT's first port (``a``), port 1 its second."""
    return 0 if ingress == "a" else 1


def check_tunables(values: Sequence[str] | None) -> list[str]:
    """``-t KEY=VALUE`` options (``-t a=1 -t b=2`` or ``-t a=1,b=2``) as TRex's console passes them."""
    out: list[str] = []
    for item in values or ():
        for part in str(item).split(","):
            key, eq, _ = part.partition("=")
            if not eq or not key.strip() or key.strip().startswith("-"):
                raise ConfigError("-t", item, "KEY=VALUE (several: -t a=1 -t b=2 or -t a=1,b=2)")
            out.append(part.strip())
    return out


def parse(streams: list[dict[str, Any]], source: str = "profile", macs: PortMacs | None = None) -> StlProfile:
    """The streams of ``STLProfile.to_json()`` as an ``StlProfile``, frames as TRex sends them from a
    port with ``macs`` (``perfkit.stl.macs.as_sent``); anything the local generator cannot send is
    refused with one line naming it."""
    if not streams:
        raise ConfigError("streams", 0, "a profile with at least one stream")
    enabled = [(i, s) for i, s in enumerate(streams) if s.get("enabled", True)]
    if not enabled:
        raise ConfigError("streams", "all disabled", "at least one enabled stream")
    return StlProfile(source, tuple(_stream(i, s, macs) for i, s in enabled))


def _stream(i: int, s: dict[str, Any], macs: PortMacs | None = None) -> StlStream:
    name = s.get("name") or f"stream {i}"
    where = f"stream {i}" + (f" ({s['name']})" if s.get("name") else "")
    if s.get("next") or s.get("next_stream_id", -1) not in (-1, None):
        raise ConfigError(f"{where} next", s.get("next") or s.get("next_stream_id"),
                          "none (next-stream chains are not supported by the local generator)")
    if not s.get("self_start", True):
        raise ConfigError(f"{where} self_start", False, "true (streams started by others are not supported)")
    mode = s.get("mode", {})
    if mode.get("type") not in SUPPORTED_MODES:
        raise ConfigError(f"{where} mode", mode.get("type"), ", ".join(SUPPORTED_MODES))
    isg = float(s.get("isg", 0) or 0)
    if not 0 <= isg < 3600e6:
        raise ConfigError(f"{where} isg", s["isg"], "0 .. 3600e6 us (a start delay)")
    count, burst, ibg = _bursts(where, mode)
    if s.get("start_paused"):
        raise ConfigError(f"{where} start_paused", True, "false")
    stats = s.get("flow_stats", {}) or {}
    if stats.get("enabled"):
        kind = "latency" if stats.get("rule_type") == "latency" else "stats"
        raise ConfigError(f"{where} flow_stats", f"{kind} pg_id {stats.get('stream_id')}",
                          "none (per-stream counts and latency come from perfkit's sink)")
    rate = mode.get("rate", {})
    if rate.get("type") not in RATE_TYPES or not float(rate.get("value", 0)) > 0:
        raise ConfigError(f"{where} rate", rate, f"a positive rate of type {', '.join(RATE_TYPES)}")
    frame = base64.b64decode(s["packet"]["binary"])
    vm = s.get("vm", {}) or {}
    extra = sorted(set(vm) - {"instructions", "split_by_var"})
    if extra:
        raise ConfigError(f"{where} vm {extra[0]}", vm[extra[0]], "no VM cache (each packet computed)")
    variables, program = _program(where, vm.get("instructions", []), len(frame))
    flags = int(s.get("flags", 0) or 0)
    return StlStream(name, as_sent(frame, flags, macs), float(rate["value"]), rate["type"], variables, program,
                     flags, isg, count, burst, ibg)


def _bursts(where: str, mode: dict[str, Any]) -> tuple[int, int, float]:
    """(packets in all, packets per burst, gap after each burst [us]) of a stream's mode: (0, 0, 0)
    for a continuous stream."""
    kind = mode["type"]
    if kind == "continuous":
        return 0, 0, 0.0
    if kind == "single_burst":
        total = mode.get("total_pkts")
        if isinstance(total, bool) or not isinstance(total, int) or total < 1:
            raise ConfigError(f"{where} single_burst total_pkts", total, "an integer >= 1")
        return total, 0, 0.0
    ppb, bursts, ibg = mode.get("pkts_per_burst"), mode.get("count"), mode.get("ibg", 0.0)
    for key, v in (("pkts_per_burst", ppb), ("count", bursts)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{where} multi_burst {key}", v, "an integer >= 1")
    if not isinstance(ibg, (int, float)) or not 0 <= ibg < 3600e6:
        raise ConfigError(f"{where} multi_burst ibg", ibg, "0 .. 3600e6 us")
    return ppb * bursts, ppb, float(ibg)


def _program(where: str, instructions: list[dict[str, Any]],
             frame_len: int) -> tuple[tuple[VarSpec, ...], tuple[Instr, ...]]:
    """Variables and the program of one stream's VM, in the profile's order."""
    variables: list[VarSpec] = []
    names: dict[str, tuple[int, bool]] = {}  # write source -> (var index, is a tuple's port)
    for k, ins in enumerate(instructions):  # TRex builds the variable table first: writes may precede
        kind = ins.get("type")
        if kind not in SUPPORTED_INSTRUCTIONS:
            raise ConfigError(f"{where} vm instruction {k}", kind, ", ".join(SUPPORTED_INSTRUCTIONS))
        if kind == "flow_var":
            names[ins["name"]] = (len(variables), False)
            variables.append(_flow_var(f"{where} flow_var {ins['name']!r}", ins))
        elif kind == "tuple_flow_var":
            names[ins["name"] + ".ip"] = (len(variables), False)
            names[ins["name"] + ".port"] = (len(variables), True)
            variables.append(_tuple_var(f"{where} tuple_flow_var {ins['name']!r}", ins))
    program: list[Instr] = []
    for k, ins in enumerate(instructions):
        program.append(_instr(f"{where} vm instruction {k} ({ins['type']})", ins, names, variables, frame_len))
    return tuple(variables), tuple(program)


def _flow_var(where: str, ins: dict[str, Any]) -> VarSpec:
    if ins.get("next_var"):
        raise ConfigError(f"{where} next_var", ins["next_var"], "none (chained variables are not supported)")
    if ins.get("value_list") is not None:
        raise ConfigError(f"{where} value_list", ins["value_list"], "none: min_value/max_value ranges")
    if ins.get("op") not in VAR_OPS:
        raise ConfigError(f"{where} op", ins.get("op"), VAR_OPS)
    if ins.get("size") not in VAR_SIZES:
        raise ConfigError(f"{where} size", ins.get("size"), VAR_SIZES)
    lo, hi, step = int(ins["min_value"]), int(ins["max_value"]), int(ins.get("step", 1))
    init = ins.get("init_value")
    init = int(init) if init is not None else (hi if ins["op"] == "dec" else lo)
    top = (1 << (8 * ins["size"])) - 1
    if not 0 <= lo <= hi <= top or not lo <= init <= hi:
        raise ConfigError(f"{where} range", (init, lo, hi), f"0 <= min_value <= init_value <= max_value <= {top}")
    if step < 1:
        raise ConfigError(f"{where} step", step, "an integer >= 1")
    if ins["op"] != "random" and hi - lo + 1 == 1 << 64:  # TRex keeps step % range: 2^64 wraps to 0
        raise ConfigError(f"{where} range", (lo, hi), "fewer than 2^64 values for inc and dec")
    return VarSpec(ins["name"], ins["op"], ins["size"], lo, hi, step, init)


def _tuple_var(where: str, ins: dict[str, Any]) -> VarSpec:
    if ins.get("flags", 0):
        raise ConfigError(f"{where} flags", ins["flags"], "0 (unlimited-flows tuples are not supported)")
    lo, hi, plo, phi = (int(ins[k]) for k in ("ip_min", "ip_max", "port_min", "port_max"))
    if not (0 <= lo <= hi <= 0xFFFFFFFF and 0 <= plo <= phi <= 0xFFFF):
        raise ConfigError(f"{where} range", (lo, hi, plo, phi), "ip_min <= ip_max, port_min <= port_max")
    return VarSpec(ins["name"], "tuple", 4, lo, hi, 1, lo, plo, phi, int(ins.get("limit_flows") or 0))


def _instr(where: str, ins: dict[str, Any], names: dict[str, tuple[int, bool]], variables: list[VarSpec],
           frame_len: int) -> Instr:
    kind = ins["type"]
    if kind == "flow_var":
        return Instr("update", var=names[ins["name"]][0])
    if kind == "tuple_flow_var":
        return Instr("update", var=names[ins["name"] + ".ip"][0])
    if kind in ("write_flow_var", "write_mask_flow_var"):
        src = ins["name"]
        if src not in names:
            raise ConfigError(f"{where} name", src, ", ".join(names) or "a variable defined by the profile")
        var, port = names[src]
        size = 2 if port else variables[var].size
        off = int(ins["pkt_offset"])
        if kind == "write_flow_var":
            _inside(where, off, size, frame_len)
            return Instr("write", var, port, off, size, int(ins.get("add_value", 0)), bool(ins.get("is_big_endian", True)))
        cast = int(ins["pkt_cast_size"])
        if cast not in (1, 2, 4) or size not in (1, 2, 4):
            raise ConfigError(f"{where} pkt_cast_size", (cast, size), "1, 2 or 4, of a variable of 1, 2 or 4 bytes")
        if not -31 <= int(ins.get("shift", 0)) <= 31:
            raise ConfigError(f"{where} shift", ins["shift"], "-31 .. 31")
        big = bool(ins.get("is_big_endian", True))
        # TRex's little-endian read-modify-write uses the variable's size, not pkt_cast_size
        # (StreamDPOpPktWrMask::wr, trex-core src/stx/stl/trex_stl_stream_vm.cpp)
        width = cast if big else size
        _inside(where, off, width, frame_len)
        return Instr("write_mask", var, port, off, width, int(ins.get("add_value", 0)), big,
                     int(ins["mask"]) & 0xFFFFFFFF, int(ins.get("shift", 0)))
    if kind == "fix_checksum_ipv4":
        _inside(where, int(ins["pkt_offset"]), 20, frame_len)
        return Instr("csum_ipv4", offset=int(ins["pkt_offset"]))
    l2, l3 = int(ins["l2_len"]), int(ins["l3_len"])
    _inside(where, l2, l3 + 8, frame_len)
    if kind == "fix_checksum_icmpv6":
        return Instr("csum_icmpv6", l2_len=l2, l3_len=l3)
    if ins.get("l4_type") not in (L4_UDP, L4_TCP, L4_IP):
        raise ConfigError(f"{where} l4_type", ins.get("l4_type"), f"{L4_UDP} (UDP), {L4_TCP} (TCP), {L4_IP} (IP)")
    return Instr("csum_hw", l2_len=l2, l3_len=l3, l4_type=int(ins["l4_type"]))


def _inside(where: str, offset: int, size: int, frame_len: int) -> None:
    if not 0 <= offset <= frame_len - size:
        raise ConfigError(f"{where} pkt_offset", offset, f"0 .. {frame_len - size} (inside the {frame_len}-byte frame)")
