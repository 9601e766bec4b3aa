"""The calibrated DUT: an XDP program that costs a configured, known amount of work per packet and
forwards (``bpf/calib.bpf.c``). It is the test suite's reference: run at several amounts of work,
the measurement pipeline must recover the known cost per packet (issue 10, part 5).

- ``control``: load ``bpf/calib.bpf.c``, configure it (egress port, Ethernet addresses, work), read
  its counters;
- ``model``: the independent reference model (what the program must emit for a frame);
- ``traffic``: the frames a scenario offers (scapy), their field engine, and the check of what the
  DUT emitted;
- ``calibration``: ``calibrate()``, the cost of one work iteration by prog-bench (the slope every
  other measurement must reproduce);
- ``layouts``: the mirror of ``bpf/include/calib_kern_user.h``.

Scenario parameters: ``work_iterations`` (N: iterations of a small ``bpf_loop`` callback per packet,
0 = forward only). It is also the variant: each N is its own curve in plots and tables.
``drop_every`` (0 = never): the program drops every Nth packet of a CPU after its work (counted as
``drop_every``): a DUT whose own loss, 1 frame in N at any rate, is known (it has no NDR). (Not called
``work``: generic modules may not name a dataplane's parameters, ``tests/test_seam.py``, and they
use that word.) ``frame_size`` is the Ethernet frame, FCS included; it leaves the DUT unchanged but
for its Ethernet addresses. Scenario keys end in ``w<N>``, then ``d<N>`` when it drops:
``calib-64B-1flow-1core-w100``, ``calib-64B-1flow-1core-w0-d1000``.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from perfkit.dataplane import API_VERSION, BenchSpec, BpfDut, Dataplane, DutProgram, Emitted, Param, Traffic
from perfkit.dataplanes.calib.calibration import DEFAULT_WORKS, Calibration, Line, bench_work, calibrate, fit_line
from perfkit.dataplanes.calib.control import Calib, CalibConfig
from perfkit.dataplanes.calib.layouts import CALIB_MAX_WORK, STRUCTS
from perfkit.dataplanes.calib.model import FWD, emit
from perfkit.dataplanes.calib.traffic import CalibTraffic, check_output
from perfkit.encap import BY_FLOW

__all__ = ["DATAPLANE", "DEFAULT_WORKS", "FWD", "Calib", "CalibConfig", "CalibDataplane", "CalibDut", "CalibTraffic",
           "Calibration", "Line", "bench_work", "calibrate",
           "fit_line"]


class CalibDut(BpfDut):
    """The calibrated DUT configured for a traffic profile: its work per packet, and frames leaving
    by the port the offered frames do not enter."""

    control: Calib

    def __init__(self, traffic: CalibTraffic, ifindex_a: int, ifindex_b: int, cpumap: bool):
        super().__init__(Calib.load(cpumap=cpumap), traffic.dut_config(ifindex_a, ifindex_b), traffic)


class CalibDataplane(Dataplane):
    name = "calib"
    api_version = API_VERSION
    layouts = STRUCTS
    title = "Calibrated DUT"
    params = (
        Param("work_iterations", 0, "work per packet: iterations of the program's bpf_loop (0: forward only)",
              kind=int, minimum=0, maximum=CALIB_MAX_WORK),
        Param("drop_every", 0, "drop every Nth packet of a CPU by the program, after its work (0: never)",
              kind=int, minimum=0, maximum=(1 << 32) - 1),
    )
    variant = "work_iterations"
    forward_counters = frozenset({FWD})
    steering = BY_FLOW
    frame_size_doc = "frame size [bytes], FCS included (it leaves the DUT the same size)"

    def key_parts(self, params: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        drops = [f"d{params['drop_every']}"] if params.get("drop_every") else []
        return [], [f"w{params['work_iterations']}"] + drops

    def variant_label(self, value: Any) -> str:
        return f"N = {value} work iterations"

    def traffic(self, frame_size: int, flows: int, params: Mapping[str, Any]) -> CalibTraffic:
        return CalibTraffic(frame_size=frame_size, flows=flows, config=CalibConfig(
            work=int(params["work_iterations"]), drop_every=int(params.get("drop_every", 0))))

    def load(self, traffic: Traffic, ifindex_a: int, ifindex_b: int, cpumap: bool = False) -> CalibDut:
        assert isinstance(traffic, CalibTraffic)
        return CalibDut(traffic, ifindex_a, ifindex_b, cpumap)

    def emit(self, traffic: Traffic, frame: bytes) -> Emitted:
        assert isinstance(traffic, CalibTraffic)
        return emit(frame, traffic.dut_config())

    def check_output(self, traffic: Traffic, frame: bytes) -> str | None:
        assert isinstance(traffic, CalibTraffic)
        return check_output(frame, traffic)

    def bench_spec(self, frame_size: int, params: Mapping[str, Any], seed: int = 1) -> tuple[BenchSpec, DutProgram]:
        """One flow's frame, as it is: the cost does not depend on the flow (the work is the same
        for every packet), so there are no keys to vary. The harness restores the frame's Ethernet
        addresses before every run."""
        params = self.validate(params)
        traffic = self.traffic(frame_size, 1, params)
        frame = traffic.packet(0)
        dut = CalibDut(traffic, 1, 1, cpumap=False)
        spec = BenchSpec(frame=frame, fields=(), keys=np.zeros((0, 16), dtype=np.uint8), path_counter=FWD,
                         expected=emit(frame, dut.config),
                         description={"work_iterations": params["work_iterations"]})
        return spec, dut


DATAPLANE = CalibDataplane()
