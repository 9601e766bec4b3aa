"""What TRex puts in each packet of a stream: TRex's field engine (the STL "VM"), modelled in Python
from trex-core's data path, for one core (what ``stl-sim`` runs by default). This is the reference
the XDP generator (``perfkit.testbed.stlgen``) is checked against.

Sources followed (trex-core, ``src/stx/stl/``):

- ``trex_stl_stream_vm.h``: ``inc_mod``/``dec_mod`` -- an inc past ``max`` restarts at ``min`` and
  the restart consumes one step unit: ``min + (step - (max - cur) - 1)`` (dec mirrored); the data
  path updates a variable, then the writes that follow use the new value;
  ``StreamVmInstructionFlowMan``: the step is kept modulo the range (``m_step = step % range``);
  the variable's initial memory is ``peek_prev()`` -- one step before ``init_value`` -- so the
  first packet carries ``init_value`` itself; values live in the variable's size (1/2/4/8 bytes).
- ``StreamDPOpClientsLimit::run`` (``tuple_flow_var``): the IP advances first (step 1) and the port
  advances by one when the IP wraps, so the IP moves fastest; after ``limit_flows`` packets the walk
  restarts at (``ip_min``, ``port_min``). The first packet is (``ip_min``, ``port_min``).
- ``StreamDPOpPktWr8/16/32/64::wr``: ``var + add_value`` at the variable's size, big- or
  little-endian. ``StreamDPOpPktWrMask::wr`` (``trex_stl_stream_vm.cpp``): ``v = (u32)var +
  add_value``, shifted left by ``shift`` (right if negative); the ``pkt_cast_size`` bytes become
  ``(old & ~mask) | (v & mask)`` (little-endian: the variable's size).
- ``StreamDPOpIpv4Fix::run``: the IPv4 header checksum recomputed in place (20 bytes for 0x45,
  else the header length). ``StreamDPOpHwCsFix`` / ``StreamVm::build_program``: ``fix_checksum_hw``
  on IPv4 sets the IP checksum offload and TCP or UDP by the packet's protocol; on IPv6, TCP or UDP
  by ``l4_type``. TRex writes the pseudo-header sum and lets the NIC finish (``rte_ipv4_phdr_cksum``
  and the offload flags); here it is the finished checksum the wire carries (a UDP result of 0 goes
  out as 0xffff). A simulator without offload may show the partial sum there: diff its pcaps with
  the L4 checksum masked when the profile uses ``fix_checksum_hw``.
- The program runs in the profile's order, so a checksum fix before a write does not see it.

``random`` variables are not TRex's sequence (TRex's per-core ``fastrand`` seed is not the
profile's to choose): any value in [min, max].
"""
from __future__ import annotations

import random as _random
import struct
from dataclasses import dataclass

from perfkit.checksum import ones_sum
from perfkit.stl.profile import L4_IP, L4_TCP, Instr, StlStream, VarSpec

M64 = (1 << 64) - 1


def inc_mod(lo: int, hi: int, cur: int, step: int) -> tuple[int, bool]:
    """TRex's ``inc_mod_of``: the next value and whether it wrapped (64-bit arithmetic)."""
    left = (hi - cur) & M64
    if step <= left:
        return (cur + step) & M64, False
    return (lo + (step - left - 1)) & M64, True


def dec_mod(lo: int, hi: int, cur: int, step: int) -> int:
    """TRex's ``dec_mod``."""
    left = (cur - lo) & M64
    if step <= left:
        return (cur - step) & M64
    return (hi - (step - left - 1)) & M64


def step_of(v: VarSpec) -> int:
    """The step TRex keeps: ``step % (max - min + 1)``."""
    return v.step % (v.max - v.min + 1)


def initial(v: VarSpec) -> tuple[int, int]:
    """(value, port) in the variable's memory before the first packet (TRex ``peek_prev()``)."""
    if v.op == "tuple":  # IP one back from ip_min wraps to ip_max, and its carry takes the port back one
        ip, port = dec_mod(v.min, v.max, v.min, 1), dec_mod(v.port_min, v.port_max, v.port_min, 1)
        return ip, port
    if v.op == "inc":
        return dec_mod(v.min, v.max, v.init, step_of(v)), 0
    if v.op == "dec":
        return inc_mod(v.min, v.max, v.init, step_of(v))[0], 0
    return v.init, 0


# -- checksums -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Checksum:
    """A checksum a VM instruction keeps right: where it is and which bytes it covers."""

    field: int
    """Offset of the 16-bit checksum."""
    covers: tuple[tuple[int, int], ...]
    """Byte ranges [lo, hi) it sums (the field itself excluded); constants beside them (protocol,
    length) do not change from packet to packet."""
    udp: bool = False
    """A computed 0 goes out as 0xffff."""
    constant: int = 0
    """The pseudo-header's protocol and length, added to the sum."""
    shape: tuple[tuple[int, int], ...] = ()
    """Byte ranges that decide what it covers (header length, total length, protocol): TRex reads
    them per packet, so a write into them changes the coverage."""

    def value(self, frame: bytes | bytearray) -> int:
        s = self.constant + sum(ones_sum(frame[lo:hi]) for lo, hi in self.covers)
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        v = ~s & 0xFFFF
        return 0xFFFF if self.udp and v == 0 else v


def ipv4_checksum(frame: bytes | bytearray, off: int) -> Checksum:
    ihl = 20 if frame[off] == 0x45 else (frame[off] & 0xF) * 4
    return Checksum(off + 10, ((off, off + 10), (off + 12, off + ihl)), shape=((off, off + 1),))


def l4_checksum(frame: bytes | bytearray, l3: int, l4: int, proto: int) -> Checksum:
    """TCP (6), UDP (17) or ICMPv6 (58) over IPv4 or IPv6 at ``l3``, with its pseudo-header."""
    field = l4 + {6: 16, 17: 6, 58: 2}[proto]
    if frame[l3] >> 4 == 4:
        end = l3 + struct.unpack_from("!H", frame, l3 + 2)[0]
        pseudo, shape = (l3 + 12, l3 + 20), ((l3, l3 + 1), (l3 + 2, l3 + 4), (l3 + 9, l3 + 10))
    else:
        end = l3 + 40 + struct.unpack_from("!H", frame, l3 + 4)[0]
        pseudo, shape = (l3 + 8, l3 + 40), ((l3 + 4, l3 + 7),)
    end = min(end, len(frame))
    return Checksum(field, (pseudo, (l4, field), (field + 2, end)), udp=proto == 17, constant=proto + end - l4,
                    shape=shape)


def checksums(ins: Instr, frame: bytes | bytearray) -> list[Checksum]:
    """The checksums one instruction fixes, in the order it fixes them."""
    if ins.kind == "csum_ipv4":
        return [ipv4_checksum(frame, ins.offset)]
    l3, l4 = ins.l2_len, ins.l2_len + ins.l3_len
    if ins.kind == "csum_icmpv6":
        return [l4_checksum(frame, l3, l4, 58)]
    if frame[l3] >> 4 == 4:  # IPv4: the header's checksum, and TCP or UDP by the packet's protocol
        proto = frame[l3 + 9]
        return [ipv4_checksum(frame, l3)] + ([l4_checksum(frame, l3, l4, proto)] if proto in (6, 17) else [])
    if ins.l4_type == L4_IP:
        return []
    return [l4_checksum(frame, l3, l4, 6 if ins.l4_type == L4_TCP else 17)]


# -- the engine --------------------------------------------------------------------------------------
class Vm:
    """One stream's field engine on one core, packet after packet."""

    def __init__(self, stream: StlStream, seed: int = 1):
        self.stream = stream
        self.values = [initial(v)[0] for v in stream.vars]
        self.ports = [initial(v)[1] for v in stream.vars]
        self.flows = [0] * len(stream.vars)
        self.rng = _random.Random(seed)

    def next_frame(self) -> bytes:
        frame = bytearray(self.stream.frame)
        for ins in self.stream.program:
            if ins.kind == "update":
                self._update(ins.var)
            elif ins.kind == "write":
                self._write(frame, ins)
            elif ins.kind == "write_mask":
                self._write_mask(frame, ins)
            else:
                for c in checksums(ins, frame):
                    frame[c.field:c.field + 2] = b"\0\0"
                    frame[c.field:c.field + 2] = struct.pack("!H", c.value(frame))
        return bytes(frame)

    def frames(self, count: int) -> list[bytes]:
        return [self.next_frame() for _ in range(count)]

    def _update(self, i: int) -> None:
        v, cur = self.stream.vars[i], self.values[i]
        if v.op == "inc":
            cur = inc_mod(v.min, v.max, cur, step_of(v))[0]
        elif v.op == "dec":
            cur = dec_mod(v.min, v.max, cur, step_of(v))
        elif v.op == "random":
            cur = self.rng.randint(v.min, v.max)
        else:  # StreamDPOpClientsLimit::run on one core: IP step 1, port step 0
            cur, wrapped = inc_mod(v.min, v.max, cur, 1)
            if wrapped:
                self.ports[i] = inc_mod(v.port_min, v.port_max, self.ports[i], 1)[0] & 0xFFFF
            if v.limit:
                self.flows[i] += 1
                if self.flows[i] > v.limit:
                    self.flows[i], cur, self.ports[i] = 1, v.min, v.port_min
        self.values[i] = cur & ((1 << (8 * v.size)) - 1)

    def _source(self, ins: Instr) -> int:
        return self.ports[ins.var] if ins.port else self.values[ins.var]

    def _write(self, frame: bytearray, ins: Instr) -> None:
        val = (self._source(ins) + ins.add) & ((1 << (8 * ins.size)) - 1)
        frame[ins.offset:ins.offset + ins.size] = val.to_bytes(ins.size, "big" if ins.big_endian else "little")

    def _write_mask(self, frame: bytearray, ins: Instr) -> None:
        val = (self._source(ins) + ins.add) & 0xFFFFFFFF
        val = (val << ins.shift if ins.shift > 0 else val >> -ins.shift) & 0xFFFFFFFF
        order = "big" if ins.big_endian else "little"
        old = int.from_bytes(frame[ins.offset:ins.offset + ins.size], order)
        new = ((old & ~ins.mask) | (val & ins.mask)) & ((1 << (8 * ins.size)) - 1)
        frame[ins.offset:ins.offset + ins.size] = new.to_bytes(ins.size, order)


def frames(stream: StlStream, count: int) -> list[bytes]:
    """The first ``count`` frames TRex sends for ``stream`` (one core)."""
    return Vm(stream).frames(count)
