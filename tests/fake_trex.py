"""Fakes of TRex's STL client and API objects, for tests on a machine where TRex cannot run.

The fake API classes keep their constructor arguments (``kw``) and take the same parameters, with
the same checks, as the TRex sources they stand for (trex-core ``scripts/automation/
trex_control_plane/interactive/trex/stl/``): a wrong keyword or type fails here as it would there.
``apply_vm`` runs a field-engine program on a frame the way TRex's data plane does.
"""
from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any, Callable


class _Rec:
    """Keeps its constructor arguments in ``kw`` so a test can look."""

    def _keep(self, values: dict[str, Any]) -> None:
        self.kw = {k: v for k, v in values.items() if k not in ("self", "__class__")}


def _check(name: str, value: Any, types: type | tuple[type, ...]) -> None:
    if not isinstance(value, types):
        raise TypeError(f"fake TRex: {name} must be {types}, got {type(value).__name__}")


class STLVmFlowVar(_Rec):
    def __init__(self, name, init_value=None, min_value=0, max_value=255, size=4, step=1, op="inc"):
        _check("name", name, str)
        if size not in (1, 2, 4, 8) or op not in ("inc", "dec", "random") or min_value > max_value:
            raise ValueError(f"fake TRex: bad flow var {name}: size {size}, op {op}, {min_value}..{max_value}")
        self._keep(locals())


class STLVmWrFlowVar(_Rec):
    def __init__(self, fv_name, pkt_offset, offset_fixup=0, add_val=0, is_big=True):
        _check("fv_name", fv_name, str), _check("add_val", add_val, int), _check("is_big", is_big, bool)
        self._keep(locals())


class STLVmWrMaskFlowVar(_Rec):
    def __init__(self, fv_name, pkt_offset, pkt_cast_size=1, mask=0xff, shift=0, add_value=0, offset_fixup=0,
                 is_big=True):
        _check("mask", mask, int), _check("add_value", add_value, int), _check("is_big", is_big, bool)
        if pkt_cast_size not in (1, 2, 4):
            raise ValueError("fake TRex: not valid cast size")
        self._keep(locals())


class STLVmFixIpv4(_Rec):
    def __init__(self, offset):
        self._keep(locals())


class STLVmFixChecksumHw(_Rec):
    def __init__(self, l3_offset, l4_offset, l4_type):
        self._keep(locals())


class CTRexVmInsFixHwCs:
    L4_TYPE_UDP = 11
    L4_TYPE_TCP = 13


class STLScVmRaw(_Rec):
    def __init__(self, list_of_commands=None, split_by_field=None, cache_size=None):
        self._keep(locals())
        self.commands = list(list_of_commands or [])


class STLPktBuilder(_Rec):
    def __init__(self, pkt=None, pkt_buffer=None, vm=None, path_relative_to_profile=False, build_raw=False,
                 remove_fcs=True):
        _check("pkt_buffer", pkt_buffer, (type(None), bytes))
        if vm is not None and not isinstance(vm, (STLScVmRaw, list)):
            raise TypeError("fake TRex: Bad value for variable vm.")
        self._keep(locals())


class _Mode(_Rec):
    def __init__(self, pps=None, bps_L1=None, bps_L2=None, percentage=None):
        if pps is not None:
            _check("pps", pps, (float, int))
        self.pps = 1.0 if all(x is None for x in (pps, bps_L1, bps_L2, percentage)) else pps


class STLTXCont(_Mode):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._keep(kwargs)


class STLTXSingleBurst(_Mode):
    def __init__(self, total_pkts=1, **kwargs):
        _check("total_pkts", total_pkts, int)
        super().__init__(**kwargs)
        self._keep({"total_pkts": total_pkts, **kwargs})
        self.total_pkts = total_pkts


class STLFlowLatencyStats(_Rec):
    def __init__(self, pg_id, vxlan=False, ieee_1588=False):
        self._keep(locals())


class STLStream(_Rec):
    def __init__(self, name=None, packet=None, mode=None, enabled=True, self_start=True, isg=0.0, flow_stats=None,
                 next=None, stream_id=None, action_count=0, random_seed=0, mac_src_override_by_pkt=None,
                 mac_dst_override_mode=None, dummy_stream=False, start_paused=False, core_id=-1):
        _check("mode", mode, _Mode), _check("packet", packet, (type(None), STLPktBuilder))
        _check("random_seed", random_seed, int)
        self._keep(locals())


def fake_stl() -> SimpleNamespace:
    """A stand-in for the ``trex.stl.api`` module with the names perfkit uses."""
    return SimpleNamespace(
        STLClient=FakeTRexClient, STLStream=STLStream, STLPktBuilder=STLPktBuilder, STLScVmRaw=STLScVmRaw,
        STLVmFlowVar=STLVmFlowVar, STLVmWrFlowVar=STLVmWrFlowVar, STLVmWrMaskFlowVar=STLVmWrMaskFlowVar,
        STLVmFixIpv4=STLVmFixIpv4, STLVmFixChecksumHw=STLVmFixChecksumHw, CTRexVmInsFixHwCs=CTRexVmInsFixHwCs,
        STLTXCont=STLTXCont, STLTXSingleBurst=STLTXSingleBurst, STLFlowLatencyStats=STLFlowLatencyStats,
        STLStreamDstMAC_CFG_FILE=0, STLStreamDstMAC_PKT=1)


# -- TRex's field engine, as its data plane runs it ------------------------------------------------
def _csum(data: bytes) -> int:
    data += b"\0" * (len(data) % 2)
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def apply_vm(frame: bytes, vm: STLScVmRaw | None, value: int) -> bytes:
    """The frame TRex sends when every flow variable of ``vm`` holds ``value``."""
    out = bytearray(frame)
    for ins in (vm.commands if vm else []):
        kw = ins.kw
        if isinstance(ins, STLVmWrFlowVar):  # writes the variable's full size (4 here)
            struct.pack_into("!I", out, kw["pkt_offset"], (value + kw["add_val"]) & 0xFFFFFFFF)
        elif isinstance(ins, STLVmWrMaskFlowVar):
            size = kw["pkt_cast_size"]
            val = ((value & ((1 << 8 * size) - 1)) + kw["add_value"]) & kw["mask"]
            old = int.from_bytes(out[kw["pkt_offset"]:kw["pkt_offset"] + size], "big")
            out[kw["pkt_offset"]:kw["pkt_offset"] + size] = ((old & ~kw["mask"]) | val).to_bytes(size, "big")
        elif isinstance(ins, STLVmFixIpv4):
            ip = kw["offset"]
            ihl = (out[ip] & 0xF) * 4
            out[ip + 10:ip + 12] = b"\0\0"
            struct.pack_into("!H", out, ip + 10, _csum(bytes(out[ip:ip + ihl])))
        elif isinstance(ins, STLVmFixChecksumHw):
            ip, l4 = kw["l3_offset"], kw["l4_offset"]
            end = ip + struct.unpack_from("!H", out, ip + 2)[0]
            out[l4 + 16:l4 + 18] = b"\0\0"
            pseudo = bytes(out[ip + 12:ip + 20]) + struct.pack("!BBH", 0, out[ip + 9], end - l4)
            struct.pack_into("!H", out, l4 + 16, _csum(pseudo + bytes(out[l4:end])))
    return bytes(out)


# -- the client -------------------------------------------------------------------------------------
class FakeTRexClient:
    """Stands in for TRex's STLClient because a TRex server cannot run on this machine; it records calls
    and answers with deterministic stats from a simple DUT model.

    The DUT forwards what ``dut(frame)`` returns (None: drops) up to ``capacity_pps``; latency
    samples follow ``latency_histogram`` [usec]. Like TRex, it refuses L3 mode and captures on ports
    not in service mode and counts bytes without FCS. ``fail_on`` names a call that raises.
    """

    def __init__(self, server: str | None = None, *, dut: Callable[[bytes], bytes | None] = lambda f: f,
                 capacity_pps: float = float("inf"), fail_on: str | None = None, corrupt_capture: bool = False,
                 latency_histogram: dict[int, int] | None = None, latency_range: tuple[float, float] = (12.0, 150.0)):
        self.server, self.dut, self.capacity_pps, self.fail_on = server, dut, capacity_pps, fail_on
        self.corrupt_capture = corrupt_capture
        self.latency_histogram = latency_histogram or {10: 50, 20: 40, 100: 10}
        self.latency_range = latency_range
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.streams: dict[int, list[STLStream]] = {}
        self.service: set[int] = set()
        self.stats: dict[Any, Any] = {}
        self.captures: dict[int, dict[str, Any]] = {}

    def _call(self, name: str, **kw: Any) -> None:
        self.calls.append((name, kw))
        if name == self.fail_on:
            raise RuntimeError(f"fake TRex: {name} failed")

    @property
    def call_names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def connect(self) -> None:
        self._call("connect")

    def disconnect(self, stop_traffic: bool = True, release_ports: bool = True) -> None:
        self._call("disconnect", stop_traffic=stop_traffic, release_ports=release_ports)

    def reset(self, ports: list[int] | None = None, restart: bool = False) -> None:
        self._call("reset", ports=ports)
        self.streams = {p: [] for p in ports or []}
        self.service -= set(ports or [])
        self.stats = {}

    def set_service_mode(self, ports: list[int] | None = None, enabled: bool = True) -> None:
        self._call("set_service_mode", ports=ports, enabled=enabled)
        self.service = self.service | set(ports or []) if enabled else self.service - set(ports or [])

    def set_l2_mode(self, port: int, dst_mac: str) -> None:
        self._call("set_l2_mode", port=port, dst_mac=dst_mac)

    def set_l3_mode(self, port: int, src_ipv4: str, dst_ipv4: str, vlan: Any = None) -> None:
        self._call("set_l3_mode", port=port, src_ipv4=src_ipv4, dst_ipv4=dst_ipv4)
        if port not in self.service:
            raise RuntimeError(f"fake TRex: set_l3_mode - port {port} is not in service mode")

    def add_streams(self, streams: list[STLStream], ports: list[int] | None = None) -> list[int]:
        self._call("add_streams", streams=streams, ports=ports)
        for p in ports or []:
            self.streams.setdefault(p, []).extend(streams)
        return list(range(len(streams)))

    def clear_stats(self, ports=None, clear_global=True, clear_flow_stats=True, clear_latency_stats=True,
                    clear_xstats=True) -> None:
        self._call("clear_stats", ports=ports)

    def start_capture(self, tx_ports=None, rx_ports=None, limit=1000, mode="fixed", bpf_filter="") -> dict:
        self._call("start_capture", rx_ports=rx_ports, limit=limit, bpf_filter=bpf_filter)
        if not set(rx_ports or []) <= self.service:
            raise RuntimeError("fake TRex: start_capture - ports are not in service mode")
        cid = len(self.captures) + 1
        self.captures[cid] = {"limit": limit, "frames": []}
        return {"id": cid, "ts": 0.0}

    def stop_capture(self, capture_id: int, output: list | str | None = None) -> None:
        self._call("stop_capture", capture_id=capture_id)
        if isinstance(output, list):
            output.extend({"binary": f, "origin": "RX", "ts": i * 1e-6, "index": i, "port": 0}
                          for i, f in enumerate(self.captures.pop(capture_id)["frames"]))

    def start(self, ports=None, mult="1", force=False, duration=-1, total=False, core_mask=None,
              synchronized=False) -> None:
        self._call("start", ports=ports, mult=mult, force=force, duration=duration)
        _check("mult", mult, str), _check("duration", duration, (int, float))
        if (set(ports or []) & self.service) and not force:
            raise RuntimeError("fake TRex: start - please disable service mode or specify 'force'")
        self._run(ports or [], duration)

    def wait_on_traffic(self, ports=None, timeout=None, rx_delay_ms=None) -> None:
        self._call("wait_on_traffic", ports=ports, timeout=timeout)

    def get_stats(self, ports=None, sync_now=True) -> dict[Any, Any]:
        self._call("get_stats", ports=ports)
        return self.stats

    # -- the simulated wire and DUT ---------------------------------------------------------------
    def _run(self, ports: list[int], duration: float) -> None:
        port_stats = {p: dict(opackets=0, ipackets=0, obytes=0, ibytes=0, oerrors=0, ierrors=0) for p in range(4)}
        self.stats = {**port_stats, "global": {}, "total": {}, "flow_stats": {}, "latency": {}}
        rx_port = 1 - ports[0]
        for s in (s for p in ports for s in self.streams.get(p, [])):
            mode, builder = s.kw["mode"], s.kw["packet"]
            sent = mode.total_pkts if isinstance(mode, STLTXSingleBurst) else round(mode.pps * duration)
            seconds = sent / mode.pps
            fwd = sent if self.capacity_pps * seconds >= sent else round(self.capacity_pps * seconds)
            frame = builder.kw["pkt_buffer"]
            out = self.dut(frame)
            port_stats[ports[0]].update(opackets=port_stats[ports[0]]["opackets"] + sent,
                                        obytes=port_stats[ports[0]]["obytes"] + sent * len(frame))
            if out is None:
                continue
            port_stats[rx_port].update(ipackets=port_stats[rx_port]["ipackets"] + fwd,
                                       ibytes=port_stats[rx_port]["ibytes"] + fwd * len(out))
            if s.kw["flow_stats"] is not None:
                lo, hi = self.latency_range
                self.stats["latency"][s.kw["flow_stats"].kw["pg_id"]] = {
                    "latency": {"total_min": lo, "total_max": hi, "average": 30.0, "jitter": 3,
                                "last_max": hi, "histogram": dict(self.latency_histogram)},
                    "err_cntrs": {"dropped": 0, "dup": 0, "out_of_order": 0, "seq_too_high": 0, "seq_too_low": 0}}
            else:
                self._capture(frame, builder.kw["vm"], fwd)

    def _capture(self, frame: bytes, vm: STLScVmRaw | None, forwarded: int) -> None:
        """The first frames the RX port got: flow var values min, min + 1 ... (op inc)."""
        var = next((c.kw for c in (vm.commands if vm else []) if isinstance(c, STLVmFlowVar)), None)
        lo, span = (var["min_value"], var["max_value"] - var["min_value"] + 1) if var else (0, 1)
        for cap in self.captures.values():
            frames = (self.dut(apply_vm(frame, vm, lo + i % span)) for i in range(min(forwarded, cap["limit"])))
            got = [f for f in frames if f is not None]
            if self.corrupt_capture and got:
                got[-1] = bytes([got[-1][0] ^ 0x02]) + got[-1][1:]  # a DUT that writes a wrong MAC
            cap["frames"] = got
