"""``FakeTRexRpcServer``: a stand-in for a TRex STL server, which cannot run here (it needs DPDK,
NICs and hugepages). Only the server is fake: the client on the other end is TRex's real
``STLClient`` (lbr-trex-client 3.4.0, TRex v3.04's Python client), run by perfkit's TRex worker.

It speaks what that client speaks (``trex/common/trex_req_resp_client.py``, ``trex_subscriber.py``):
JSON-RPC 2.0 over a ZMQ REP socket (TRex's sync port, 4501 in a lab), requests zlib-compressed
behind a 8-byte header (``utils/zipmsg.py``), batches as JSON lists; and a ZMQ PUB socket (the
async port, 4500) on which ``b'{}'`` tells the client to fetch events with ``get_async_events``.
It answers the methods the client calls for connect, acquire/reset, L2/L3 and service mode,
add_stream, start/stop traffic, stats (ports, xstats, global, latency pg_ids) and capture, with
the shapes the client parses. Both sockets bind free ports on 127.0.0.1.

The wire and the DUT are simulated: ``start_traffic`` on a port sends every stream of it for the
duration (continuous: pps x duration x multiplier; single burst: total_pkts), a ``dut`` function
maps each stream's frame to the frame the RX port receives (None: dropped), ``capacity_pps``
caps what the DUT forwards. Nothing here re-implements TRex's field engine: a capture gets the
stream's template frame through the DUT, ``corrupt_capture`` damages the last one.
Every request is kept in ``requests`` (method, params) and every stream in ``streams``.
"""
from __future__ import annotations

import base64
import json
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import zmq

ZIP_MAGIC = 0xABE85CEA
"""TRex's compressed-message header magic (``ZippedMsg``)."""
VERSION = {"version": "v3.04", "build_date": "Nov 23 2026", "build_time": "00:00:00", "built_by": "fake",
           "mode": "STL"}
DEFAULT_PROFILE = "_"
"""The profile id of streams added without one (``trex/common/trex_types.py``)."""
XSTATS_NAMES = ["rx_good_packets", "tx_good_packets", "rx_good_bytes", "tx_good_bytes", "rx_missed_errors",
                "rx_errors", "tx_errors"]
SUPPORTED = ["api_sync_v2", "get_version", "get_system_info", "get_supported_cmds", "get_port_status",
             "get_port_xstats_names", "get_port_xstats_values", "get_port_stats", "get_global_stats",
             "get_utilization", "acquire", "release", "reset", "service", "set_l2", "set_l3", "set_port_attr",
             "add_stream", "remove_stream", "remove_all_streams", "get_all_streams", "start_traffic",
             "stop_traffic", "publish_now", "get_async_events", "get_active_pgids", "get_pgid_stats", "capture",
             "set_capture_port_bpf", "remove_rx_filters", "ping", "set_rx_feature", "validate", "get_tpg_status",
             "push_pkts"]
Dut = Callable[[bytes], "bytes | None"]


def _bind(socket: zmq.Socket, port: int) -> int:
    """Bind on 127.0.0.1: ``port``, or a free one when 0."""
    if port == 0:
        return socket.bind_to_random_port("tcp://127.0.0.1")
    socket.bind(f"tcp://127.0.0.1:{port}")
    return port


class RpcError(Exception):
    def __init__(self, message: str, code: int = -32000):
        super().__init__(message)
        self.code = code


@dataclass
class PortState:
    """What the server knows of one port."""

    index: int
    owner: str = ""
    handler: str = ""
    state: str = "IDLE"
    service: bool = False
    streams: dict[int, dict[str, Any]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("opackets", "ipackets", "obytes", "ibytes", "oerrors", "ierrors"), 0))
    tx_end: float = 0.0
    l2_dst: str = "00:00:00:00:00:00"
    l3: dict[str, str] | None = None
    rx_queue: bool = False
    """The RX queue feature (``set_rx_feature``): only reported in the port status here."""

    def attr(self) -> dict[str, Any]:
        mac = f"02:00:00:00:00:{self.index:02x}"
        layer = ({"ether": {"src": mac, "dst": self.l2_dst, "state": "configured"}, "ipv4": {"state": "none"}}
                 if self.l3 is None else
                 {"ether": {"src": mac, "dst": self.l3.get("resolved_mac", "00:00:00:00:00:00"),
                            "state": "configured" if "resolved_mac" in self.l3 else "unconfigured"},
                  "ipv4": {"src": self.l3["src_addr"], "dst": self.l3["dst_addr"],
                           "state": "resolved" if "resolved_mac" in self.l3 else "unresolved"}})
        return {"speed": 10000, "link": {"up": True}, "fc": {"mode": 0}, "promiscuous": {"enabled": False},
                "multicast": {"enabled": False}, "rx_filter_mode": "hw", "vlan": {"tags": []},
                "layer_cfg": layer, "vxlan_fs": []}


class FakeTRexRpcServer:
    """A fake TRex STL RPC server on 127.0.0.1 (see the module docstring). A context manager."""

    def __init__(self, ports: int = 2, dut: Dut | None = None, capacity_pps: float | None = None,
                 latency_usec: dict[int, int] | None = None, latency_range: tuple[float, float] = (12.0, 150.0),
                 corrupt_capture: bool = False, fail_on: str | None = None,
                 gateways: dict[str, str] | None = None, sync_port: int = 0, async_port: int = 0,
                 tx_seconds: float = 0.0):
        self.ports = [PortState(i) for i in range(ports)]
        self.dut: Dut = dut or (lambda frame: frame)
        self.capacity_pps = capacity_pps
        self.latency_histogram = dict(latency_usec or {10: 50, 20: 40, 100: 10})
        self.latency_range = latency_range
        self.corrupt_capture = corrupt_capture
        self.fail_on = fail_on
        """A method name answered with an error (a server refusing, e.g. start_traffic)."""
        self.tx_seconds = tx_seconds
        """How long a port stays transmitting after ``start_traffic`` (0: the simulated wire is instant)."""
        self.gateways = dict(gateways or {})
        """IPv4 -> MAC of the hosts that answer ARP requests (the DUT's gateway addresses in L3 mode)."""
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.latency: dict[int, dict[str, Any]] = {}
        self.captures: dict[int, dict[str, Any]] = {}
        self._events: list[dict[str, Any]] = []
        self._seq = 1
        self._handlers = 0
        self._ctx = zmq.Context()
        self._rep = self._ctx.socket(zmq.REP)
        self._pub = self._ctx.socket(zmq.PUB)
        self.sync_port, self.async_port = _bind(self._rep, sync_port), _bind(self._pub, async_port)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="fake-trex-rpc", daemon=True)

    # -- life cycle --------------------------------------------------------------------------------
    def start(self) -> FakeTRexRpcServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._rep.close(linger=0)
        self._pub.close(linger=0)
        self._ctx.term()

    def __enter__(self) -> FakeTRexRpcServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def method_names(self) -> list[str]:
        return [m for m, _ in self.requests]

    def calls(self, method: str) -> list[dict[str, Any]]:
        return [p for m, p in self.requests if m == method]

    def streams_of(self, port: int) -> list[dict[str, Any]]:
        """The streams the server holds for ``port`` (as ``add_stream`` received them), by id."""
        return [self.ports[port].streams[i] for i in sorted(self.ports[port].streams)]

    # -- the wire ----------------------------------------------------------------------------------
    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._rep, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            raw = self._rep.recv()
            if len(raw) >= 8 and struct.unpack(">I", raw[:4])[0] == ZIP_MAGIC:
                raw = zlib.decompress(raw[8:])
            msg = json.loads(raw)
            reply = [self._one(m) for m in msg] if isinstance(msg, list) else self._one(msg)
            self._rep.send(json.dumps(reply).encode())

    def _one(self, msg: dict[str, Any]) -> dict[str, Any]:
        method, params = msg.get("method", ""), dict(msg.get("params") or {})
        params.pop("api_h", None)
        if method not in ("get_async_events", "publish_now"):  # the subscriber polls these all the time
            self.requests.append((method, params))
        try:
            if method == self.fail_on:
                raise RpcError(f"fake TRex server: {method} failed (as the test asked)")
            handler = getattr(self, "rpc_" + method, None)
            if handler is None:
                raise RpcError(f"Method not found: {method}", -32601)
            return {"jsonrpc": "2.0", "id": msg.get("id"), "result": handler(**params)}
        except RpcError as err:
            return {"jsonrpc": "2.0", "id": msg.get("id"), "error": {"code": err.code, "message": str(err)}}

    def _port(self, port_id: int, owned: bool = True) -> PortState:
        if not 0 <= port_id < len(self.ports):
            raise RpcError(f"invalid port id: {port_id}")
        port = self.ports[port_id]
        if owned and not port.owner:
            raise RpcError(f"port {port_id} is not owned: acquire it first")
        self._finish_tx(port)
        return port

    def _publish(self, event_type: int | str, data: dict[str, Any], name: str = "trex-event") -> None:
        self._events.append({"name": name, "type": event_type, "data": data, "seq": 0})

    # -- connection --------------------------------------------------------------------------------
    def rpc_api_sync_v2(self, name: str, major: int, minor: int, **_: Any) -> dict[str, Any]:
        if name != "STL":
            raise RpcError(f"API mismatch: this fake is an STL server, not {name}")
        return {"api_h": "fakeapih"}

    def rpc_get_version(self, **_: Any) -> dict[str, Any]:
        return dict(VERSION)

    def rpc_ping(self, **_: Any) -> dict[str, Any]:
        return {}

    def rpc_get_system_info(self, **_: Any) -> dict[str, Any]:
        ports = [{"index": p.index, "driver": "net_fake", "description": "fake port", "pci_addr": f"0000:00:0{p.index}.0",
                  "numa": 0, "hw_mac": f"02:00:00:00:00:{p.index:02x}", "speed": 10, "is_virtual": True,
                  "is_fc_supported": False, "is_led_supported": False, "is_link_supported": False,
                  "is_prom_supported": True, "is_vxlan_supported": False, "is_ieee1588_supported": False,
                  "supp_speeds": [10000],
                  "rx": {"caps": ["flow_stats", "latency", "rx_bytes"], "counters": 127}} for p in self.ports]
        return {"hostname": "fake-trex", "uptime": "0", "dp_core_count": 2, "dp_core_count_per_port": 1,
                "core_type": "fake", "port_count": len(self.ports), "ports": ports}

    def rpc_get_supported_cmds(self, **_: Any) -> list[str]:
        return list(SUPPORTED)

    def rpc_publish_now(self, key: Any = None, baseline: bool = False, **_: Any) -> dict[str, Any]:
        self._publish(key, {}, name="trex-barrier")
        self._pub.send(b"{}")
        return {}

    def rpc_get_async_events(self, **_: Any) -> dict[str, Any]:
        for port in self.ports:
            self._finish_tx(port)
        events, self._events = self._events, []
        for e in events:
            e["seq"], self._seq = self._seq, self._seq + 1
        return {"data": events}

    # -- ports ---------------------------------------------------------------------------------------
    def rpc_get_port_status(self, port_id: int, **_: Any) -> dict[str, Any]:
        port = self._port(port_id, owned=False)
        return {"owner": port.owner, "state": port.state, "service": port.service, "service_filtered": False,
                "attr": port.attr(), "max_stream_id": max(port.streams, default=0),
                "rx_info": {"queue": {"is_active": port.rx_queue, "count": 0, "size": 1000},
                            "grat_arp": {"is_active": False, "interval_sec": 0}}}

    def rpc_get_port_xstats_names(self, port_id: int, **_: Any) -> dict[str, Any]:
        return {"xstats_names": list(XSTATS_NAMES)}

    def rpc_get_port_xstats_values(self, port_id: int, **_: Any) -> dict[str, Any]:
        c = self._port(port_id, owned=False).counters
        return {"xstats_values": [c["ipackets"], c["opackets"], c["ibytes"], c["obytes"], 0, c["ierrors"],
                                  c["oerrors"]]}

    def rpc_acquire(self, port_id: int, user: str = "", force: bool = False, session_id: Any = None,
                    **_: Any) -> str:
        port = self._port(port_id, owned=False)
        if port.owner and port.owner != user and not force:
            raise RpcError(f"port {port_id} is owned by {port.owner}")
        self._handlers += 1
        port.owner, port.handler = user or "perfkit", f"handler{self._handlers}"
        return port.handler

    def rpc_get_tpg_status(self, **_: Any) -> dict[str, Any]:
        return {"enabled": False}  # tagged packet groups: never enabled here

    def rpc_release(self, port_id: int, **_: Any) -> dict[str, Any]:
        port = self._port(port_id, owned=False)
        port.owner = port.handler = ""
        return {}

    def rpc_service(self, port_id: int, enabled: bool, filtered: bool = False, mask: Any = None,
                    **_: Any) -> dict[str, Any]:
        self._port(port_id).service = bool(enabled)
        return {}

    def rpc_set_l2(self, port_id: int, dst_mac: str, **_: Any) -> dict[str, Any]:
        port = self._port(port_id)
        port.l2_dst, port.l3 = dst_mac, None
        return {}

    def rpc_set_l3(self, port_id: int, src_addr: str, dst_addr: str, resolved_mac: str | None = None,
                   **_: Any) -> dict[str, Any]:
        port = self._port(port_id)
        if not port.service:
            raise RpcError("port must be in service mode to configure L3")
        port.l3 = {"src_addr": src_addr, "dst_addr": dst_addr, **({"resolved_mac": resolved_mac} if resolved_mac else {})}
        return {}

    def rpc_push_pkts(self, port_id: int, pkts: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        """Service-mode transmit: an ARP request for one of ``gateways`` is answered, and the reply is
        received by the port's active captures (TRex's ARP service listens with a capture)."""
        port = self._port(port_id)
        for pkt in pkts:
            reply = self._arp_reply(base64.b64decode(pkt["binary"]), port)
            if reply is not None:
                self._receive(port.index, reply)
        return {"ts": time.time()}

    def _receive(self, port: int, frame: bytes, count: int = 1) -> None:
        """``frame`` arrives ``count`` times on ``port``: active captures on it keep what their filter
        takes (only the difference that matters here: "arp" filters take ARP, others IPv4)."""
        is_arp = frame[12:14] == b"\x08\x06"
        for cap in self.captures.values():
            if port in cap["rx"] and cap["state"] == "ACTIVE" and is_arp == ("arp" in cap["filter"]):
                cap["frames"] += [frame] * max(0, min(count, cap["limit"] - len(cap["frames"])))

    def _arp_reply(self, frame: bytes, port: PortState) -> bytes | None:
        if len(frame) < 42 or frame[12:14] != b"\x08\x06" or frame[20:22] != b"\x00\x01":
            return None
        sender_mac, sender_ip, target_ip = frame[22:28], frame[28:32], frame[38:42]
        gw_mac = self.gateways.get(".".join(str(b) for b in target_ip))
        if gw_mac is None:
            return None
        mac = bytes.fromhex(gw_mac.replace(":", ""))
        arp = b"\x00\x01\x08\x00\x06\x04\x00\x02" + mac + target_ip + sender_mac + sender_ip
        return sender_mac + mac + b"\x08\x06" + arp + b"\0" * 18

    def rpc_set_port_attr(self, port_id: int, attr: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._port(port_id)
        return {}

    def rpc_set_rx_feature(self, port_id: int, type: str = "", enabled: bool = False, **_: Any) -> dict[str, Any]:
        if type == "queue":
            self._port(port_id).rx_queue = bool(enabled)
        return {}

    def rpc_remove_rx_filters(self, port_id: int, **_: Any) -> dict[str, Any]:
        return {}

    # -- streams and traffic -------------------------------------------------------------------------
    def rpc_add_stream(self, port_id: int, stream_id: int, stream: dict[str, Any], **_: Any) -> dict[str, Any]:
        port = self._port(port_id)
        if port.state == "TX":
            raise RpcError(f"port {port_id} is transmitting")
        port.streams[stream_id] = stream
        port.state = "STREAMS"
        return {}

    def rpc_remove_stream(self, port_id: int, stream_id: int, **_: Any) -> dict[str, Any]:
        self._port(port_id).streams.pop(stream_id, None)
        return {}

    def rpc_remove_all_streams(self, port_id: int, **_: Any) -> dict[str, Any]:
        port = self._port(port_id)
        port.streams.clear()
        port.state = "IDLE"
        return {}

    def rpc_get_all_streams(self, port_id: int, **_: Any) -> dict[str, Any]:
        return {"streams": {str(k): v for k, v in self._port(port_id, owned=False).streams.items()}}

    def rpc_validate(self, port_id: int, **_: Any) -> dict[str, Any]:
        return {"rate": {}, "graph": {"lines": [], "expected_duration": 0}}

    def rpc_start_traffic(self, port_id: int, mul: dict[str, Any], duration: float = -1, force: bool = False,
                          core_mask: Any = None, start_at_ts: float = 0, **_: Any) -> dict[str, Any]:
        port = self._port(port_id)
        if not port.streams:
            raise RpcError(f"port {port_id} has no streams")
        factor = float(mul.get("value", 1)) if mul.get("type") == "raw" else 1.0
        self._send(port, factor, duration)
        port.state = "TX"
        port.tx_end = time.monotonic() + self.tx_seconds
        self._publish(0, {"port_id": port_id})  # EVENT_PORT_STARTED
        self._publish(10, {"port_id": port_id, "profile_id": DEFAULT_PROFILE})  # EVENT_PROFILE_STARTED
        return {"multiplier": factor, "ts": time.time()}

    def rpc_stop_traffic(self, port_id: int, **_: Any) -> dict[str, Any]:
        port = self._port(port_id)
        if port.state == "TX":
            port.state = "STREAMS"
        return {}

    def _finish_tx(self, port: PortState) -> None:
        if port.state == "TX" and time.monotonic() >= port.tx_end:
            port.state = "STREAMS"
            # what tells the owner of a port that its traffic ended: EVENT_PROFILE_FINISHED_TX (the
            # client's RX-filter removal waits for it) and EVENT_PORT_JOB_DONE
            self._publish(14, {"port_id": port.index, "profile_id": DEFAULT_PROFILE})
            self._publish(4, {"port_id": port.index})

    def _send(self, port: PortState, factor: float, duration: float) -> None:
        rx = self.ports[port.index ^ 1]
        for stream in port.streams.values():
            if not stream.get("enabled", True):
                continue
            mode, frame = stream["mode"], base64.b64decode(stream["packet"]["binary"])
            pps = float(mode["rate"]["value"]) * factor
            sent = int(mode["total_pkts"]) if mode["type"] == "single_burst" else round(pps * duration)
            seconds = sent / pps
            fwd = sent if self.capacity_pps is None else min(sent, round(self.capacity_pps * seconds))
            port.counters["opackets"] += sent
            port.counters["obytes"] += sent * len(frame)
            out = self.dut(frame)
            if out is None:
                continue
            rx.counters["ipackets"] += fwd
            rx.counters["ibytes"] += fwd * len(out)
            stats = stream.get("flow_stats") or {}
            if stats.get("enabled") and stats.get("rule_type") == "latency":
                self.latency[int(stats["stream_id"])] = {"fwd": fwd, "sent": sent, "tx_port": port.index,
                                                         "size": len(frame)}
            self._receive(rx.index, out, fwd)
        for cap in self.captures.values():
            if self.corrupt_capture and cap["frames"]:
                cap["frames"][-1] = bytes([cap["frames"][-1][0] ^ 0x02]) + cap["frames"][-1][1:]

    # -- stats ---------------------------------------------------------------------------------------
    def rpc_get_port_stats(self, port_id: int, **_: Any) -> dict[str, Any]:
        c = self._port(port_id, owned=False).counters
        return {**c, "m_total_tx_bps": 0.0, "m_total_tx_pps": 0.0, "m_total_rx_bps": 0.0, "m_total_rx_pps": 0.0,
                "m_cpu_util": 0.0, "m_total_rx_bps_L1": 0.0, "m_total_tx_bps_L1": 0.0, "m_rx_drop_bps": 0.0}

    def rpc_get_global_stats(self, **_: Any) -> dict[str, Any]:
        tot = {k: sum(p.counters[k] for p in self.ports) for k in ("opackets", "ipackets", "obytes", "ibytes")}
        return {"m_cpu_util": 0.0, "m_cpu_util_raw": 0.0, "m_bw_per_core": 0.0, "m_rx_cpu_util": 0.0,
                "m_rx_core_pps": 0.0, "m_platform_factor": 1.0, "m_tx_bps": 0.0, "m_rx_bps": 0.0,
                "m_tx_pps": 0.0, "m_rx_pps": 0.0, "m_tx_cps": 0.0, "m_tx_expected_cps": 0.0,
                "m_tx_expected_pps": 0.0, "m_tx_expected_bps": 0.0, "m_total_alloc_error": 0, "m_total_queue_full": 0,
                "m_total_queue_drop": 0, "m_rx_drop_bps": 0.0, "m_active_flows": 0, "m_open_flows": 0,
                "m_total_tx_pkts": tot["opackets"], "m_total_rx_pkts": tot["ipackets"],
                "m_total_tx_bytes": tot["obytes"], "m_total_rx_bytes": tot["ibytes"],
                "m_total_nat_time_out": 0, "m_total_nat_time_out_wait_ack": 0, "m_total_nat_no_fid": 0,
                "m_total_nat_active": 0, "m_total_nat_syn_wait": 0, "m_total_nat_open": 0, "m_total_nat_learn_error": 0}

    def rpc_get_utilization(self, **_: Any) -> dict[str, Any]:
        return {"cpu": [], "mbuf_stats": {}}

    def rpc_get_active_pgids(self, **_: Any) -> dict[str, Any]:
        return {"ids": {"flow_stats": [], "latency": sorted(self.latency)}}

    def rpc_get_pgid_stats(self, pgids: list[int], **_: Any) -> dict[str, Any]:
        """The server's short keys (``trex_stl_stats.py`` translates them): ``lat`` jit/average/
        total_min/total_max/histogram [usec], ``er`` drp/ooo/dup/sth/stl; a latency stream also counts
        in ``flow_stats`` (tp/rp/tb/rb per port)."""
        lo, hi = self.latency_range
        lat: dict[str, Any] = {}
        flows: dict[str, Any] = {}
        for pg in (p for p in pgids if p in self.latency):
            got = self.latency[pg]
            lat[str(pg)] = {"lat": {"jit": 3, "average": 30.0, "total_min": lo, "total_max": hi, "last_max": hi,
                                    "histogram": {str(k): v for k, v in self.latency_histogram.items()}},
                            "er": {"drp": 0, "ooo": 0, "dup": 0, "sth": 0, "stl": 0}}
            tx, rx = got["tx_port"], got["tx_port"] ^ 1
            per_port = {"tp": {tx: got["sent"]}, "rp": {rx: got["fwd"]}, "tb": {tx: got["sent"] * got["size"]},
                        "rb": {rx: got["fwd"] * got["size"]}}
            flows[str(pg)] = {key: {str(p.index): per_port.get(key, {}).get(p.index, 0) for p in self.ports}
                              for key in ("tp", "rp", "tb", "rb", "tbs", "rbs", "tps", "rps")}
        return {"flow_stats": flows, "latency": lat, "ver_id": {str(pg): 1 for pg in self.latency}}

    # -- capture -------------------------------------------------------------------------------------
    def rpc_capture(self, command: str, **params: Any) -> dict[str, Any]:
        if command == "start":
            cid = len(self.captures) + 1
            self.captures[cid] = {"rx": list(params.get("rx", [])), "tx": list(params.get("tx", [])),
                                  "limit": int(params.get("limit", 1000)), "filter": params.get("filter", ""),
                                  "state": "ACTIVE", "frames": []}
            return {"capture_id": cid, "start_ts": time.time()}
        cap = self.captures.get(int(params.get("capture_id", -1)))
        if command == "status":
            return [{"id": i, "state": c["state"], "count": len(c["frames"]), "limit": c["limit"],
                     "filter": {"rx": c["rx"], "tx": c["tx"], "bpf": c["filter"]}} for i, c in self.captures.items()]
        if cap is None:
            raise RpcError(f"capture {params.get('capture_id')} does not exist")
        if command == "stop":
            cap["state"] = "STOPPED"
            return {"pkt_count": len(cap["frames"])}
        if command == "fetch":
            n = min(int(params.get("pkt_limit", 1000)), len(cap["frames"]))
            out, cap["frames"] = cap["frames"][:n], cap["frames"][n:]
            pkts = [{"binary": base64.b64encode(f).decode(), "ts": time.time(), "port": cap["rx"][0], "is_rx": True,
                     "index": i} for i, f in enumerate(out)]
            return {"pkts": pkts, "pending": len(cap["frames"]), "start_ts": 0.0}
        if command == "remove":
            del self.captures[int(params["capture_id"])]
            return {}
        raise RpcError(f"capture command {command!r}")

    def rpc_set_capture_port_bpf(self, **_: Any) -> dict[str, Any]:
        return {}
