"""L4 load balancer (``bpf/l4lb.bpf.c``): a Katran-like XDP balancer with Maglev hashing and IPIP
encapsulation towards the reals (L3 DSR), seeds 000 and 004.

- ``control``: load ``bpf/l4lb.bpf.c``, configure it, install VIPs, reals and Maglev tables, read
  its counters;
- ``model``: the independent reference model (what the program must emit for a frame);
- ``maglev`` and ``hashing``: Maglev's lookup table and the program's flow hash, in Python;
- ``traffic``: the frames a scenario offers (scapy) and their field engine;
- ``config``: the LB's configuration, VIPs and the address plan;
- ``layouts``: the mirror of ``bpf/include/l4lb_kern_user.h``.

Scenario parameters: ``protocol`` (udp: QUIC-like traffic to port 443; tcp: to port 80), ``vips``
(VIPs installed; flow i goes to VIP i % vips, so with fewer flows than VIPs each flow has its own
VIP and the others are idle; with more, flows must be a multiple of vips) and ``reals`` (reals per
VIP, each VIP its own). ``frame_size`` is the client's frame, FCS included, untagged; what leaves
the LB is 20 bytes longer (the IPIP header).

Seed 004's two traffic profiles are scenarios of these parameters:

- ``no_flag``, one VIP and one flow: ``vips=1`` (the default), ``flows=1``;
- ``multi_vip``, many VIPs and many flows: e.g. ``vips=16``, ``flows=1024`` (64 clients per VIP).

Forwarded packets are counted in ``fwd``; everything else the program counts (``pass``: not for a
VIP, handed to the host; ``drop_*``; ``icmp_frag_needed``) is, for the tester, not forwarded. On
several DUT cores the steering program spreads packets by their flow (addresses and ports), so each
client's packets stay on one core.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from perfkit.dataplane import (API_VERSION, BenchSpec, BpfDut, CounterCell, CounterSpec, Dataplane, DutProgram, Emitted, Param,
                               Traffic)
from perfkit.dataplanes.l4lb.config import CLIENT_BASE, CLIENT_POOL, VIP_BASE, L4lbConfig, Vip
from perfkit.dataplanes.l4lb.control import L4lb
from perfkit.dataplanes.l4lb.layouts import L4LB_MAX_VIPS, STRUCTS, L4lbStat, l4lb_stat_rec
from perfkit.dataplanes.l4lb.model import check_output, emit
from perfkit.dataplanes.l4lb.traffic import MAX_REALS_TOTAL, PROTOCOLS, SPORT_BASE, L4lbTraffic
from perfkit.encap import BY_FLOW, Encap
from perfkit.errors import ConfigError
from perfkit.layouts import IPPROTO_IPIP

#: The counter of packets tunnelled to a real (the only forwarding one).
FWD = L4lbStat.L4LB_FWD.label
#: Distinct flows (client address and port) prog-bench cycles through, each run the next one.
BENCH_FLOWS = CLIENT_POOL
DEFAULT_REALS = 16
#: The tunnel to the reals: IPv4 in IPv4 (RFC 2003), no header of its own.
IPIP = Encap("IPIP", ip_proto=IPPROTO_IPIP)
#: What the LB exports besides its outcomes (``perfkit exporter``): forwarded packets and bytes per
#: VIP (``vip_stats``) and per real (``real_stats``).
COUNTERS = (
    CounterSpec("perfkit_l4lb_vip_packets_total", "Packets the L4 LB forwarded for a VIP (address:port/protocol).",
                ("vip",), "packets"),
    CounterSpec("perfkit_l4lb_vip_bytes_total", "Frame bytes (as received) the L4 LB forwarded for a VIP.",
                ("vip",), "bytes"),
    CounterSpec("perfkit_l4lb_real_packets_total", "Packets the L4 LB tunnelled to a real (its address), all VIPs.",
                ("real",), "packets"),
    CounterSpec("perfkit_l4lb_real_bytes_total", "Frame bytes (as received) the L4 LB tunnelled to a real.",
                ("real",), "bytes"),
)


def vip_label(vip: Vip) -> str:
    """A VIP as the exported series name it: ``198.18.0.1:80/tcp``."""
    return f"{vip.addr}:{vip.port}/{vip.proto}"


class L4lbDut(BpfDut):
    """The load balancer configured for a traffic profile: VIPs and their reals installed, the tunnels
    leaving by the port the offered frames do not enter."""

    control: L4lb
    traffic: L4lbTraffic

    def __init__(self, traffic: L4lbTraffic, ifindex_a: int, ifindex_b: int, cpumap: bool):
        egress = ifindex_b if traffic.ingress == "a" else ifindex_a
        config = dataclasses.replace(traffic.config, egress_ifindex=egress)
        super().__init__(L4lb.load(max_vips=traffic.vips, cpumap=cpumap), config, traffic)

    def fill(self) -> None:
        for vip, pool in self.traffic.pools().items():
            self.control.add_vip(vip, pool.reals)

    def counter_cells(self) -> list[CounterCell]:
        out = super().counter_cells()
        for unit in ("packets", "bytes"):
            offset = getattr(l4lb_stat_rec, unit).offset
            out += [CounterCell(f"perfkit_l4lb_vip_{unit}_total", (vip_label(v),), "vip_stats", n, offset)
                    for v, n in sorted(self.control.vip_nums.items(), key=lambda kv: kv[1])]
            out += [CounterCell(f"perfkit_l4lb_real_{unit}_total", (a,), "real_stats", i, offset)
                    for a, i in sorted(self.control.real_index.items(), key=lambda kv: kv[1])]
        return out


class L4lbDataplane(Dataplane):
    name = "l4lb"
    api_version = API_VERSION
    layouts = STRUCTS
    title = "L4 load balancer"
    params = (
        Param("protocol", "udp", "the clients' transport: udp (QUIC, to port 443) or tcp (to port 80)",
              choices=PROTOCOLS),
        Param("vips", 1, "VIPs installed (flow i goes to VIP i mod vips)", kind=int, minimum=1, maximum=L4LB_MAX_VIPS),
        Param("reals", DEFAULT_REALS, "reals per VIP (each VIP its own)", kind=int, minimum=1,
              maximum=MAX_REALS_TOTAL),
        Param("mss_clamp", False, "the VIPs lower the MSS option of TCP SYNs to what fits the tunnel (egress MTU "
              "- 60; seed 004)", kind=bool),
    )
    variant = "protocol"
    variant_labels = {"udp": "UDP (QUIC, :443)", "tcp": "TCP (:80)"}
    forward_counters = frozenset({FWD})
    steering = BY_FLOW
    encaps = (IPIP,)
    frame_size_doc = "client frame size [bytes], FCS included, untagged (tunnels out are 20 bytes longer)"

    def check(self, params: dict[str, Any]) -> None:
        if params["vips"] * params["reals"] > MAX_REALS_TOTAL:
            raise ConfigError("reals", params["reals"],
                              f"1 .. {MAX_REALS_TOTAL // params['vips']} with {params['vips']} VIPs "
                              f"(at most {MAX_REALS_TOTAL} reals in all)")

    def key_parts(self, params: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        after = [f"{params['vips']}vip"] if params["vips"] > 1 else []
        if params["reals"] != DEFAULT_REALS:
            after.append(f"{params['reals']}real")
        if params["mss_clamp"]:
            after.append("mssclamp")
        return [params["protocol"]], after

    def traffic(self, frame_size: int, flows: int, params: Mapping[str, Any]) -> L4lbTraffic:
        return L4lbTraffic(frame_size=frame_size, flows=flows, proto=params["protocol"], vips=params["vips"],
                           reals=params["reals"], mss_clamp=params["mss_clamp"])

    def load(self, traffic: Traffic, ifindex_a: int, ifindex_b: int, cpumap: bool = False) -> L4lbDut:
        assert isinstance(traffic, L4lbTraffic)
        return L4lbDut(traffic, ifindex_a, ifindex_b, cpumap)

    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        assert isinstance(traffic, L4lbTraffic)
        egress = 2 if traffic.ingress == "a" else 1
        return emit(frame, dataclasses.replace(traffic.config, egress_ifindex=egress), traffic.pools())

    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        assert isinstance(traffic, L4lbTraffic)
        return check_output(frame, traffic.config, traffic.pools())

    def bench_spec(self, frame_size: int, params: Mapping[str, Any], seed: int = 1) -> tuple[BenchSpec, DutProgram]:
        """Flow 0's frame; each run the next of ``BENCH_FLOWS`` flows in random order (client address,
        VIP address, both ports and the IPv4 checksum that goes with them): every run hashes a new
        5-tuple into a random slot of its VIP's table.

        The fields are written with the widths the program reads them (addresses and the two ports
        as 32-bit words): a narrower store right before a wider load of the same bytes would stall
        the load (no store-to-load forwarding), a harness cost the XDP_DROP baseline never pays."""
        params = self.validate(params)
        traffic = L4lbTraffic(frame_size=frame_size, flows=BENCH_FLOWS // params["vips"] * params["vips"],
                              proto=params["protocol"], vips=params["vips"], reals=params["reals"],
                              mss_clamp=params["mss_clamp"], config=L4lbConfig(egress_ifindex=1))
        frame = traffic.packet(0)
        ip, l4 = 14, 34
        fields = [(ip + 12, 4, 0), (ip + 16, 4, 4), (l4, 4, 8), (ip + 10, 2, 12)]
        dut = L4lbDut(traffic, 1, 1, cpumap=False)
        spec = BenchSpec(frame=frame, fields=tuple(fields), keys=_keys(frame, traffic, seed), path_counter=FWD,
                         expected=emit(frame, dut.config, traffic.pools()),
                         description={"protocol": traffic.proto, "vips": traffic.vips, "reals": traffic.reals})
        return spec, dut

    def min_frame_size(self, params: Mapping[str, Any]) -> int:
        return L4lbTraffic(proto=params["protocol"], frame_size=128).min_frame_size

    def counter_specs(self) -> tuple[CounterSpec, ...]:
        return super().counter_specs() + COUNTERS


def _keys(frame: bytes, traffic: L4lbTraffic, seed: int) -> np.ndarray:
    """Every flow of ``traffic`` once, in random order: client address (bytes 0-3), VIP address
    (4-7), source and destination port (8-11), IPv4 header checksum (12-13), all network order."""
    n = traffic.flows
    order = np.random.default_rng(seed).permutation(n).astype(np.uint64)
    saddr = CLIENT_BASE + order
    daddr = VIP_BASE + order % traffic.vips
    sport = (SPORT_BASE + order) & 0xFFFF
    # the template's header checksum, fixed up for the new addresses (RFC 1624: sum the 16-bit
    # words of the header with the checksum field zero, fold, complement)
    hdr = np.frombuffer(frame[14:34], dtype=">u2").astype(np.uint64)
    rest = int(hdr.sum()) - int(hdr[5]) - int(hdr[6]) - int(hdr[7]) - int(hdr[8]) - int(hdr[9])
    total = rest + (saddr >> 16) + (saddr & 0xFFFF) + (daddr >> 16) + (daddr & 0xFFFF)
    while np.any(total >> 16):
        total = (total & 0xFFFF) + (total >> 16)
    check = ~total & 0xFFFF
    keys = np.zeros((n, 16), dtype=np.uint8)
    keys[:, 0:4] = saddr.astype(">u4").view(np.uint8).reshape(-1, 4)
    keys[:, 4:8] = daddr.astype(">u4").view(np.uint8).reshape(-1, 4)
    keys[:, 8:10] = sport.astype(">u2").view(np.uint8).reshape(-1, 2)
    keys[:, 10:12] = np.frombuffer(frame[36:38], dtype=np.uint8)
    keys[:, 12:14] = check.astype(">u2").view(np.uint8).reshape(-1, 2)
    return keys


DATAPLANE = L4lbDataplane()
