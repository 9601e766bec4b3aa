"""The PGW-U (mobile core user plane, seed 001): GTP-U decapsulation uplink, encapsulation downlink.

- ``control``: load ``bpf/pgwu.bpf.c``, configure it, fill sessions, read counters;
- ``model``: the independent reference model (what the program must emit for a frame);
- ``traffic``: the frames a scenario offers (scapy) and their field engine;
- ``layouts``: the mirror of ``bpf/include/pgwu_kern_user.h``.

Scenario parameters: ``direction`` (ul: GTP-U in, decapsulated out; dl: IP in, GTP-U out; host:
UDP to the PGW-U's own address, passed to its kernel and delivered to a socket there),
``sessions`` (installed; 0 = as many as flows), ``udp_csum`` (outer UDP checksum on
encapsulation; off = zero, TS 29.281) and ``vlan`` (802.1Q on both sides: S5 VLAN and one SGi VLAN
per tenant). ``frame_size`` is the user-side (SGi) frame, FCS included, untagged; uplink frames on
the wire carry the GTP-U tunnel, 36 bytes more.

Up to ``UE_POOL`` (130560) sessions are one tenant; more are spread over 1000 tenant VLANs (seed
001; ``vlan`` on), and flows are then 1 or every session, which must be 1000 x U with U coprime to
1000: seed 001's "1M sessions over 1000 VLANs" is ``--sessions 1001000 --flows 1001000 --vlan on``
(1000 tenants x 1001 UE addresses; ``control.SessionPlan`` has the layout).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import numpy as np

from perfkit.dataplane import (API_VERSION, BenchSpec, BpfDut, CounterCell, CounterSpec, Dataplane, DutProgram, Emitted, Param,
                               Traffic)
from perfkit.dataplanes.pgwu.control import UE_POOL, Pgwu, PgwuConfig, SessionPlan, session_columns
from perfkit.dataplanes.pgwu.model import check_output, emit
from perfkit.dataplanes.pgwu.layouts import GTPU_PORT, SESSION_TABLES, STRUCTS, PgwuStat, pgwu_stat_rec
from perfkit.dataplanes.pgwu.traffic import DIRECTIONS, S5_VLAN, PgwuTraffic
from perfkit.encap import Encap, Steering, Word
from perfkit.errors import ConfigError

#: Sessions installed at least, so that tables are never trivially small.
MIN_TABLE = 1024
#: GTPv1-U over UDP (3GPP TS 29.281): an 8-byte header (flags, type, length, TEID); any of the E, S
#: and PN flags adds 4 bytes (sequence number, N-PDU number, the first extension header's type), and
#: E a chain of extension headers (length in 4-byte units first, next type last).
GTPU = Encap("GTP-U", ip_proto=17, udp_dport=GTPU_PORT, header_len=8, flags_offset=0, opt_mask=0x07, opt_len=4,
             ext_mask=0x04, ext_type_offset=11, ext_unit=4, scapy_layer="scapy.contrib.gtp")

#: What the PGW-U exports besides its outcomes (``perfkit exporter``): forwarded packets and bytes
#: per direction (ul: decapsulated, dl: encapsulated); its drop reasons are the outcomes ``drop_*``.
COUNTERS = (
    CounterSpec("perfkit_pgwu_forwarded_packets_total", "Packets the PGW-U forwarded, by direction (ul, dl).",
                ("direction",), "packets"),
    CounterSpec("perfkit_pgwu_forwarded_bytes_total",
                "Frame bytes (as received) the PGW-U forwarded, by direction (ul, dl).", ("direction",), "bytes"),
)
FORWARDED = {"ul": PgwuStat.PGWU_UL_FWD, "dl": PgwuStat.PGWU_DL_FWD}


class PgwuDut(BpfDut):
    """The PGW-U configured for a traffic profile: sessions installed, ports set."""

    control: Pgwu
    traffic: PgwuTraffic

    def __init__(self, traffic: PgwuTraffic, ifindex_a: int, ifindex_b: int, cpumap: bool):
        config = dataclasses.replace(traffic.config, s5_ifindex=ifindex_a, sgi_ifindex=ifindex_b)
        table = traffic.session_table
        size = traffic.plan.teid_slots if table == "teid_array" else traffic.plan.count
        super().__init__(Pgwu.load(max_sessions=max(size, MIN_TABLE), cpumap=cpumap, table=table), config, traffic)

    def fill(self) -> None:
        self.control.add_sessions(self.traffic.plan)

    def counter_cells(self) -> list[CounterCell]:
        return super().counter_cells() + [
            CounterCell(f"perfkit_pgwu_forwarded_{unit}_total", (direction,), "pgwu_stats", int(stat),
                        getattr(pgwu_stat_rec, unit).offset)
            for unit in ("packets", "bytes") for direction, stat in FORWARDED.items()]

    def tables(self) -> dict[str, float]:
        """Sessions installed, present in each table, missing, and ``residency`` (present / installed,
        the smaller table's): an LRU table evicts live sessions before it is full (seed 001)."""
        ul, dl = self.control.session_count()
        n = self.traffic.plan.count
        return {"sessions_installed": n, "ul_sessions_present": ul, "dl_sessions_present": dl,
                "sessions_missing": n - min(ul, dl), "residency": min(ul, dl) / n}


class PgwuDataplane(Dataplane):
    name = "pgwu"
    api_version = API_VERSION
    layouts = STRUCTS
    title = "PGW-U"
    params = (
        Param("direction", "ul", "ul: GTP-U in, decapsulated out; dl: IP in, GTP-U encapsulated out; host: UDP "
              "to the PGW-U's own address, passed to its kernel (XDP_PASS) and delivered to a socket there",
              choices=DIRECTIONS),
        Param("sessions", 0, "sessions installed in the DUT (0: as many as flows); more than 130560 are spread "
              "over 1000 tenant VLANs (vlan on; flows walking them all: 1000 x U with U coprime to 1000, e.g. "
              "1001000)", kind=int, minimum=0),
        Param("udp_csum", False, "outer UDP checksum on encapsulation (off: zero, TS 29.281)", kind=bool),
        Param("vlan", False, "802.1Q-tag both sides (S5 VLAN, one SGi VLAN per tenant)", kind=bool),
        Param("session_table", "hash", "the session tables' map type (a build option): hash (not preallocated), "
              "percpu_hash (not preallocated), lru_percpu_hash (seed 001's first: evicts live sessions) or "
              "teid_array (uplink: an array indexed by our TEID)", choices=tuple(SESSION_TABLES), build=True),
    )
    variant = "direction"
    variant_labels = {"ul": "UL (GTP-U decap)", "dl": "DL (GTP-U encap)", "host": "to the host (XDP_PASS)"}
    forward_counters = frozenset({"ul_fwd", "dl_fwd"})
    # the TEID of GTP-U packets (a tunnel's outer addresses and ports are the same for all bearers),
    # else the destination address (downlink: the UE's)
    steering = Steering((Word("ip", 16), Word("tunnel", 4)), tunnel=GTPU)
    encaps = (GTPU,)
    frame_size_doc = "user-side (SGi) frame size [bytes], FCS included, untagged"

    def check(self, params: dict[str, Any]) -> None:
        SessionPlan(count=max(params["sessions"], 1), tagged=params["vlan"])  # names the field when too many

    def key_parts(self, params: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        after = (["csum"] if params["udp_csum"] else []) + (["vlan"] if params["vlan"] else [])
        if params["session_table"] != "hash":
            after.append(params["session_table"].replace("_", ""))
        if params["sessions"]:
            after.append(f"{params['sessions']}sess")
        return [params["direction"]], after

    def legacy_params(self, record: Mapping[str, Any]) -> dict[str, Any]:
        return {"direction": record.get("direction", "ul"), "sessions": int(record.get("sessions", 0) or 0),
                "udp_csum": bool(record.get("udp_csum", False)), "vlan": bool(record.get("vlan", False)),
                "session_table": str(record.get("session_table", "hash") or "hash")}

    def traffic(self, frame_size: int, flows: int, params: Mapping[str, Any]) -> PgwuTraffic:
        return PgwuTraffic.for_params(frame_size, flows, params)

    def load(self, traffic: Traffic, ifindex_a: int, ifindex_b: int, cpumap: bool = False) -> PgwuDut:
        assert isinstance(traffic, PgwuTraffic)
        return PgwuDut(traffic, ifindex_a, ifindex_b, cpumap)

    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        assert isinstance(traffic, PgwuTraffic)
        return emit(frame, _on_testbed_ports(traffic.config), traffic.plan)

    def forwarding(self, traffic: Traffic) -> frozenset[str]:
        """Host traffic's path is the pass to the kernel."""
        assert isinstance(traffic, PgwuTraffic)
        return frozenset({"pass"}) if traffic.direction == "host" else self.forward_counters

    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        assert isinstance(traffic, PgwuTraffic)
        if traffic.direction == "host":
            return "forwarded a frame it should have passed to its kernel"
        return check_output(frame, traffic.direction, traffic.config, traffic.plan)

    def bench_spec(self, frame_size: int, params: Mapping[str, Any], seed: int = 1) -> tuple[BenchSpec, DutProgram]:
        """One flow's frame; every session hit once per pass, in random order: UL rewrites the TEID and
        inner source, DL the inner destination and (tagged) the tenant VLAN."""
        if params["direction"] == "host":
            raise ConfigError("direction", "host", "ul or dl (host traffic's cost is the kernel's: measure it on "
                              "the testbed, where the socket gets it)")
        sessions = max(int(params["sessions"]), 1)
        vlan = bool(params["vlan"]) or sessions > UE_POOL
        params = {**params, "sessions": sessions, "vlan": vlan}
        traffic = PgwuTraffic.for_params(frame_size, 1, params,
                                         config=PgwuConfig(s5_ifindex=1, sgi_ifindex=1, udp_csum=bool(params["udp_csum"]),
                                                           s5_vlan=S5_VLAN if vlan else 0))
        traffic = dataclasses.replace(traffic, config=dataclasses.replace(traffic.config,
                                                                          teid_stride=traffic.plan.teid_stride))
        frame = traffic.packet(0)
        off = traffic.offsets()
        if traffic.direction == "ul":
            fields = [(off["gtp"] + 4, 4, 0), (off["inner_ip"] + 12, 4, 4)]
        else:
            fields = [(off["inner_ip"] + 16, 4, 4)] + ([(14, 2, 8)] if vlan else [])
        dut = PgwuDut(traffic, 1, 1, cpumap=False)
        dut.control.configure(traffic.config)
        spec = BenchSpec(frame=frame, fields=tuple(fields), keys=_keys(traffic.plan, seed),
                         path_counter=f"{traffic.direction}_fwd", expected=emit(frame, traffic.config, traffic.plan),
                         description={"sessions": sessions, "vlan": vlan, "udp_csum": bool(params["udp_csum"]),
                                      "direction": traffic.direction, "session_table": traffic.session_table})
        return spec, dut

    def counter_specs(self) -> tuple[CounterSpec, ...]:
        return super().counter_specs() + COUNTERS


@functools.lru_cache(maxsize=64)
def _on_testbed_ports(config: PgwuConfig) -> PgwuConfig:
    """``config`` with the ports ``load(traffic, 1, 2)`` gives (cached: the fuzz tests call emit a million times)."""
    return dataclasses.replace(config, s5_ifindex=1, sgi_ifindex=2)


def _keys(plan: SessionPlan, seed: int) -> np.ndarray:
    """Every session once, in random order: TEID (bytes 0-3), UE address (4-7), VLAN TCI (8-9)."""
    cols = session_columns(plan)
    order = np.random.default_rng(seed).permutation(plan.count) if plan.count > 1 else np.arange(1)
    keys = np.zeros((plan.count, 16), dtype=np.uint8)
    keys[:, 0:4] = cols["ul_teid"][order].astype(">u4").view(np.uint8).reshape(-1, 4)
    keys[:, 4:8] = cols["ue_addr"][order].astype(">u4").view(np.uint8).reshape(-1, 4)
    keys[:, 8:10] = cols["tenant_vlan"][order].astype(">u2").view(np.uint8).reshape(-1, 2)
    return keys if plan.count > 1 else keys[:0]


DATAPLANE = PgwuDataplane()
