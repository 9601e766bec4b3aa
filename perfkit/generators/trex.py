"""``TRexGenerator``: the ``Generator`` interface on a TRex stateless (STL) server, for lab testbeds.

One trial follows the client flow of seed 001: reset the ports -> L2 or L3 mode -> add the streams
-> (capture) -> clear the counters -> ``start(duration)`` -> ``wait_on_traffic`` -> ``get_stats``.

The data stream is perfkit's traffic profile translated 1:1 into TRex's field engine
(``vm_instructions``): flow i of the profile is the frame TRex sends when its flow variable is i.
A latency run adds a low-rate ``STLFlowLatencyStats`` stream whose rate is taken out of the data
stream's, so the port still offers exactly the intended rate.

TRex's own client library does the work, but never in this process: importing it swaps scapy for
its bundled 2.4.3. perfkit builds plain stream specs (``StreamSpec``: frame bytes, field-engine
instructions named by their TRex classes, mode, flow stats) and a TRex worker
(``perfkit.trexlib``, TRex's Python) turns them into real ``STLStream`` objects and runs the
session with TRex's real ``STLClient``.
"""
from __future__ import annotations

import base64
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfkit.dataplane import Traffic
from perfkit.errors import ConfigError, PerfkitError
from perfkit.generators.base import Generator
from perfkit.scenario import Scenario
from perfkit.stl.fieldengine import FieldEngine
from perfkit.trexlib.client import TRexWorker, build_streams_json, int_keys
from perfkit.trial import TrialResult
from perfkit.units import FCS_LEN

#: Environment variable naming the TRex server when no ``server`` option is given.
ENV_SERVER = "PERFKIT_TREX_SERVER"
#: TRex's default ZMQ ports: JSON-RPC requests (sync) and the publisher (async).
SYNC_PORT, ASYNC_PORT = 4501, 4500
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
CALL_TIMEOUT = 120.0
"""Seconds one TRex operation may take in the worker (connect, ARP resolution ...) before it is
stopped; the client's own timeouts (3 s per RPC, ``wait_on_traffic``'s) normally fire first."""
PERCENTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p99.9": 0.999}
GLOBAL_COUNTERS_NOTE = ("TRex global port counters: ARP, LLDP and any other frame on the RX port count as "
                        "received (seed 000); 'received = not lost' is an approximation")
IP_PROTO_TCP, IP_PROTO_UDP = 6, 17
L4_CSUM_AT = {IP_PROTO_TCP: 16, IP_PROTO_UDP: 6}
"""Where the L4 checksum is in its header, by IPv4 protocol."""


# -- streams ---------------------------------------------------------------------------------------
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
    """A TRex STL server driven through TRex's ``STLClient`` (in a TRex worker), prepared for one scenario."""

    name = "trex"

    def __init__(self, scenario: Scenario, *, server: str | None = None, sync_port: int = SYNC_PORT,
                 async_port: int = ASYNC_PORT, tx_port: int | None = None, rx_port: int | None = None,
                 l2: dict[int, str] | None = None, l3: dict[int, tuple[str, str]] | None = None,
                 latency_pg_id: int | None = None, latency_pps: float = LATENCY_PPS,
                 capture: str | Path | None = None, capture_count: int = CAPTURE_COUNT, flow_op: str = "inc",
                 random_seed: int = RANDOM_SEED, profile: Traffic | None = None,
                 trex_python: str | Path | None = None, trex_home: str | Path | None = None):
        """``server``: the TRex host (default env ``PERFKIT_TREX_SERVER``), ``sync_port``/``async_port``
        its ZMQ ports. ``l2``: port -> destination MAC; ``l3``: port -> (source IPv4, gateway IPv4),
        resolved by ARP; with either, frames carry the ports' MACs, else the profile's. ``capture``:
        pcap path of a sample of RX frames, each checked against the dataplane's reference model.
        ``trex_python``/``trex_home``: the worker's Python and TRex installation (default: env
        ``PERFKIT_TREX_PYTHON``/``TREX_HOME``, else ``build/trex-venv`` with the PyPI client)."""
        super().__init__(scenario)
        self._worker: TRexWorker | None = None
        self.server = server or os.environ.get(ENV_SERVER) or None
        if self.server is None:
            raise ConfigError("server", None, f"a TRex server host (option server or env {ENV_SERVER})")
        self.sync_port, self.async_port = _tcp_port("sync_port", sync_port), _tcp_port("async_port", async_port)
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
        self._worker = TRexWorker(trex_python, trex_home=trex_home)
        try:
            self._call("connect", server=self.server, sync_port=self.sync_port, async_port=self.async_port)
        except BaseException:
            self.close()
            raise

    @property
    def ports(self) -> list[int]:
        return sorted({self.tx_port, self.rx_port})

    def _call(self, method: str, timeout: float = CALL_TIMEOUT, **params: Any) -> Any:
        if self._worker is None:
            raise PerfkitError("this TRex generator is closed (disconnected): create a new one")
        return self._worker.call(method, timeout=timeout, **params)

    def _client(self, name: str, *, call_timeout: float = CALL_TIMEOUT, **kwargs: Any) -> Any:
        """One ``STLClient`` method, run by the worker (``call_timeout``: how long the worker may take)."""
        return self._call("call", timeout=call_timeout, name=name, kwargs=kwargs)

    def measure(self, rate_pps: float, duration: float, packets: int | None = None) -> TrialResult:
        if not (isinstance(rate_pps, (int, float)) and rate_pps > 0 and math.isfinite(rate_pps)):
            # None: the CLI without --rate; TRex has no "as fast as it can" to fall back on
            raise ConfigError("rate", rate_pps, "a positive number of packets/s (CLI: --rate, e.g. 1Mpps)")
        if not (duration > 0 and math.isfinite(duration)):
            raise ConfigError("duration", duration, "a positive number of seconds")
        if packets is not None and not (isinstance(packets, int) and packets >= 1):
            raise ConfigError("packets", packets, "an integer >= 1")
        if self._worker is None:
            raise PerfkitError("this TRex generator is closed (disconnected): create a new one")
        self._client("reset", ports=self.ports)
        self._configure_ports()
        streams = build_streams(self.profile, rate_pps, packets, flow_op=self.flow_op,
                                latency_pg_id=self.latency_pg_id, latency_pps=self.latency_pps,
                                random_seed=self.random_seed, packet_macs=not (self.l2 or self.l3))
        self._call("add_streams", streams=[s.to_request() for s in streams], ports=[self.tx_port])
        capture_id = self._start_capture()
        self._client("clear_stats", ports=self.ports)
        sending = packets / rate_pps if packets else duration
        wait = math.ceil(sending + WAIT_MARGIN)
        start = time.time()
        self._client("start", ports=[self.tx_port], mult="1", duration=-1 if packets else duration, force=True)
        self._client("wait_on_traffic", call_timeout=wait + CALL_TIMEOUT, ports=[self.tx_port], timeout=wait)
        stats = int_keys(self._client("get_stats", ports=self.ports))
        result = stats_to_result(stats, self.scenario, wire_frame_size=self.profile.wire_frame_size,
                                 tx_port=self.tx_port, rx_port=self.rx_port, rate_pps=rate_pps, duration=duration,
                                 packets=packets, latency_pg_id=self.latency_pg_id, start_time=start,
                                 end_time=time.time())
        if capture_id is not None:
            self._check_capture(capture_id, result)
        return result

    def _configure_ports(self) -> None:
        """L2 mode (static destination MAC) and L3 mode (gateway resolved by ARP): TRex configures
        either only in service mode (``set_l2_mode`` refuses otherwise), so the ports enter it and leave it."""
        ports = sorted({*self.l2, *self.l3})
        if not ports:
            return
        self._client("set_service_mode", ports=ports, enabled=True)
        try:
            for port, dst_mac in self.l2.items():
                self._client("set_l2_mode", port=port, dst_mac=dst_mac)
            for port, (src, gw) in self.l3.items():
                self._client("set_l3_mode", port=port, src_ipv4=src, dst_ipv4=gw)
        finally:
            self._client("set_service_mode", ports=ports, enabled=False)

    def _start_capture(self) -> int | None:
        if self.capture_path is None:
            return None
        self._client("set_service_mode", ports=[self.rx_port], enabled=True)  # TRex captures in service mode
        return int(self._client("start_capture", rx_ports=[self.rx_port], limit=self.capture_count,
                                bpf_filter=CAPTURE_FILTER)["id"])

    def _check_capture(self, capture_id: int, result: TrialResult) -> None:
        """Stop the capture, save it, check every frame with the dataplane's model (seed 001: TRex cannot
        tell whether what came back is right)."""
        assert self.capture_path is not None
        captured = self._call("stop_capture", capture_id=capture_id)
        self._client("set_service_mode", ports=[self.rx_port], enabled=False)
        frames = [base64.b64decode(p["binary"]) for p in captured]
        _write_pcap(self.capture_path, frames)
        why = [w for f in frames if (w := self.scenario.dp.check_output(self.profile, f))]
        result.mismatched_packets = len(why)
        result.notes.append(f"RX port {self.rx_port} was in service mode to capture {len(frames)} frames")
        if why:
            result.notes.append(f"{len(why)} of {len(frames)} captured packets are not what the {self.scenario.dp.title} should emit; "
                                f"first: {why[0]}")

    def close(self) -> None:
        """Disconnect from TRex (the worker releases the ports) and end the worker. Idempotent."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        try:
            if worker.alive:
                worker.call("disconnect", timeout=CALL_TIMEOUT)
        except PerfkitError:
            pass  # the worker's exit disconnects too; its log keeps the reason
        finally:
            worker.close()


def _tcp_port(field: str, value: int) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535):
        raise ConfigError(field, value, "a TCP port number, 1 .. 65535")
    return value


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
