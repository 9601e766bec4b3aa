"""The packet signature: 12 bytes at the start of the (innermost) L4 payload that let the sink tell
perfkit's frames from others and count, order and time them.

Magic, stream id, sequence number and the low 32 bits of the transmit time in ns, little-endian,
written per packet by the generator (``perfkit.stl.fieldengine.FieldEngine.sig_offset``) and read
by the sink. The C side is ``struct signature`` (mirrored in ``perfkit.layouts``).
"""
from __future__ import annotations

import ctypes
import struct

from perfkit.layouts import SIGNATURE_MAGIC, signature

#: struct signature: magic (u16), stream (u16), seq (u32), tx time ns low 32 bits (u32).
SIGNATURE = struct.Struct("<HHII")
assert SIGNATURE.size == ctypes.sizeof(signature)
__all__ = ["SIGNATURE", "SIGNATURE_MAGIC"]
