"""``TRexGenerator``: the ``Generator`` interface on a TRex stateless (STL) server, for lab testbeds.

One trial follows the client flow of seed 001: reset the ports -> L2 or L3 mode -> add the streams
-> (capture) -> clear the counters -> ``start(duration)`` -> ``wait_on_traffic`` -> ``get_stats``.

The data stream is perfkit's traffic profile translated 1:1 into TRex's field engine
(``vm_instructions``): flow i of the profile is the frame TRex sends when its flow variable is i.
A latency run adds a low-rate ``STLFlowLatencyStats`` stream whose rate is taken out of the data
stream's, so the port still offers exactly the intended rate.

Every name of TRex's API comes from one ``stl`` namespace (``trex.stl.api`` by default), so tests
and TRex's own console (``trex_profiles/*.py``) build streams with the same code.
"""
from __future__ import annotations

import importlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from perfkit.dataplane import Traffic
from perfkit.errors import ConfigError, PerfkitError
from perfkit.fieldengine import FieldEngine
from perfkit.generators.base import Generator
from perfkit.scenario import Scenario
from perfkit.trial import TrialResult
from perfkit.units import FCS_LEN

#: Environment variable naming the TRex server when no ``server`` option is given.
ENV_SERVER = "PERFKIT_TREX_SERVER"
STL_MODULE = "trex.stl.api"
#: (tx port, rx port) by the DUT port the traffic enters (``Traffic.ingress``) when not given.
DEFAULT_PORTS = {"a": (0, 1), "b": (1, 0)}
LATENCY_PPS = 1000.0
"""Rate of the latency stream [packets/s], at most ``LATENCY_SHARE`` of the trial's rate."""
LATENCY_SHARE = 0.1
RANDOM_SEED = 0x5EED
"""Seed of the field engine's ``random`` op: trials are reproducible."""
CAPTURE_COUNT = 64
CAPTURE_FILTER = "ip or (vlan and ip)"
"""BPF filter of the RX capture: only IPv4 (not ARP, LLDP), so only DUT output is checked."""
WAIT_MARGIN = 10.0
"""Seconds ``wait_on_traffic`` may take beyond the sending time."""
PERCENTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p99.9": 0.999}
GLOBAL_COUNTERS_NOTE = ("TRex global port counters: ARP, LLDP and any other frame on the RX port count as "
                        "received (seed 000); 'received = not lost' is an approximation")


def load_stl() -> Any:
    """TRex's STL API module, or a PerfkitError that says how to make it importable."""
    try:
        return importlib.import_module(STL_MODULE)
    except ImportError as err:
        raise PerfkitError(
            f"the TRex client library is missing ({STL_MODULE}: {err}); it ships with TRex: add "
            "<trex>/automation/trex_control_plane/interactive to PYTHONPATH (e.g. export "
            "PYTHONPATH=/opt/trex/v3.04/automation/trex_control_plane/interactive)") from err


# -- streams ---------------------------------------------------------------------------------------
def vm_instructions(stl: Any, engine: FieldEngine) -> list[Any]:
    """perfkit's field engine as TRex STLVm* instructions, offset for offset.

    Variables are 4-byte ``STLVmFlowVar`` named ``flow<i>``; 4-byte writes are ``STLVmWrFlowVar``,
    narrower ones ``STLVmWrMaskFlowVar`` (TRex writes a variable's full size otherwise). Checksums
    that a write covers are fixed: the IPv4 header with ``STLVmFixIpv4``, TCP with
    ``STLVmFixChecksumHw`` (``engine.l3_offset``/``l4_offset``: where those headers are in the frame).
    """
    out: list[Any] = [stl.STLVmFlowVar(name=f"flow{i}", min_value=v.min, max_value=v.max, size=4, step=v.step,
                                       op=v.op) for i, v in enumerate(engine.vars)]
    for w in engine.writes:
        if w.size == 4:
            out.append(stl.STLVmWrFlowVar(fv_name=f"flow{w.var}", pkt_offset=w.offset, add_val=w.add, is_big=True))
        elif w.size in (1, 2):
            out.append(stl.STLVmWrMaskFlowVar(fv_name=f"flow{w.var}", pkt_offset=w.offset, pkt_cast_size=w.size,
                                              mask=(1 << 8 * w.size) - 1, shift=0, add_value=w.add, is_big=True))
        else:
            raise ConfigError(f"field engine write {w.name} size", w.size, (1, 2, 4))
    covered = 0
    for w in engine.writes:
        covered |= w.csum_mask
    out += [_checksum_fix(stl, off, engine.l3_offset, engine.l4_offset) for i, off in enumerate(engine.csum_offsets)
            if covered >> i & 1]
    return out


def _checksum_fix(stl: Any, offset: int, inner_ip: int, inner_l4: int) -> Any:
    if offset == inner_ip + 10:
        return stl.STLVmFixIpv4(offset=inner_ip)
    if offset == inner_l4 + 16:
        return stl.STLVmFixChecksumHw(l3_offset=inner_ip, l4_offset=inner_l4,
                                      l4_type=stl.CTRexVmInsFixHwCs.L4_TYPE_TCP)
    raise ConfigError("checksum offset", offset,
                      f"the inner IPv4 ({inner_ip + 10}) or inner TCP ({inner_l4 + 16}) checksum")


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


def _mode(stl: Any, pps: float, packets: int | None) -> Any:
    return stl.STLTXCont(pps=pps) if packets is None else stl.STLTXSingleBurst(total_pkts=packets, pps=pps)


def build_streams(stl: Any, profile: Traffic, rate_pps: float, packets: int | None = None, *,
                  flow_op: str = "inc", latency_pg_id: int | None = None, latency_pps: float = LATENCY_PPS,
                  random_seed: int = RANDOM_SEED, packet_macs: bool = True) -> list[Any]:
    """The STLStreams of one trial: the profile's flows at ``rate_pps`` (a single burst of ``packets``
    if given), plus a latency stream of flow 0 when ``latency_pg_id`` is set.

    ``packet_macs``: TRex sends the profile's MAC addresses; False: the port's (its L2/L3 mode).
    """
    frame = profile.packet(0)
    frame += b"\0" * max(0, profile.wire_frame_size - FCS_LEN - len(frame))
    vm = vm_instructions(stl, profile.field_engine(flow_op))
    load = split_load(rate_pps, packets, latency_pps if latency_pg_id is not None else 0.0)
    macs = ({"mac_src_override_by_pkt": True, "mac_dst_override_mode": stl.STLStreamDstMAC_PKT} if packet_macs
            else {"mac_src_override_by_pkt": False, "mac_dst_override_mode": stl.STLStreamDstMAC_CFG_FILE})
    # pkt_buffer, not a scapy object: importing trex swaps scapy for its bundled copy (trex/__init__.py),
    # so a perfkit scapy Packet may fail TRex's type check; bytes never do.
    streams = [stl.STLStream(name="perfkit-data", mode=_mode(stl, load.data_pps, load.data_packets),
                             packet=stl.STLPktBuilder(pkt_buffer=frame, vm=stl.STLScVmRaw(vm) if vm else None),
                             random_seed=random_seed, **macs)]
    if load.latency_pps:
        streams.append(stl.STLStream(name="perfkit-latency", mode=_mode(stl, load.latency_pps, load.latency_packets),
                                     packet=stl.STLPktBuilder(pkt_buffer=frame),
                                     flow_stats=stl.STLFlowLatencyStats(pg_id=latency_pg_id), **macs))
    return streams


# -- stats -----------------------------------------------------------------------------------------
def histogram_quantile(histogram: dict[Any, int], q: float, lo: float, hi: float) -> float:
    """The q-quantile [usec] of TRex's logarithmic latency histogram: key k counts the packets from k
    to k + 10^floor(log10 k) usec (e.g. 100 -> 100..200); linear inside a bucket, clamped to [lo, hi]."""
    buckets = sorted((float(k), int(n)) for k, n in histogram.items() if int(n) > 0)
    target, seen = q * sum(n for _, n in buckets), 0
    for k, n in buckets:
        if seen + n >= target:
            return min(hi, max(lo, k + _bucket_width(k) * (target - seen) / n))
        seen += n
    return hi


def _bucket_width(k: float) -> float:
    return 10.0 ** math.floor(math.log10(k)) if k >= 1 else 10.0


def latency_ns(latency: dict[str, Any]) -> dict[str, float]:
    """TRex's per-pg_id ``latency`` dict (usec) as perfkit percentiles [ns]; empty without samples."""
    hist = latency.get("histogram") or {}
    if not any(int(n) for n in hist.values()):
        return {}
    lo, hi = float(latency["total_min"]), float(latency["total_max"])
    out = {"min": lo, **{name: histogram_quantile(hist, q, lo, hi) for name, q in PERCENTILES.items()}, "max": hi}
    mids = [(min(hi, max(lo, float(k) + _bucket_width(float(k)) / 2)), int(n)) for k, n in hist.items()]
    out["mean"] = sum(m * n for m, n in mids) / sum(n for _, n in mids)
    return {k: v * 1000.0 for k, v in out.items()}


def stats_to_result(stats: dict[Any, Any], scenario: Scenario, *, wire_frame_size: int, tx_port: int, rx_port: int,
                    rate_pps: float, duration: float, packets: int | None = None, latency_pg_id: int | None = None,
                    start_time: float = 0.0, end_time: float = 0.0) -> TrialResult:
    """TRex ``get_stats()`` output -> TrialResult. TRex counts bytes without FCS: 4 are added per frame."""
    tx, rx = stats[tx_port], stats[rx_port]
    sending = packets / rate_pps if packets else duration
    notes = [GLOBAL_COUNTERS_NOTE, "elapsed is the sending time asked of TRex (it reports no first/last packet time)"]
    lat: dict[str, float] = {}
    if latency_pg_id is not None:
        entry = stats.get("latency", {}).get(latency_pg_id) or stats.get("latency", {}).get(str(latency_pg_id), {})
        lat = latency_ns(entry.get("latency", {}))
        errs = {k: v for k, v in entry.get("err_cntrs", {}).items() if v}
        notes.append(f"latency of the latency stream (pg_id {latency_pg_id}) from TRex's logarithmic histogram: "
                     "percentiles interpolated inside buckets, mean from bucket midpoints" if lat
                     else f"no latency samples for pg_id {latency_pg_id}")
        if errs:
            notes.append(f"TRex latency stream errors: {errs}")
    for port, key in ((tx_port, "oerrors"), (rx_port, "ierrors")):
        if stats[port].get(key):
            notes.append(f"TRex port {port} {key}: {stats[port][key]}")
    if rx["ipackets"] > tx["opackets"]:
        notes.append(f"received {rx['ipackets'] - tx['opackets']} more frames than offered: foreign frames counted")
    return TrialResult.for_scenario(
        scenario, wire_frame_size=wire_frame_size, generator="trex",
        duration=sending, intended_pps=rate_pps,
        intended_packets=packets if packets is not None else max(1, round(rate_pps * duration)),
        tx_packets=tx["opackets"], rx_packets=rx["ipackets"], tx_bytes=tx["obytes"] + FCS_LEN * tx["opackets"],
        rx_bytes=rx["ibytes"] + FCS_LEN * rx["ipackets"], elapsed=sending, start_time=start_time, end_time=end_time,
        latency_ns=lat, notes=notes)


# -- the generator ---------------------------------------------------------------------------------
class TRexGenerator(Generator):
    """A TRex STL server driven through its Python client, prepared for one scenario."""

    name = "trex"

    def __init__(self, scenario: Scenario, *, server: str | None = None, tx_port: int | None = None,
                 rx_port: int | None = None, l2: dict[int, str] | None = None,
                 l3: dict[int, tuple[str, str]] | None = None, latency_pg_id: int | None = None,
                 latency_pps: float = LATENCY_PPS, capture: str | Path | None = None,
                 capture_count: int = CAPTURE_COUNT, flow_op: str = "inc", random_seed: int = RANDOM_SEED,
                 profile: Traffic | None = None, client_factory: Callable[..., Any] | None = None,
                 stl: Any = None):
        """``l2``: port -> destination MAC; ``l3``: port -> (source IPv4, gateway IPv4), resolved by ARP;
        with either, frames carry the ports' MACs, else the profile's. ``capture``: pcap path of a
        sample of RX frames, each checked against the dataplane's reference model. ``client_factory(server=...)`` makes
        the client (default ``STLClient``); ``stl``: the API namespace (default ``trex.stl.api``)."""
        super().__init__(scenario)
        self.server = server or os.environ.get(ENV_SERVER) or None
        if self.server is None and client_factory is None:
            raise ConfigError("server", None, f"a TRex server host (option server or env {ENV_SERVER})")
        default_tx, default_rx = DEFAULT_PORTS[scenario.traffic().ingress]
        self.tx_port, self.rx_port = _port("tx_port", tx_port, default_tx), _port("rx_port", rx_port, default_rx)
        self.l2, self.l3 = dict(l2 or {}), dict(l3 or {})
        if set(self.l2) & set(self.l3):
            raise ConfigError("l2/l3 ports", sorted(set(self.l2) & set(self.l3)), "each port in l2 or l3, not both")
        if latency_pg_id is not None and not (isinstance(latency_pg_id, int) and latency_pg_id >= 0):
            raise ConfigError("latency_pg_id", latency_pg_id, "an integer >= 0")
        self.latency_pg_id, self.latency_pps = latency_pg_id, float(latency_pps)
        self.capture_path = Path(capture) if capture else None
        self.capture_count = max(1, capture_count)
        self.flow_op, self.random_seed = flow_op, random_seed
        self.profile = profile or scenario.traffic()
        self.profile.field_engine(flow_op)  # validates flow_op and flows now, not at the first trial
        self.stl = stl if stl is not None else load_stl()
        factory = client_factory or (lambda server: self.stl.STLClient(server=server))
        self._client: Any = factory(server=self.server)
        try:
            self._client.connect()
        except BaseException:
            self.close()
            raise

    @property
    def ports(self) -> list[int]:
        return sorted({self.tx_port, self.rx_port})

    def measure(self, rate_pps: float, duration: float, packets: int | None = None) -> TrialResult:
        if not (rate_pps > 0 and math.isfinite(rate_pps)):
            raise ConfigError("rate", rate_pps, "a positive number of packets/s")
        if not (duration > 0 and math.isfinite(duration)):
            raise ConfigError("duration", duration, "a positive number of seconds")
        if packets is not None and not (isinstance(packets, int) and packets >= 1):
            raise ConfigError("packets", packets, "an integer >= 1")
        c = self._client
        if c is None:
            raise PerfkitError("this TRex generator is closed (disconnected): create a new one")
        c.reset(ports=self.ports)
        self._configure_ports()
        c.add_streams(build_streams(self.stl, self.profile, rate_pps, packets, flow_op=self.flow_op,
                                    latency_pg_id=self.latency_pg_id, latency_pps=self.latency_pps,
                                    random_seed=self.random_seed, packet_macs=not (self.l2 or self.l3)),
                      ports=[self.tx_port])
        capture_id = self._start_capture()
        c.clear_stats(ports=self.ports)
        sending = packets / rate_pps if packets else duration
        start = time.time()
        c.start(ports=[self.tx_port], mult="1", duration=-1 if packets else duration, force=True)
        c.wait_on_traffic(ports=[self.tx_port], timeout=math.ceil(sending + WAIT_MARGIN))
        stats = c.get_stats(ports=self.ports)
        result = stats_to_result(stats, self.scenario, wire_frame_size=self.profile.wire_frame_size,
                                 tx_port=self.tx_port, rx_port=self.rx_port, rate_pps=rate_pps, duration=duration,
                                 packets=packets, latency_pg_id=self.latency_pg_id, start_time=start,
                                 end_time=time.time())
        if capture_id is not None:
            self._check_capture(capture_id, result)
        return result

    def _configure_ports(self) -> None:
        """L2 mode (static destination MAC) and L3 mode (ARP-resolved gateway, in service mode)."""
        for port, dst_mac in self.l2.items():
            self._client.set_l2_mode(port=port, dst_mac=dst_mac)
        if self.l3:
            self._client.set_service_mode(ports=list(self.l3), enabled=True)
            try:
                for port, (src, gw) in self.l3.items():
                    self._client.set_l3_mode(port=port, src_ipv4=src, dst_ipv4=gw)
            finally:
                self._client.set_service_mode(ports=list(self.l3), enabled=False)

    def _start_capture(self) -> int | None:
        if self.capture_path is None:
            return None
        self._client.set_service_mode(ports=[self.rx_port], enabled=True)  # TRex captures in service mode
        return self._client.start_capture(rx_ports=[self.rx_port], limit=self.capture_count,
                                          bpf_filter=CAPTURE_FILTER)["id"]

    def _check_capture(self, capture_id: int, result: TrialResult) -> None:
        """Stop the capture, save it, check every frame with the dataplane's model (seed 001: TRex cannot
        tell whether what came back is right)."""
        assert self.capture_path is not None
        captured: list[dict[str, Any]] = []
        self._client.stop_capture(capture_id, output=captured)
        self._client.set_service_mode(ports=[self.rx_port], enabled=False)
        frames = [bytes(p["binary"]) for p in captured]
        _write_pcap(self.capture_path, frames)
        why = [w for f in frames if (w := self.scenario.dp.check_output(self.profile, f))]
        result.mismatched_packets = len(why)
        result.notes.append(f"RX port {self.rx_port} was in service mode to capture {len(frames)} frames")
        if why:
            result.notes.append(f"{len(why)} of {len(frames)} captured packets are not what the {self.scenario.dp.title} should emit; "
                                f"first: {why[0]}")

    def close(self) -> None:
        client, self._client = getattr(self, "_client", None), None
        if client is not None:
            client.disconnect()


def _port(field: str, value: int | None, default: int) -> int:
    if value is None:
        return default
    if not (isinstance(value, int) and value >= 0):
        raise ConfigError(field, value, "a TRex port number (an integer >= 0)")
    return value


def _write_pcap(path: Path, frames: list[bytes]) -> None:
    from scapy.utils import RawPcapWriter

    with RawPcapWriter(str(path), linktype=1, sync=True) as w:
        for f in frames:
            w.write(f)
