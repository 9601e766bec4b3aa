"""What one trial measured (``TrialResult``) and the columns of its stored record.

Vocabulary (the same in the CLI, the API, the store and Prometheus):

- *frame size*: the size in bytes, FCS included, of the frame the dataplane defines as its
  scenario's frame (PGW-U: the user-side SGi frame); ``wire_frame_size`` is what the generator
  actually put on the wire.
- *intended* packets: rate x duration, what the trial asked for; *offered* (``tx_packets``): what the
  generator really sent; *received* (``rx_packets``): what came back. Loss is measured against the
  offered count, never the intended one: an unsent packet is not a lost packet.
- L1 bits count 20 bytes of preamble and inter-frame gap per frame on top of the frame (with FCS);
  L2 bits count the frame with FCS.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Any

from perfkit import dataplanes
from perfkit.errors import ConfigError
from perfkit.provenance import source_facts
from perfkit.scenario import Scenario, scenario_key
from perfkit.units import L1_OVERHEAD, l1_bps

if TYPE_CHECKING:
    import numpy as np


@dataclass
class TrialResult:
    """What one trial measured. Units are in the field names or the docs; counts are packets.

    ``to_record()`` flattens it into one row of the run store (see ``RECORD_COLUMNS``).
    """

    dataplane: str
    frame_size: int
    """The scenario's frame size [bytes] (see module doc)."""
    wire_frame_size: int
    """Size of the frames the generator sent [bytes], FCS included."""
    flows: int
    dut_cores: int
    generator: str
    """Backend that produced it: ``xdp`` (local), ``lab``, ``trex``, ``sim`` ..."""
    duration: float
    """Intended duration [s]."""
    intended_pps: float
    """The rate asked for [packets/s]."""
    intended_packets: int
    tx_packets: int
    """Offered: packets the generator really sent."""
    rx_packets: int
    """Received back at the tester (good and mismatched)."""
    tx_bytes: int = 0
    """Offered bytes, FCS included."""
    rx_bytes: int = 0
    """Received bytes, FCS included."""
    elapsed: float = 0.0
    """Measured sending time [s] (first to last packet offered)."""
    start_time: float = field(default_factory=time.time)
    """Unix time [s] when traffic started."""
    end_time: float = 0.0
    """Unix time [s] when the last packet was received or the drain ended."""
    trial_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    run_id: str = ""
    method: str = "trial"
    params: dict[str, Any] = field(default_factory=dict)
    """The dataplane's scenario parameters (PGW-U: direction, sessions, udp_csum, vlan); those not
    given take their defaults."""
    knobs: dict[str, str] = field(default_factory=dict)
    """System knobs the DUT ran under, each read back after it was set (``perfkit.knobs``:
    ``{"gro": "off"}``); {}: the testbed as it comes."""
    latency_ns: dict[str, float] = field(default_factory=dict)
    """One-way latency percentiles [ns]: min, p50, p90, p99, p99.9, max, mean (empty if none)."""
    ipdv_ns: dict[str, float] = field(default_factory=dict)
    """|IPDV| per RFC 5481 (consecutive packets of a stream) percentiles [ns]."""
    reordered: int = 0
    duplicates: int = 0
    frame_mix: str = ""
    """The frame mix offered (``perfkit.framemix``: ``imix``; ``frame_size`` is then its mean,
    rounded, and ``wire_frame_size`` the mean offered frame, rounded); "": frames of one size."""
    mismatched_packets: int = 0
    """Received packets that are not what the DUT should emit for the profile."""
    dut_drops: dict[str, int] = field(default_factory=dict)
    """Packets the DUT dropped, per reason (dataplane counters and interface counters; ``RING_DROP``:
    its receive ring or queue was full)."""
    tester_drops: dict[str, int] = field(default_factory=dict)
    """Packets the DUT sent that the tester failed to receive (its own receive ring was full)."""
    dut_cpu: dict[str, float] = field(default_factory=dict)
    """Busy fraction (0..1) per DUT CPU, from /proc/stat deltas; keys are cpu numbers as strings."""
    cpu_modes: dict[str, dict[str, float]] = field(default_factory=dict)
    """Fraction of the trial (0..1) each CPU spent per mode (user, system, softirq, irq, idle ...),
    from /proc/stat deltas, for every CPU of the machine: ``{"1": {"softirq": 0.93, ...}}``."""
    dut_kthread_cpu: dict[str, float] = field(default_factory=dict)
    """Busy fraction (0..1) of each DUT kernel thread (threaded NAPI, cpumap), by thread name."""
    bpf_ns_per_packet: float | None = None
    """Mean run time of the DUT's XDP program(s) per packet [ns] (kernel BPF stats)."""
    dut_ns_per_packet: float | None = None
    """The DUT's cost: CPU time of its packet threads (threaded NAPI and cpumap kthreads on the DUT
    cores, ``/proc/<tid>/schedstat``, host steal excluded) per packet its program processed [ns]."""
    kernel_ns_per_packet: float | None = None
    """``dut_ns_per_packet - bpf_ns_per_packet`` [ns]: the kernel's path around the program (NAPI
    polling, veth, redirect, wake-ups)."""
    dut_busy: float | None = None
    """Share of the DUT cores' time its packet threads ran [0..1] (their CPU time over the trial
    window times the DUT cores): the mean over the DUT cores (``dut_busy_per_core`` per core)."""
    dut_tables: dict[str, float] = field(default_factory=dict)
    """What the DUT's tables held, read back from the kernel once they were filled (PGW-U:
    ``sessions_installed``, ``ul_sessions_present``, ``dl_sessions_present``, ``sessions_missing``,
    ``residency``)."""
    dut_packets_per_core: dict[str, int] = field(default_factory=dict)
    """Packets the dataplane forwarded on each DUT core (CPU number as text), from its per-CPU
    counters: how the steering spread the work. {}: not measured."""
    dut_busy_per_core: dict[str, float] = field(default_factory=dict)
    """Share of each DUT core's time the DUT's packet threads pinned to it ran [0..1], by cpu
    (``"1"``), as ``dut_busy``: one core can be saturated while the mean is not. Empty when not
    measured."""
    dut_perf_counts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """What ``perf stat`` counted on each DUT core during the trial (``perfkit.perf.stat``): CPU (as
    text) -> event -> count, or ``"not available"`` where the CPU has no such event (most VMs have no
    PMU: cycles, instructions and cache misses). Software events (context switches, CPU migrations)
    are always there. {}: not counted (perf not installed, or ``perf_stat`` off)."""
    dut_cycles_per_packet: float | None = None
    """CPU cycles on the DUT cores per packet the DUT processed, from ``dut_perf_counts`` (seed 003's
    headline figure). None where the cycles were not available: ``dut_perf_counts`` says so."""
    socket_datagrams_per_skb: float | None = None
    """For traffic the dataplane passes to the DUT's kernel (``Traffic.to_socket``): datagrams the
    socket was delivered per packet it received. Above 1, GRO aggregated them; 1, every datagram
    crossed the stack alone. None: traffic out of the DUT's egress port."""
    verdicts: dict[str, int] = field(default_factory=dict)
    """Packets per XDP verdict the DUT gave in the trial (``{"XDP_DROP": 1000}``), from the program's
    own counters where it names them by verdict, else from perfkit's (``verdicts_from``;
    ``perfkit.accounting.verdicts``). {}: not measured."""
    verdicts_from: str = ""
    """Who counted ``verdicts``: ``program`` (its counters) or ``perfkit`` (sink, socket, kernel and
    drop counters); "": not measured."""
    ring_cores: list[int] = field(default_factory=list)
    """The DUT cores whose receive queue the overflows of ``dut_drops[RING_DROP]`` came from: the one
    that serves it when it can be told (a veth port's ring, on its NAPI thread's core), every DUT
    core when the queue is one of several that cannot be told apart (the cpumap's, one per core).
    Empty when no queue overflowed. Searches judge the busiest of them (``perfkit.search.limits``)."""
    dut_capacity_pps: float | None = None
    """Packets per second the DUT cores could process at 100 % busy at this per-packet cost:
    ``dut_cores * 1e9 / dut_ns_per_packet`` [pps]. At a partial load the cost includes the
    wake-ups a saturated DUT does not pay, so the estimate is a lower bound there; it is closest
    to the truth from trials where the DUT was nearly busy (``dut_busy`` near 1)."""
    dut_wakeups: int | None = None
    """Times the DUT's packet threads were put on a CPU during the trial window
    (``perfkit.host.cpustat.timeslices``): their wake-ups, and returns after a preemption. A thread that sleeps
    between packets pays each wake-up in CPU time (9-19 µs on the 2-vCPU VM), a saturated one
    hardly wakes: the DUT load model counts them (``perfkit.analysis.cost``). None when not measured."""
    shared_cores: bool = False
    """True when DUT and generator had to share a core (the numbers are then pessimistic)."""
    dut_core_time: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per DUT CPU (``"1"``), the share of the trial window [0..1] each kind of task ran on it, from
    the scheduler's switches (``perfkit.testbed.coreshare``): ``packet`` (the DUT's packet threads),
    ``perfkit`` (perfkit's own processes: its CLI, notebook kernel, metrics servers, perf),
    ``other`` (anything else: other processes, kernel threads) and ``idle``. Empty when not
    measured."""
    dut_perfkit_share: float | None = None
    """Share of the DUT cores' time [0..1] perfkit's own processes ran (mean over the DUT cores of
    ``dut_core_time``'s ``perfkit``): work that is not the DUT's, taken from it. None when not
    measured."""
    dut_others_share: float | None = None
    """Share of the DUT cores' time [0..1] anything but the DUT's packet threads and perfkit ran
    (other processes, kernel threads). None when not measured."""
    stalls: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per probed CPU (``"1"``), what it went through during the trial (``perfkit.host.stallprobe``):
    longest_us (longest time it did not run its timer), stalls, stalled_us, steal_us (taken by the
    hypervisor), longest_wait_us (longest wait of a DUT/sink packet thread to run), waits,
    waited_us, speed_ns_per_step (the CPU's speed), period_us (the probe's timer period: a stall is
    known to ± half of it; absent in trials stored before 2026-11-26, whose period was 200 µs).
    Empty when not measured."""
    dut_stall_us: float | None = None
    """Longest time a DUT core could not process packets [µs]: the longest CPU stall or packet
    thread wait on the DUT cores. None when not measured."""
    tester_stall_us: float | None = None
    """The same on the tester cores [µs]."""
    dut_speed_ns_per_step: float | None = None
    """The DUT cores' speed during the trial: mean time of one step of the stall probe's speed
    probe on them [ns] (``perfkit.host.stallprobe``; higher is slower). A host that shares the vCPUs'
    physical cores runs them slower at times without stopping them; a CPU-bound DUT's cost per
    packet moves with it. None when not measured."""
    speed_reference_ns: float | None = None
    """Speed normalization (``Generator.speed_reference_ns``): the reference CPU speed [ns per step
    of the speed probe] this trial is judged at. Searches then judge it at its offered rate x
    ``speed_factor``: the rate that loads a DUT on CPUs of the reference speed as this trial loaded
    this one (``judged_pps``). None: judged at its offered rate."""
    kernel_reference_ns: float | None = None
    """Speed normalization of the testbed's part: the reference cost of the DUT's kernel path per
    packet [ns] (NAPI, veth, redirect: ``kernel_ns_per_packet`` of a trial that saturated the DUT
    cores at set-up). The veth path's cost moves between trials by itself (by 10 % on the 2-vCPU
    VM, where the program's cost follows the speed probe within 1 %), so a trial that kept the DUT
    cores at least ``BUSY_MIN`` busy is judged with its program at the reference speed and
    its kernel path at this cost (``speed_factor``). None: the CPU speed alone."""
    sink_gap_us: float | None = None
    """Longest time between two arrivals at the sink [µs]."""
    gen_slip_us: float | None = None
    """How much later than intended the generator finished sending [µs] (its schedule slides when
    its core is taken away)."""
    stalled: bool = False
    """A DUT core stalled at least as long as its receive queue lasts at the trial's rate
    (``perfkit.host.disturbance.stalled``): host stalls may have cost it frames, whatever it lost. Searches
    run it again and judge the next trial (``perfkit.search.trials``). Its figures are kept."""
    disturbed: bool = False
    """The trial's loss is explained by measured host stalls (``perfkit.host.disturbance.disturbance``; such a
    trial is always ``stalled``): a figure its loss sets is labelled ``host stalls``. Its loss is
    kept, never hidden."""
    disturbance: str = ""
    """Why it is disturbed: the evidence, in words (empty when not)."""
    hosts: dict[str, list[str]] = field(default_factory=dict)
    """The lab hosts that measured the trial, by role (``{"dut": ["dut1"], "tester": ["tester1",
    "tester2"]}``); empty when this machine measured it."""
    ceiling_hosts: list[str] = field(default_factory=list)
    """The generator hosts that reached their ceiling: offered less than their share of the intended
    rate (``perfkit.generators.lab.SHORT``). Empty when none did, or off a lab."""
    objects: dict[str, str] = field(default_factory=dict)
    """sha256 (hex) of each BPF object file the DUT loaded for the trial, by path (the dataplane's
    program, the steering program with several DUT cores; on a lab, ``<host>:<path>`` as the DUT host
    hashed it): what was measured, whatever ``build/bpf/`` holds now. {}: not known (trials stored
    before 2026-12-01, generators that load nothing)."""
    dataplane_source: dict[str, Any] = field(default_factory=dict)
    """Where the dataplane's code came from (``perfkit.provenance.source_facts``): a description
    file's git ``repository``, ``commit``, ``dirty`` and ``path``; a plugin's ``package``
    (``name==version``, and its repository's facts when it lies in one). {}: perfkit's own (the
    run's ``perfkit`` has its commit), outside any repository, or trials stored before 2026-12-02."""
    notes: list[str] = field(default_factory=list)
    """Anything the reader must know about this trial (warnings, degraded measurements)."""

    checked: InitVar[bool] = True
    """Validate ``params`` against the dataplane (a trial being made); ``from_record`` reads a stored
    trial as it was written, without asking today's dataplane (which may have been renamed, removed
    or had a parameter tightened since)."""

    def __post_init__(self, checked: bool) -> None:
        if checked:
            self.params = dataplanes.get(self.dataplane).validate(self.params)
        #: ``scenario_key`` and ``variant`` as a stored record has them (``from_record``).
        self._stored: dict[str, str] = {}

    # -- derived figures -----------------------------------------------------------------------
    @property
    def loss_ratio(self) -> float:
        """(offered - received) / offered; 0 when nothing was offered."""
        if self.tx_packets <= 0:
            return 0.0
        return max(0, self.tx_packets - self.rx_packets) / self.tx_packets

    @property
    def lost_packets(self) -> int:
        return max(0, self.tx_packets - self.rx_packets)

    @property
    def dut_loss_ratio(self) -> float:
        """Loss attributable to the DUT: (offered - received - tester-side drops) / offered."""
        if self.tx_packets <= 0:
            return 0.0
        return max(0, self.tx_packets - self.rx_packets - sum(self.tester_drops.values())) / self.tx_packets

    def ring_overflow_only(self, in_flight: int | None = None) -> bool:
        """Whether all the DUT lost (``dut_loss_ratio``'s frames) overflowed its receive ring
        (``RING_DROP``), give or take ``in_flight`` frames (default ``IN_FLIGHT``), and it dropped
        nothing else."""
        in_flight = IN_FLIGHT if in_flight is None else in_flight
        ring = self.dut_drops.get(RING_DROP, 0)
        lost = self.lost_packets - sum(self.tester_drops.values())
        return ring > 0 and sum(self.dut_drops.values()) == ring and lost <= ring + in_flight

    @property
    def speed_factor(self) -> float:
        """How much more this trial loaded the DUT than its offered rate would at the reference
        (> 1: the DUT cores ran slower than the reference; ``speed_factor()``), or 1 when the trial
        is not speed-normalized or its speed was not measured."""
        return speed_factor(self.dut_speed_ns_per_step, self.speed_reference_ns, self.bpf_ns_per_packet,
                            self.kernel_ns_per_packet, self.kernel_reference_ns, self.dut_busy)

    @property
    def judged_pps(self) -> float:
        """The rate [pps] searches judge the trial at (``judged_pps``)."""
        return judged_pps(self.tx_pps, self.intended_pps, self.speed_factor)

    @property
    def tx_pps(self) -> float:
        return self.tx_packets / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def rx_pps(self) -> float:
        return self.rx_packets / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def rx_frame_size(self) -> float:
        """Mean size of received frames [bytes], FCS included."""
        return self.rx_bytes / self.rx_packets if self.rx_packets else 0.0

    @property
    def tx_bps_l1(self) -> float:
        if self.frame_mix and self.tx_packets and self.tx_bytes:  # the frames sent, not the rounded mean
            return l1_bps(self.tx_pps, self.tx_bytes / self.tx_packets)
        return l1_bps(self.tx_pps, self.wire_frame_size)

    @property
    def rx_bps_l1(self) -> float:
        return (self.rx_bytes + L1_OVERHEAD * self.rx_packets) * 8 / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def rx_bps_l2(self) -> float:
        return self.rx_bytes * 8 / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def scenario_key(self) -> str:
        """``Scenario.key``; of a stored trial, the key it was stored with."""
        if "scenario_key" in self._stored:
            return self._stored["scenario_key"]
        return scenario_key(self.dataplane, self.frame_size, self.flows, self.dut_cores, self.params, self.knobs,
                            self.frame_mix)

    @property
    def variant(self) -> str:
        """The value of the dataplane's main categorical parameter (PGW-U: the direction); of a
        stored trial, the variant it was stored with."""
        if "variant" in self._stored:
            return self._stored["variant"]
        dp = dataplanes.get(self.dataplane)
        return str(self.params.get(dp.variant, "")) if dp.variant else ""

    @classmethod
    def for_scenario(cls, scenario: Scenario, **kw: Any) -> TrialResult:
        """A result whose scenario fields are ``scenario``'s; ``kw`` are the measured fields."""
        return cls(dataplane=scenario.dataplane, frame_size=scenario.frame_size, frame_mix=scenario.frame_mix,
                   flows=scenario.flows,
                   dut_cores=kw.pop("dut_cores", scenario.dut_cores), params=dict(scenario.params),
                   knobs=dict(scenario.knobs), dataplane_source=dict(source_facts(scenario.dataplane)), **kw)

    def to_dict(self) -> dict[str, Any]:
        """All fields plus the derived figures, JSON-ready (what ``--json`` prints)."""
        d = dataclasses.asdict(self)
        for name in ("loss_ratio", "dut_loss_ratio", "lost_packets", "tx_pps", "rx_pps", "tx_bps_l1", "rx_bps_l1",
                     "rx_bps_l2", "rx_frame_size"):
            d[name] = getattr(self, name)
        return d

    def to_record(self) -> dict[str, Any]:
        """One flat row for the run store: dicts become prefixed columns or JSON strings."""
        d = self.to_dict()
        for name, prefix in (("latency_ns", "latency_"), ("ipdv_ns", "ipdv_")):
            for k, v in d.pop(name).items():
                d[f"{prefix}{k.replace('.', '')}_ns"] = float(v)
        for name in JSON_FIELDS:
            d[name] = json.dumps(d[name], sort_keys=True)
        params = d.pop("params")
        d["params"] = json.dumps(params, sort_keys=True)
        d.update(params)  # tidy: one column per scenario parameter
        d["scenario_key"], d["variant"] = self.scenario_key, self.variant
        return d

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> TrialResult:
        """The inverse of ``to_record``, as plain data: nothing is checked against today's dataplane,
        and the stored ``scenario_key`` and ``variant`` are kept (other derived columns are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw: dict[str, Any] = {k: v for k, v in rec.items() if k in names}
        for name in JSON_FIELDS:
            if isinstance(kw.get(name), str):
                kw[name] = json.loads(kw[name])
        kw["latency_ns"] = {_unflat(k, "latency_"): float(v) for k, v in rec.items()
                            if k.startswith("latency_") and k.endswith("_ns") and _isnum(v)}
        kw["ipdv_ns"] = {_unflat(k, "ipdv_"): float(v) for k, v in rec.items()
                         if k.startswith("ipdv_") and k.endswith("_ns") and _isnum(v)}
        if isinstance(kw.get("params"), str):
            kw["params"] = json.loads(kw["params"])
        elif "params" not in kw:  # written before dataplanes had parameters of their own
            try:
                kw["params"] = dataplanes.get(str(rec["dataplane"])).legacy_params(rec)
            except ConfigError:   # a dataplane no longer installed
                kw["params"] = {}
        if kw.get("bpf_ns_per_packet") is not None and not _isnum(kw["bpf_ns_per_packet"]):
            kw["bpf_ns_per_packet"] = None
        for name in ("frame_size", "wire_frame_size", "flows", "dut_cores", "intended_packets",
                     "tx_packets", "rx_packets", "tx_bytes", "rx_bytes", "reordered", "duplicates",
                     "mismatched_packets"):
            if name in kw:
                kw[name] = int(kw[name])
        kw["frame_mix"] = kw.get("frame_mix") if isinstance(kw.get("frame_mix"), str) else ""  # older records
        for name in ("shared_cores", "stalled", "disturbed"):
            if name in kw:
                kw[name] = bool(kw[name])
        for name in ("dut_stall_us", "tester_stall_us", "dut_speed_ns_per_step", "speed_reference_ns",
                     "kernel_reference_ns", "sink_gap_us", "gen_slip_us", "dut_ns_per_packet",
                     "kernel_ns_per_packet", "dut_busy", "dut_capacity_pps", "dut_wakeups", "dut_perfkit_share",
                     "dut_others_share", "socket_datagrams_per_skb", "dut_cycles_per_packet"):
            if kw.get(name) is not None and not _isnum(kw[name]):
                kw[name] = None
        out = cls(**kw, checked=False)
        out._stored = {k: rec[k] for k in ("scenario_key", "variant") if isinstance(rec.get(k), str)}
        return out


#: The DUT cores' busy share from which a trial's cost per packet says what the DUT can do: below
#: it the DUT had time to spare and paid wake-ups a busy one does not (the cost model, the
#: ``testbed`` limit and a trial's kernel path in its speed factor all use it).
BUSY_MIN = 0.8
#: Relative shortfall of the offered rate below the intended one that counts (beyond the rounding
#: of packet counts): below it a trial is judged at the intended rate.
OFFER_EPS = 1e-3
#: The drop reason of a full receive ring, in ``dut_drops`` and ``tester_drops``.
RING_DROP = "rx_ring_full"
#: Fields stored as JSON strings in the run store (``TrialResult.to_record``).
JSON_FIELDS = ("knobs", "dut_perf_counts", "dut_tables", "dut_packets_per_core", "dut_drops", "tester_drops", "dut_cpu", "cpu_modes", "dut_kthread_cpu", "dut_core_time",
               "dut_busy_per_core", "ring_cores", "verdicts", "stalls", "hosts", "ceiling_hosts", "notes", "objects",
               "dataplane_source")
#: Frames a trial may lose besides what its counters explain and still count as ring overflows only
#: (``TrialResult.ring_overflow_only``): what can still be in flight when a trial is read. After
#: the drain (the sink quiet for 50 ms), frames still queued for the DUT are counted as its ring
#: drops (a NIC-sized queue: handed over, never processed), so what is left is at most a NAPI poll
#: (64 frames) on each side of the DUT; measured, 0 in every trial (calibrated DUT, 0.2-5 Mpps
#: asked, 1 and 2 DUT cores, 256- and 4096-frame queues). Not the queue's size: behind a 4096-frame
#: queue, 4096 frames that no counter explains are no ring overflow.
IN_FLIGHT = 128


def judged_pps(tx_pps: Any, intended_pps: Any, factor: Any = 1.0) -> Any:
    """The rate [pps] a trial is judged at: what was really offered if clearly less than intended
    (by more than ``OFFER_EPS``), else the intended rate; times the trial's ``speed_factor`` when it
    is speed-normalized. Scalars or arrays; searches and the analysis of stored runs both use it,
    so a figure always finds the trial it rests on."""
    import numpy as np   # here, not at the top: ``import perfkit`` needs no numpy

    short = (np.asarray(tx_pps) > 0) & (np.asarray(tx_pps) < np.asarray(intended_pps) * (1 - OFFER_EPS))
    out = np.where(short, tx_pps, intended_pps) * np.asarray(factor, dtype=float)
    return float(out) if out.ndim == 0 else out


def speed_factor(speed_ns: Any, reference_ns: Any, bpf_ns: Any = None, kernel_ns: Any = None,
                 kernel_reference_ns: Any = None, busy: Any = None) -> Any:
    """A speed-normalized trial's load relative to its offered rate at the reference, else 1.

    - ``speed_ns / reference_ns`` (the speed probe's time per step against the reference) where both
      are known;
    - ``(bpf_ns + kernel_ns) / (bpf_ns x reference_ns / speed_ns + kernel_reference_ns)`` where the
      kernel path's reference is known too and the DUT cores were at least ``BUSY_MIN``
      busy: the trial's time per packet over the time the same packets take with the program at
      the reference speed and the kernel path at its reference cost. (An idle DUT pays a wake-up
      per packet: below that load the kernel path's cost says little, and such a trial is far
      below the DUT's limit anyway.)

    Scalars or arrays (missing values None or NaN)."""
    import numpy as np   # as in judged_pps

    def num(x: Any) -> np.ndarray:
        return np.asarray(x if x is not None else np.nan, dtype=float)

    speed, ref = num(speed_ns), num(reference_ns)
    ok = np.isfinite(speed) & np.isfinite(ref) & (ref > 0) & (speed > 0)
    base = np.where(ok, speed / np.where(ok, ref, 1.0), 1.0)
    bpf, kern, kref, load = num(bpf_ns), num(kernel_ns), num(kernel_reference_ns), num(busy)
    with np.errstate(invalid="ignore"):
        kok = ok & (bpf > 0) & (kern > 0) & (kref > 0) & (load >= BUSY_MIN)
    out = np.where(kok, (bpf + kern) / np.where(kok, bpf / base + kref, 1.0), base)
    return float(out) if out.ndim == 0 else out


def _isnum(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _unflat(col: str, prefix: str) -> str:
    k = col[len(prefix):-len("_ns")]
    return "p99.9" if k == "p999" else k


#: Columns of a trial record (one row per trial), as written by ``TrialResult.to_record``.
RECORD_COLUMNS = {
    "trial_id": "uuid4 of the trial",
    "run_id": "run the trial belongs to ('' outside a run)",
    "method": "what asked for it: trial, maxrate, ndr, pdr, sweep, bestworst, latency, confirm",
    "dataplane, frame_size, flows, dut_cores": "the scenario's generic fields",
    "frame_mix": "the frame mix offered (imix; frame_size its rounded mean), '' for frames of one size",
    "params": "JSON {name: value}: the dataplane's scenario parameters",
    "<param>": "one column per scenario parameter of the dataplane (Dataplane.params), typed",
    "scenario_key": "Scenario.key: dataplane, variant, frame size, flows, cores and marked parameters",
    "variant": "value of the dataplane's main categorical parameter (Dataplane.variant)",
    "wire_frame_size": "bytes per offered frame, FCS included",
    "generator": "xdp (local), trex, sim",
    "duration": "intended duration [s]",
    "intended_pps, intended_packets": "what the trial asked for",
    "tx_packets, tx_bytes": "offered (really sent)",
    "rx_packets, rx_bytes": "received back",
    "elapsed": "sending time [s]",
    "start_time, end_time": "unix time [s]",
    "loss_ratio, lost_packets": "(tx - rx) / tx and tx - rx",
    "dut_loss_ratio": "(tx - rx - tester_drops) / tx: the loss the DUT itself caused",
    "tester_drops": "JSON {reason: packets} lost at the tester's own receive side",
    "tx_pps, rx_pps, tx_bps_l1, rx_bps_l1, rx_bps_l2, rx_frame_size": "derived rates",
    "latency_<p>_ns": "one-way latency percentiles min, p50, p90, p99, p999, max, mean [ns]",
    "ipdv_<p>_ns": "|IPDV| percentiles [ns]",
    "reordered, duplicates, mismatched_packets": "sequence and content checks at the sink",
    "dut_drops": "JSON {reason: packets}",
    "dut_cpu": "JSON {cpu: busy fraction} over DUT cores",
    "cpu_modes": "JSON {cpu: {mode: fraction}} over all CPUs (/proc/stat); see RunStore.cpu_frame",
    "dut_kthread_cpu": "JSON {kthread: busy fraction}",
    "bpf_ns_per_packet": "DUT XDP program run time per packet [ns]",
    "dut_ns_per_packet": "CPU time of the DUT's packet threads per packet processed [ns]",
    "kernel_ns_per_packet": "dut_ns_per_packet - bpf_ns_per_packet: the kernel path [ns]",
    "dut_busy": "share of the DUT cores' time its packet threads ran [0..1] (mean over the DUT cores)",
    "dut_busy_per_core": "JSON {cpu: share of the core's time the DUT's packet threads on it ran [0..1]}",
    "verdicts": "JSON {XDP verdict: packets} the DUT gave in the trial",
    "verdicts_from": "who counted verdicts: program (its own counters) or perfkit",
    "ring_cores": "JSON list of the DUT cores whose receive queue the rx_ring_full drops came from",
    "dut_capacity_pps": "dut_cores x 1e9 / dut_ns_per_packet: packets/s at 100 % of the DUT cores",
    "dut_wakeups": "times the DUT's packet threads were put on a CPU in the trial (wake-ups, returns after preemption)",
    "shared_cores": "DUT and generator shared a core",
    "dut_core_time": "JSON {cpu: {packet, perfkit, other, idle}}: share of the window each kind of task ran on each DUT core",
    "dut_perfkit_share": "share of the DUT cores' time perfkit's own processes ran [0..1]",
    "dut_others_share": "share of the DUT cores' time anything but the DUT's packet threads and perfkit ran [0..1]",
    "stalls": "JSON {cpu: {longest_us, stalls, stalled_us, steal_us, longest_wait_us, waits, waited_us, speed_ns_per_step, period_us}}",
    "dut_stall_us, tester_stall_us": "longest time a DUT / tester core could not process packets [µs]",
    "dut_speed_ns_per_step": "the DUT cores' speed: time of one step of the stall probe's speed probe [ns]; higher is slower",
    "speed_reference_ns": "speed normalization: the reference CPU speed the trial is judged at [ns per step] (empty: not normalized)",
    "kernel_reference_ns": "speed normalization: the reference cost of the DUT's kernel path per packet [ns] (empty: the CPU speed alone)",
    "sink_gap_us": "longest time between two arrivals at the sink [µs]",
    "gen_slip_us": "how much later than intended the generator finished sending [µs]",
    "stalled": "a DUT core stalled as long as its receive queue lasts at the trial's rate (searches ran it again)",
    "disturbed": "the loss is explained by measured host stalls (a stalled trial; a figure it sets is 'host stalls')",
    "disturbance": "the evidence that made the trial disturbed",
    "hosts": "JSON {role: [host, ...]}: the lab hosts that measured the trial ({} on this machine)",
    "ceiling_hosts": "JSON list of the generator hosts that offered less than their share of the rate (lab)",
    "notes": "JSON list of warnings",
    "objects": "JSON {path: sha256} of the BPF object files the DUT loaded for the trial",
    "dataplane_source": "JSON {repository, commit, dirty, path} of a description file's git repository, or a plugin's {package, ...}",
}
