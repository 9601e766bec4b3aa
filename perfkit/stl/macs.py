"""The MAC addresses TRex puts in a stream's frames, and padding to the Ethernet minimum.

TRex sends the source MAC of its port and the destination MAC of its configuration
(``trex_cfg.yaml``: ``port_info``'s ``src_mac``, ``dest_mac``), unless the stream says to keep the
packet's own: the ``flags`` of the stream's JSON (``STLStream.__init__`` in TRex's client) hold in
bit 0 ``mac_src_override_by_pkt`` and in bits 1-2 ``mac_dst_override_mode``
(``STLStreamDstMAC_CFG_FILE`` 0, ``STLStreamDstMAC_PKT`` 1, ``STLStreamDstMAC_ARP`` 2: the
gateway's resolved MAC, here the configured one). TRex's client sets them when the packet gives its
own addresses (scapy's ``Ether(src=..., dst=...)``), or as the stream's arguments say.

TRex pads frames shorter than ``MIN_FRAME`` bytes (FCS not counted) with zeros.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from perfkit.errors import ConfigError
from perfkit.testbed.topology import PORT_MACS

#: The shortest frame TRex sends [bytes, FCS not counted]: shorter ones are padded with zeros.
MIN_FRAME = 60
#: ``flags`` bit 0: the packet's source MAC is sent.
SRC_FROM_PACKET = 0x1
#: ``(flags >> 1) & 3``: where the destination MAC comes from.
DST_CFG_FILE, DST_PACKET, DST_ARP = 0, 1, 2
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")


@dataclass(frozen=True)
class PortMacs:
    """The MAC addresses of one TRex port."""

    src: bytes
    """The port's own MAC (6 bytes)."""
    dst: bytes
    """The destination its configuration gives (6 bytes)."""
    origin: str = ""
    """Where they come from, for people."""


def mac_bytes(field: str, text: str) -> bytes:
    """``aa:bb:cc:dd:ee:ff`` as 6 bytes, or a one-line refusal naming ``field``."""
    if not isinstance(text, str) or not _MAC.match(text.strip()):
        raise ConfigError(field, text, "a MAC address aa:bb:cc:dd:ee:ff")
    return bytes.fromhex(text.strip().replace(":", ""))


def testbed_macs(port: int) -> PortMacs:
    """The local testbed's: TRex port 0 is the tester port p0 facing the DUT's port a, port 1 is p1
    facing b (``perfkit.testbed.topology.PORT_MACS``)."""
    tx, dut = ("p0", "a") if port % 2 == 0 else ("p1", "b")
    return PortMacs(mac_bytes("port MAC", PORT_MACS[tx]), mac_bytes("port MAC", PORT_MACS[dut]),
                    f"the local testbed's {tx} -> {dut}")


def parse_port_mac(text: str, port: int) -> PortMacs:
    """``--port-mac SRC[,DST]``: DST defaults to the local testbed's for ``port``."""
    src, _, dst = str(text).partition(",")
    return PortMacs(mac_bytes("--port-mac", src), mac_bytes("--port-mac", dst) if dst else testbed_macs(port).dst,
                    f"--port-mac {text}")


def from_trex_cfg(path: str | Path, port: int) -> PortMacs:
    """``port_info[port]``'s ``src_mac`` and ``dest_mac`` from TRex's ``trex_cfg.yaml`` (its first
    entry; a missing ``src_mac`` is the NIC's, here the local testbed's)."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError("--trex-cfg", str(path), f"a readable TRex trex_cfg.yaml ({type(err).__name__})") from None
    entry = doc[0] if isinstance(doc, list) and doc else doc
    infos = entry.get("port_info") if isinstance(entry, dict) else None
    if not isinstance(infos, list) or port >= len(infos) or not isinstance(infos[port], dict):
        raise ConfigError("--trex-cfg port_info", str(path), f"a list with an entry for port {port}")
    info = infos[port]
    if "dest_mac" not in info:
        raise ConfigError(f"--trex-cfg port_info[{port}].dest_mac", None, "a MAC address aa:bb:cc:dd:ee:ff")
    src = mac_bytes(f"--trex-cfg port_info[{port}].src_mac", info["src_mac"]) if "src_mac" in info \
        else testbed_macs(port).src
    return PortMacs(src, mac_bytes(f"--trex-cfg port_info[{port}].dest_mac", info["dest_mac"]),
                    f"{path} port_info[{port}]")


def as_sent(frame: bytes, flags: int, macs: PortMacs | None) -> bytes:
    """``frame`` as TRex sends it from a port with ``macs`` (None: the packet's own MACs kept), padded."""
    out = bytearray(frame)
    if macs is not None and len(out) >= 12:
        if not flags & SRC_FROM_PACKET:
            out[6:12] = macs.src
        if (flags >> 1) & 3 != DST_PACKET:
            out[0:6] = macs.dst
    return bytes(out.ljust(MIN_FRAME, b"\0"))
