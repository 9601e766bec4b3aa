"""What the L4 load balancer is configured with: its ``L4lbConfig``, VIPs and the address plan.

Address plan (all inside the RFC 2544 benchmarking range 198.18.0.0/15):

- clients: 198.18.0.0/16 (``CLIENT_BASE``), one address per flow;
- VIPs: 198.19.0.1 upwards (``VIP_BASE``);
- reals: 198.19.16.1 upwards (``REAL_BASE``);
- the LB's own (egress port) address, the tunnels' source: 198.19.255.5 (``LB_ADDR``); the rest of
  198.19.255.0/24 belongs to the testbed.

MACs follow PGW-U's defaults so the same testbed works: clients come in on the ingress side
(02:00:00:00:01:0x), tunnels leave on the egress side (02:00:00:00:02:0x).
"""
from __future__ import annotations

import ctypes
import ipaddress
import struct
from dataclasses import dataclass, field

from perfkit.dataplanes.l4lb.layouts import L4LB_F_XDP_TX, l4lb_config, vip_key
from perfkit.errors import ConfigError
from perfkit.netaddr import be32, ip2int, mac_bytes

CLIENT_BASE = int(ipaddress.IPv4Address("198.18.0.0"))
#: Client addresses available (one /16).
CLIENT_POOL = 65536
VIP_BASE = int(ipaddress.IPv4Address("198.19.0.1"))
REAL_BASE = int(ipaddress.IPv4Address("198.19.16.1"))
LB_ADDR = "198.19.255.5"
#: MACs of the ingress side: the client-facing port (the LB) and its peer (the client's router).
INGRESS_MAC, CLIENT_MAC = "02:00:00:00:01:01", "02:00:00:00:01:02"
PROTOS = {"tcp": 6, "udp": 17}
#: The IPIP header the tunnel adds [bytes].
ENCAP_LEN = 20


def be32_addr(addr: str) -> int:
    """An address as the u32 whose little-endian bytes are network order (a ``__be32`` field)."""
    return be32(ip2int(addr))


@dataclass(frozen=True)
class Vip:
    """A virtual service: what clients connect to."""

    addr: str
    port: int
    """Destination port (TCP or UDP)."""
    proto: str = "tcp"
    """tcp or udp."""
    mss_clamp: bool = field(default=False, compare=False)
    """Lower the MSS option of TCP SYNs to the VIP to what fits the tunnel: the egress MTU (1500 when
    unchecked) - 20 (IPIP) - 40 (IPv4 and TCP headers). An option, not part of the VIP's identity."""

    def __post_init__(self) -> None:
        if self.proto not in PROTOS:
            raise ConfigError("proto", self.proto, tuple(PROTOS))
        if not 0 <= self.port <= 65535:
            raise ConfigError("port", self.port, "0 .. 65535")
        ipaddress.IPv4Address(self.addr)

    @property
    def proto_num(self) -> int:
        return PROTOS[self.proto]

    def to_struct(self) -> vip_key:
        k = vip_key()
        k.addr, k.proto = be32_addr(self.addr), self.proto_num
        k.port = struct.unpack("=H", struct.pack("!H", self.port))[0]
        return k


@dataclass(frozen=True)
class L4lbConfig:
    """Run-time configuration (``struct l4lb_config``)."""

    lb_addr: str = LB_ADDR
    """Our address: the tunnels' outer source; traffic to it is the host's."""
    egress_ifindex: int = 0
    """Port towards the reals (bpf_redirect)."""
    egress_mtu: int = 0
    """Largest outer IPv4 packet on egress [bytes]; 0 = unchecked. DF packets bigger than
    ``egress_mtu - 20`` get ICMP frag-needed, others are dropped (``drop_too_big``)."""
    src_mac: str = "02:00:00:00:02:01"
    """Egress port's MAC."""
    dst_mac: str = "02:00:00:00:02:02"
    """Next hop towards the reals."""
    xdp_tx: bool = False
    """Send tunnels back out of the ingress port (XDP_TX, one-armed) instead of redirecting."""

    def __post_init__(self) -> None:
        if not (self.egress_mtu == 0 or 68 + ENCAP_LEN <= self.egress_mtu <= 65535):
            raise ConfigError("egress_mtu", self.egress_mtu, f"0 (unchecked) or {68 + ENCAP_LEN} .. 65535")
        ipaddress.IPv4Address(self.lb_addr)

    def to_struct(self) -> l4lb_config:
        c = l4lb_config()
        c.lb_addr, c.egress_ifindex, c.egress_mtu = be32_addr(self.lb_addr), self.egress_ifindex, self.egress_mtu
        ctypes.memmove(c.src_mac, mac_bytes(self.src_mac), 6)
        ctypes.memmove(c.dst_mac, mac_bytes(self.dst_mac), 6)
        c.flags = L4LB_F_XDP_TX if self.xdp_tx else 0
        return c
