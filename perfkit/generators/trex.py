"""``TRexGenerator``: the ``Generator`` interface on a TRex stateless (STL) server, for lab testbeds.

One trial follows the client flow of seed 001: reset the ports -> L2 or L3 mode -> add the streams
-> (capture) -> clear the counters -> ``start(duration)`` -> ``wait_on_traffic`` -> ``get_stats``.

The streams are perfkit's traffic profile in TRex's terms (``perfkit.trex.streams``), the counters
become the trial's result in ``perfkit.trex.stats``. TRex's own client library does the work, but
never in this process: importing it swaps scapy for its bundled 2.4.3. A TRex worker
(``perfkit.trex.client``, TRex's Python) turns the stream specs into real ``STLStream`` objects and
runs the session with TRex's real ``STLClient``.
"""
from __future__ import annotations

import base64
import math
import os
import time
from pathlib import Path
from typing import Any

from perfkit.dataplane import NO_MODEL_NOTE, Traffic
from perfkit.errors import ConfigError, PerfkitError
from perfkit.generators.base import Generator
from perfkit.scenario import Scenario
from perfkit.trex.client import TRexWorker, int_keys
from perfkit.trex.stats import stats_to_result
from perfkit.trex.streams import LATENCY_PPS, RANDOM_SEED, build_streams
from perfkit.trial import TrialResult

#: Environment variable naming the TRex server when no ``server`` option is given.
ENV_SERVER = "PERFKIT_TREX_SERVER"
#: TRex's default ZMQ ports: JSON-RPC requests (sync) and the publisher (async).
SYNC_PORT, ASYNC_PORT = 4501, 4500
#: (tx port, rx port) by the DUT port the traffic enters (``Traffic.ingress``) when not given.
DEFAULT_PORTS = {"a": (0, 1), "b": (1, 0)}
CAPTURE_COUNT = 64
CAPTURE_FILTER = "ip or (vlan and ip)"
"""BPF filter of the RX capture: only IPv4 (not ARP, LLDP), so only DUT output is checked."""
WAIT_MARGIN = 10.0
"""Seconds ``wait_on_traffic`` may take beyond the sending time."""
CALL_TIMEOUT = 120.0
"""Seconds one TRex operation may take in the worker (connect, ARP resolution ...) before it is
stopped; the client's own timeouts (3 s per RPC, ``wait_on_traffic``'s) normally fire first."""


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
        why = [w for f in frames if (w := self.scenario.dp.output_check(self.profile, f))]
        result.mismatched_packets = len(why)
        if not self.scenario.dp.has_model:
            result.notes.append(NO_MODEL_NOTE)
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
