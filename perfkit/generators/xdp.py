"""``XdpGenerator``: the embedded default generator -- perfkit's XDP generator and sink on the local
veth testbed, with the dataplane under test between them.

Setting up (a few seconds) brings up the testbed, attaches and fills the DUT, attaches the sink to
both tester ports and loads the generator; ``measure()`` then runs one trial and accounts for every
packet (``perfkit.accounting``)::

    offered (generator program)  = received (by the traffic's verdict, below)
                                   + DUT drops  (dataplane counters, DUT receive ring full)
                                   + tester drops (tester receive ring full)
                                   + unaccounted (reported in notes; 0 when the counters agree)

Received (``Traffic.verdict``): XDP_REDIRECT, signed unique frames at the sink on the tester port
cabled to the other DUT port; XDP_TX, the same at the tester port that sent them (the sink is on
both); XDP_PASS, at the socket (``Traffic.to_socket``) or else by the DUT kernel's IPv4 counters
(``perfkit.testbed.kernelcount``); XDP_DROP, by the DUT's forwarding counters, which for that
traffic mean dropped as intended (``perfkit.testbed.dut.CounterSink``).

Which cores the DUT and the tester get, the receive queue each DUT core serves and the DUT's
per-core figures are ``perfkit.generators.xdpcores``'s.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from perfkit import stop
from perfkit import accounting
from perfkit.dataplane import NO_MODEL_NOTE, VERDICTS, Traffic
from perfkit.errors import BpfError, ConfigError, TestbedError
from perfkit.generators.base import Generator
from perfkit.generators.xdpcores import RX_QUEUE, allocate_cores, busy_per_core, dut_cost, dut_queues, thread_cores
from perfkit.libbpf import BpfObject, BpfStats
from perfkit.scenario import Scenario
from perfkit.host import cpustat, disturbance, stallprobe
from perfkit.host.housekeeping import Confinement
from perfkit.host.stallprobe import StallProbe
from perfkit.knobs import SETUP_KNOBS, Knobs, Port as KnobPort
from perfkit.testbed.bpfbuild import object_path
from perfkit.testbed.coreshare import CoreShare, trial_fields as core_share_fields
from perfkit.testbed.dut import CounterSink, Dut, check_rx_queue
from perfkit.testbed.kernelcount import KernelSink
from perfkit.testbed.exporterproc import DutExport
from perfkit.stl import addresses
from perfkit.stl import profile as stlprofile
from perfkit.stl.macs import testbed_macs
from perfkit.stl.profile import StlProfile
from perfkit.testbed import stlgen
from perfkit.testbed.livegen import LiveGenerator
from perfkit.perf.stat import perf_stat_fields, trial_counter
from perfkit.testbed.socksink import SocketSink
from perfkit.testbed.sink import Sink, write_pcap
from perfkit.testbed.shield import Shield
from perfkit.testbed.topology import Testbed, xdp_max_mtu
from perfkit.search.params import line_rate_pps
from perfkit.trial import BUSY_MIN, TrialResult
from perfkit.units import FCS_LEN

if TYPE_CHECKING:
    from perfkit.perf.record import PerfRecorder

#: How long the sink must see nothing new before a trial counts as drained [s].
DRAIN_QUIET = 0.05
DRAIN_MAX = 2.0
#: Frames captured per trial for the content check.
CAPTURE_COUNT = 64
#: How long ``speed_reference="auto"`` measures the DUT cores' speed at set-up [s]: the reference
#: trial, or the idle cores when that trial could not load them.
SPEED_REFERENCE_S = 1.0


def _runs(before: dict, after: dict, program: str) -> int:
    """Runs of ``program`` between two ``Dut.runtime()`` readings."""
    return after[program].run_cnt - before[program].run_cnt


def needed_mtu(profile: Traffic) -> int:
    """The smallest MTU (at least 1500) that carries the profile's frames both ways."""
    biggest = max(profile.wire_frame_size, profile.output_frame_size) - FCS_LEN
    return max(1500, biggest - 14)


@functools.lru_cache(maxsize=None)
def live_frame_max() -> int:
    """The largest frame (without FCS) BPF_PROG_TEST_RUN sends in live-frames mode here: it must fit
    a page-pool page with the kernel's bookkeeping (3408 bytes on x86-64 Linux 6.x). Probed once."""
    with BpfObject(object_path("drop")) as obj:
        prog, lo, hi = obj.program("xdp_drop"), 14, 4096
        while lo < hi:
            mid = (lo + hi + 1) // 2
            try:
                prog.run_live(bytes(mid), 1)
                lo = mid
            except BpfError:
                hi = mid - 1
        return lo


def check_frame_size(scenario: Scenario, profile: Traffic) -> None:
    """Refuse a frame size the xdp testbed cannot carry: the generator sends frames of at most
    ``live_frame_max`` bytes, and native XDP on veth takes an MTU of at most ``xdp_max_mtu``."""
    over = max(needed_mtu(profile) - xdp_max_mtu(), profile.wire_frame_size - FCS_LEN - live_frame_max())
    if over > 0:
        biggest = profile.frame_size  # of a mix: its largest frames' profile (Scenario.traffic)
        raise ConfigError("frame_size", scenario.frame_mix or scenario.frame_size,
                          f"<= {biggest - over} bytes for this {scenario.dp.title} traffic on the xdp "
                          f"testbed (the generator sends frames up to {live_frame_max()} bytes, native XDP on veth "
                          f"takes an MTU up to {xdp_max_mtu()}: one page each)")

class XdpGenerator(Generator):
    """Local testbed + the dataplane + XDP generator and sink, prepared for one scenario."""

    name = "xdp"
    sets_knobs = True
    counts_at_socket = True
    verdicts = frozenset(VERDICTS)
    sends_mixes = True

    def __init__(self, scenario: Scenario, *, tester_cores: list[int] | None = None, capture: str | Path | None = None,
                 capture_count: int = CAPTURE_COUNT, mtu: int | None = None, testbed_id: str | None = None,
                 batch_size: int | None = None, flow_op: str = "inc", profile: Traffic | None = None,
                 trivial_generator: bool = False, disturbed_retries: int = Generator.disturbed_retries,
                 trex_profile: StlProfile | str | Path | None = None, trex_tunables: list[str] | None = None,
                 rx_queue: int = RX_QUEUE, speed_reference: float | str | None = None, shield: bool = False,
                 perf_stat: bool = True, exporter_targets: str | Path | None = None):
        """``rx_queue``: frames of the DUT's NIC-sized receive queue (0: the veth rings of 256 frames;
        see ``perfkit.testbed.dut``). ``speed_reference``: speed normalization (``perfkit.search.judging``)
        at a reference CPU speed [ns per probe step], or ``"auto"``: the DUT cores' speed measured at
        set-up (``SPEED_REFERENCE_S``); None: off. ``trex_profile``: a TRex STL profile (an ``StlProfile`` or the
        path of one, loaded with ``trex_tunables``) whose streams the generator sends instead of the
        scenario's traffic; the scenario still configures the DUT (``perfkit.testbed.stlgen``).
        ``shield``: move every other task that may run elsewhere off the DUT cores while the generator
        lives (``perfkit.testbed.shield``; not with shared cores, where the tester needs them).
        ``perf_stat``: count the DUT cores' events with ``perf stat`` during each trial
        (``perfkit.perf.stat``: ``dut_perf_counts``, ``dut_cycles_per_packet``). ``exporter_targets``: a
        metrics stack's ``targets/`` directory; ``perfkit exporter`` then serves the dataplane's
        counters while it is loaded, off the DUT cores, registered there for the stack's Prometheus
        (``perfkit.testbed.exporterproc``)."""
        super().__init__(scenario)
        check_rx_queue(rx_queue)
        self.rx_queue = rx_queue
        if isinstance(disturbed_retries, bool) or not isinstance(disturbed_retries, int) or disturbed_retries < 0:
            raise ConfigError("disturbed_retries", disturbed_retries, "an integer >= 0")
        self.disturbed_retries = disturbed_retries
        if not isinstance(shield, bool):
            raise ConfigError("shield", shield, "true or false")
        if not isinstance(perf_stat, bool):
            raise ConfigError("perf_stat", perf_stat, "true or false")
        self.perf_stat = perf_stat
        self.profile = profile or scenario.traffic()
        # a TRex STL profile replaces the traffic; the scenario still configures the DUT. A
        # description's traffic is one (``perfkit.describe.traffic``)
        trex_profile = trex_profile if trex_profile is not None else getattr(self.profile, "stl_profile", None)
        if trex_profile is not None and not isinstance(trex_profile, StlProfile):
            port = stlprofile.port_of(self.profile.ingress)  # sent as TRex sends it from that port of the testbed
            trex_profile = stlprofile.load(trex_profile, trex_tunables or [], port, macs=testbed_macs(port))
        self.trex_profile = trex_profile
        self.stl = stlgen.for_testbed(trex_profile) if trex_profile else None
        self.dut_cores, self.tester_cores, self.shared = allocate_cores(scenario.dut_cores, tester_cores)
        self.capture_path = Path(capture) if capture else None
        self.capture_count = max(capture_count, 1)
        check_frame_size(scenario, self.profile)  # before the testbed: a size veth cannot carry is refused
        if self.stl:
            stlgen.check_size(self.stl, live_frame_max(), xdp_max_mtu())
        self.testbed = Testbed(testbed_id=testbed_id, mtu=mtu or max(needed_mtu(self.profile),
                                                                      len(self.stl.frame) - 14 if self.stl else 0))
        self.dut: Dut | None = None
        self.sink: Sink | None = None
        self.gen: LiveGenerator | None = None
        self.stalls: StallProbe | None = None
        self.shield: Shield | None = None
        self.coreshare: CoreShare | None = None
        self.confinement: Confinement | None = None
        self.knobs: Knobs | None = None
        #: Where traffic the dataplane passes to the DUT's kernel is counted (``Traffic.to_socket``).
        self.socket_sink: SocketSink | None = None
        #: Where traffic that leaves by no DUT port is counted instead of the sink (``Traffic.verdict``):
        #: the socket, the DUT kernel's counters (XDP_PASS) or its forwarding counters (XDP_DROP).
        self.receiver: SocketSink | KernelSink | CounterSink | None = None
        #: The loaded dataplane described for ``perfkit exporter`` (and the exporter, with targets).
        self.export: DutExport | None = None
        self._affinity = os.sched_getaffinity(0)
        try:
            self.testbed.up()
            setup = {k: v for k, v in scenario.knobs.items() if k in SETUP_KNOBS}
            self.dut = Dut(self.testbed, scenario.dp, self.profile, self.dut_cores, rx_queue=rx_queue,
                           nic_cores=self.tester_cores, **setup)
            self.dut_tables = self.dut.tables()
            self.export = DutExport(scenario.dp, self.dut.nf, self.testbed.rid, exporter_targets,
                                    cpus=self.tester_cores if not self.shared else None)
            if scenario.knobs:  # once the DUT runs: what they are read as is what it runs with otherwise
                self.knobs = Knobs(self.testbed.rid, tuple(KnobPort(p.ns, p.dev) for p in (self.testbed.a, self.testbed.b)),
                                   scenario.knobs)
                # a knob that re-creates a port's queues re-creates its NAPI threads, unpinned
                if any(not os.path.exists(f"/proc/{pid}") for pid in self.dut.packet_threads):
                    raise TestbedError(f"knobs {dict(scenario.knobs)}: the DUT ports' NAPI threads were re-created, "
                                       "so the DUT cores no longer run them; perfkit cannot measure the DUT so")
            if self.profile.to_socket:
                dut_in = self.testbed.a if self.profile.ingress == "a" else self.testbed.b
                addr, port = self.profile.to_socket
                self.socket_sink = SocketSink(dut_in.ns, addr, port, round(scenario.wire_frame_size) if scenario.mix
                                              else self.profile.wire_frame_size, dev=dut_in.dev)
            self.receiver = self.socket_sink or self._receiver(scenario)
            self.sink = Sink(self.capture_count)
            sink_threads = []
            for port in (self.testbed.p0, self.testbed.p1):
                self.sink.attach(port.ns, port.ifindex)
                sink_threads += self.testbed.pin_napi(port, set(self.tester_cores), realtime=True)
            self.stalls = StallProbe(set(self.dut_cores) | set(self.tester_cores))
            self.stalls.watch(self.dut.packet_threads + sink_threads)
            #: The DUT core each packet thread runs on (dut_busy_per_core), and each core's queue.
            self.thread_cores = thread_cores(self.dut.packet_threads)
            self.queues = dut_queues(self.dut_cores, rx_queue)
            at_a = self.profile.ingress == "a"
            self.tx, self.rx = (self.testbed.p0, self.testbed.p1) if at_a else (self.testbed.p1, self.testbed.p0)
            self.dut_in = self.testbed.a if at_a else self.testbed.b
            #: The DUT port frames leave by (``Traffic.egress``), None for XDP_PASS and XDP_DROP.
            egress = self.profile.egress
            self.dut_out = None if egress is None else self.testbed.a if egress == "a" else self.testbed.b
            #: The DUT port's counter of frames its tester's ring refused: a redirect's, or an XDP_TX's.
            self.out_errors = "rx_queue_0_xdp_tx_errors" if self.profile.verdict == "XDP_TX" and not \
                self.profile.to_socket else "tx_queue_0_xdp_xmit_errors"
            #: A frame mix's traffic per size (``Scenario.traffics``), each checked with its own profile.
            self.mix = scenario.traffics() if scenario.mix and profile is None and not self.stl else ()
            self.mix_outputs = {t.output_frame_size - FCS_LEN: t for t, _ in self.mix}
            self.gen = LiveGenerator(self.profile, self.tx, self.testbed.anchor, self.tester_cores,
                                     batch_size=batch_size, flow_op=flow_op, trivial=trivial_generator, stl=self.stl,
                                     mix=self.mix)
            # the calling thread on the tester cores; every other thread of perfkit's off the DUT cores
            os.sched_setaffinity(0, set(self.tester_cores))
            self.coreshare = CoreShare(self.dut.packet_threads)
            self.confinement = Confinement(self.dut_cores)
            if shield and not self.shared:
                self.shield = Shield(self.testbed.rid, frozenset(self.dut_cores))
            self.set_speed_reference(speed_reference)
        except BaseException:
            self.close()
            raise

    def measure_reference(self) -> tuple[float, float | None]:
        """The DUT cores' speed and the kernel path's cost per packet, from one ``SPEED_REFERENCE_S``
        trial at the scenario's line rate, which saturates any DUT the generator can outrun: the
        references are the loaded DUT's (an idle core reads slower than a busy one). When the
        generator could not keep the DUT cores ``BUSY_MIN`` busy, the speed is measured
        without traffic and the kernel path has no reference."""
        r = self.measure(line_rate_pps(self.scenario), SPEED_REFERENCE_S)
        if r.dut_speed_ns_per_step and r.kernel_ns_per_packet and (r.dut_busy or 0) >= BUSY_MIN:
            return r.dut_speed_ns_per_step, r.kernel_ns_per_packet
        return self.measure_speed(), None

    def measure_speed(self) -> float:
        """The DUT cores' speed [ns per probe step], measured for ``SPEED_REFERENCE_S`` without traffic."""
        assert self.stalls
        return stallprobe.reference_speed(self.stalls, self.dut_cores, SPEED_REFERENCE_S)

    def perf_recorder(self, frequency: int | None = None) -> PerfRecorder:
        """``perf record`` of the DUT cores (``perfkit.perf.record``)."""
        from perfkit.perf.record import DEFAULT_FREQUENCY, PerfRecorder
        return PerfRecorder(self.dut_cores, frequency or DEFAULT_FREQUENCY)

    @classmethod
    def check_scenario(cls, scenario: Scenario) -> None:
        super().check_scenario(scenario)
        check_frame_size(scenario, scenario.traffic())

    # -- one trial -------------------------------------------------------------------------------
    def measure(self, rate_pps: float | None, duration: float, packets: int | None = None) -> TrialResult:
        assert self.gen and self.sink and self.dut
        if rate_pps is not None and not (rate_pps > 0 and math.isfinite(rate_pps)):
            raise ConfigError("rate", rate_pps, "a positive number of packets/s, or None (as fast as possible)")
        if not (duration > 0 and math.isfinite(duration)):  # nan, inf, 0 and negative would never end or wrap
            raise ConfigError("duration", duration, "a positive number of seconds")
        if packets is not None and (isinstance(packets, bool) or not isinstance(packets, int) or packets < 1):
            raise ConfigError("packets", packets, "an integer >= 1")  # the quota is unsigned in the program
        if self.shield:
            self.shield.refresh()
        self.sink.reset(self.capture_count)
        if self.receiver:
            self.receiver.reset()
        skbs0 = self.socket_sink.skbs() if self.socket_sink else 0
        self.gen.reset()
        if self.confinement and self.coreshare:
            self.coreshare.set_perfkit(self.confinement.refresh())
        dut0, per_core0 = self.dut.read_counters()
        links0 = {p.dev: self.testbed.link_stats(p) for p in (self.tx, self.dut_out) if p}
        cpu0 = cpustat.snapshot(kthreads=self.dut.kthread_patterns)
        mark = self.stalls.mark() if self.stalls else None
        share0 = self.coreshare.mark() if self.coreshare else None  # the window dut_busy is over
        slices0 = cpustat.timeslices(self.dut.packet_threads)
        threads0, window0 = cpustat.runtime_ns(self.dut.packet_threads), time.monotonic_ns()
        counter = trial_counter(self.dut_cores) if self.perf_stat else None
        with BpfStats(), counter or contextlib.nullcontext():
            rt0 = self.dut.runtime()
            sent = self.gen.send(rate_pps, duration, packets)
            self._drain()
            rt1 = self.dut.runtime()
        threads1, window1 = cpustat.runtime_ns(self.dut.packet_threads), time.monotonic_ns()
        slices1 = cpustat.timeslices(self.dut.packet_threads)
        thread_ns = {p: threads1[p] - threads0[p] for p in threads1 if p in threads0}
        core_share = core_share_fields(self.coreshare.since(share0, self.dut_cores)) if self.coreshare and share0 else {}
        cpu = cpustat.delta(cpu0, cpustat.snapshot(kthreads=self.dut.kthread_patterns))
        stalled = (stallprobe.evidence(self.stalls.since(mark), self.dut_cores, self.tester_cores)
                   if self.stalls and mark else {})
        end = time.time()
        rep = (self.receiver or self.sink).read()
        skbs = self.socket_sink.skbs() - skbs0 if self.socket_sink else 0
        dut1, per_core1 = self.dut.read_counters()
        links1 = {p.dev: self.testbed.link_stats(p) for p in (self.tx, self.dut_out) if p}

        tx_packets, tx_bytes = self.gen.counters()
        if self.gen.trivial:
            tx_packets, tx_bytes = sent.requested, sent.requested * self.gen.wire_frame_size
        xmit_err = "tx_queue_0_xdp_xmit_errors"
        dut_drops = self.dut.drops(dut0, dut1)
        ring_in = links1[self.tx.dev].get(xmit_err, 0) - links0[self.tx.dev].get(xmit_err, 0)
        out, err = self.dut_out, self.out_errors
        ring_out = links1[out.dev].get(err, 0) - links0[out.dev].get(err, 0) if out else 0
        tester_ring = ring_out
        # the veth ring in front of the DUT's NAPI threads is on one core, the first DUT core's
        ring_cores = self.dut_cores[:1] if ring_in else []
        if self.rx_queue:
            # the veth ring in front of the hand-off is the NIC's, served by a tester core; the
            # queue's overflow is what the hand-off redirected and the DUT program never saw
            tester_ring += ring_in
            entry, nf = (p.name for p in self.dut.programs)
            ring_in = _runs(rt0, rt1, entry) - _runs(rt0, rt1, nf)
            ring_cores = list(self.dut_cores) if ring_in else []
        elif len(self.dut_cores) > 1:
            # behind the veth ring, the cpumap's queues (one per core: which one is not counted)
            entry, nf = (p.name for p in self.dut.programs)
            cpumap = _runs(rt0, rt1, entry) - _runs(rt0, rt1, nf)
            if cpumap > 0:
                ring_in += cpumap
                ring_cores = list(self.dut_cores)
        dut_drops = accounting.with_ring(dut_drops, ring_in)
        tester_drops = accounting.tester_drops(tester_ring)
        seen = accounting.verdicts(accounting.rose(dut0, dut1), self.profile.verdict, rep.packets, dut_drops)

        progs = [p.name for p in self.dut.dut_programs]
        runs = _runs(rt0, rt1, progs[0])
        ns = sum(rt1[p].run_time_ns - rt0[p].run_time_ns for p in progs)
        caps = self.sink.captures()
        mismatches = [why for c in caps if (why := self._check_output(c.data))]
        if self.capture_path:
            write_pcap(self.capture_path, caps)

        result = TrialResult.for_scenario(
            self.scenario, wire_frame_size=self.gen.wire_frame_size, dut_cores=len(self.dut_cores), generator=self.name, duration=duration, intended_pps=float(rate_pps or 0.0),
            intended_packets=sent.intended if rate_pps or packets else tx_packets,
            tx_packets=tx_packets, rx_packets=rep.packets + rep.unsigned if self._unsigned else rep.packets,
            tx_bytes=tx_bytes, rx_bytes=rep.frame_bytes if self._unsigned else rep.bytes,
            elapsed=sent.elapsed, start_time=sent.start, end_time=end, latency_ns=rep.latency_ns(), ipdv_ns=rep.ipdv_ns(),
            reordered=rep.reordered, duplicates=rep.duplicates, mismatched_packets=len(mismatches),
            dut_drops=dut_drops, tester_drops=tester_drops, dut_cpu=cpu.dut_cpu(self.dut_cores),
            cpu_modes={str(c): {m: cpu.fraction(c, m) for m in cpustat.MODES} for c in cpu.cpus},
            dut_kthread_cpu=cpu.kthread_busy(), bpf_ns_per_packet=ns / runs if runs else None,
            shared_cores=self.shared, sink_gap_us=None if self.receiver else rep.max_gap_ns / 1e3,
            verdicts=seen.packets, verdicts_from=seen.source,
            **dut_cost(sum(thread_ns.values()), runs, ns, window1 - window0, len(self.dut_cores)),
            dut_wakeups=sum(slices1[p] - slices0[p] for p in slices1 if p in slices0),
            dut_tables=self.dut_tables, objects=self.dut.object_hashes(),
            dut_packets_per_core={str(c): per_core1[c] - per_core0.get(c, 0) for c in per_core1},
            dut_busy_per_core=busy_per_core(thread_ns, self.thread_cores, window1 - window0, self.dut_cores),
            ring_cores=ring_cores,
            socket_datagrams_per_skb=rep.packets / skbs if skbs else None,
            **perf_stat_fields(counter.counts if counter else None, runs),
            gen_slip_us=max(0.0, sent.elapsed - duration) * 1e6 if rate_pps else None, **stalled, **core_share)
        result.speed_reference_ns = self.speed_reference_ns
        result.kernel_reference_ns = self.kernel_reference_ns
        stall = disturbance.stalled(result, self.queues)
        result.stalled = bool(stall)
        result.disturbance = disturbance.disturbance(result, self.queues)
        result.disturbed = bool(result.disturbance)
        if stall:
            result.notes.append(f"stalled: {stall}: host stalls may have cost it frames")
        result.notes.extend(self._notes(result, 0 if self._unsigned else rep.unsigned, mismatches, len(caps)))
        if self.stl and self.trex_profile:
            result.notes.append(stlgen.counting_note(self.trex_profile, self.stl))
            if self.stl.address_maps:
                result.notes.append(addresses.note(self.stl.address_maps))
        return result

    def _receiver(self, scenario: Scenario) -> KernelSink | CounterSink | None:
        """Where traffic that leaves by no DUT port is counted (``Traffic.verdict``); None: the sink."""
        assert self.dut
        size = round(scenario.wire_frame_size) if scenario.mix else self.profile.wire_frame_size
        if self.profile.verdict == "XDP_PASS":
            return KernelSink(self.testbed.dut_ns, size)
        if self.profile.verdict == "XDP_DROP":
            return CounterSink(self.dut, size)
        return None

    def _check_output(self, frame: bytes) -> str | None:
        """None when ``frame`` is what the DUT should emit; of a mix, for the traffic of its size
        (a dataplane without a model: not checked)."""
        assert self.dut
        if not self.scenario.dp.has_model:
            return None
        if not self.mix_outputs:
            return self.dut.check_output(frame)
        traffic = self.mix_outputs.get(len(frame))
        if traffic is None:
            return f"a frame of {len(frame)} bytes, none of the mix's ({sorted(self.mix_outputs)} without FCS)"
        return self.scenario.dp.output_check(traffic, frame)

    def _drain(self) -> None:
        """Wait until frames stop arriving at the sink (in-flight frames are not lost frames)."""
        sink = self.receiver or self.sink
        assert sink
        deadline, last, quiet_since = time.monotonic() + DRAIN_MAX, -1, time.monotonic()
        while time.monotonic() < deadline:
            frames = sink.totals()[0]
            if frames != last:
                last, quiet_since = frames, time.monotonic()
            elif time.monotonic() - quiet_since >= DRAIN_QUIET:
                return
            stop.check()   # a stop pending (perfkit.stop): this trial is not finished
            time.sleep(0.005)

    @property
    def _unsigned(self) -> bool:
        """A TRex profile that leaves no room for the signature: the sink counts frames, not streams."""
        return bool(self.stl and not self.stl.signed)

    def _notes(self, r: TrialResult, unsigned: int, mismatches: list[str], captured: int) -> list[str]:
        notes = accounting.notes(r)
        if unsigned:
            notes.append(f"{unsigned} frames without a signature reached the sink")
        if mismatches:
            notes.append(f"{len(mismatches)} of {captured} captured packets are not what the {self.scenario.dp.title} should emit; "
                         f"first: {mismatches[0]}")
        if not self.scenario.dp.has_model:
            notes.append(NO_MODEL_NOTE)
        if self.shared:
            notes.append(f"DUT cores {self.dut_cores} shared with the tester {self.tester_cores}: pessimistic figures")
        if r.speed_reference_ns and r.dut_speed_ns_per_step:
            notes.append(f"speed-normalized: judged at {r.judged_pps:.0f} pps, the offered rate x {r.speed_factor:.3f} "
                         f"(DUT cores at {r.dut_speed_ns_per_step:.3f} ns per probe step, reference "
                         f"{r.speed_reference_ns:.3f}" + (f"; kernel path {r.kernel_ns_per_packet:.0f} ns per packet, "
                                                          f"reference {r.kernel_reference_ns:.0f}"
                                                          if r.kernel_reference_ns and r.kernel_ns_per_packet else "") + ")")
        if r.intended_pps and r.elapsed > 0 and r.tx_pps < 0.95 * r.intended_pps:
            notes.append(f"generator offered {r.tx_pps:.0f} pps of the {r.intended_pps:.0f} intended")
        return notes

    def close(self) -> None:
        """Take every part and the testbed down. A stop (Ctrl-C, SIGTERM) that arrives meanwhile is
        raised once all of it is down: raised halfway, it skipped the parts after the one it cut, and
        the testbed's exit handler then took the namespaces down but left the dataplane's description
        behind (the stop drill of CI found one). The testbed goes down after the raise: it forgets
        the stop its own handler recorded, and a pending one would be lost."""
        try:
            with stop.deferred():
                self._close_parts()
        finally:
            self.testbed.down()
            try:
                os.sched_setaffinity(0, self._affinity)
            except OSError:
                pass

    def _close_parts(self) -> None:
        if self.confinement is not None:
            self.confinement.release()
        # the knobs first: restored to what they were read as, with the DUT's program still attached
        for part in (self.knobs, self.shield, self.coreshare, self.stalls, self.gen, self.socket_sink, self.sink,
                     self.export, self.dut):
            if part is not None:
                try:
                    part.close()
                except Exception:  # noqa: BLE001 - the testbed must go down regardless
                    pass
        self.knobs = self.shield = self.coreshare = self.confinement = self.stalls = self.gen = self.sink = None
        self.socket_sink = self.receiver = self.export = None
        self.dut = None
