"""What the agent runs on a lab host for each role: the DUT's dataplane and its measurements
(``DutSide``), and a tester's XDP generator and sink (``TesterSide``).

They are the local testbed's parts (``perfkit.testbed``: the dataplane's loader, ``LiveGenerator``,
``Sink``, the DUT's CPU accounting) on the host's own interfaces, in the network namespace the
agent runs in. Answers are plain JSON-ready dicts; ``perfkit.generators.lab`` turns them into a
``TrialResult``.
"""
from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from perfkit import accounting
from perfkit.dataplane import PortMacs
from perfkit.errors import BpfError, ConfigError, PerfkitError
from perfkit.generators.xdpcores import busy_per_core, dut_cost, thread_cores
from perfkit.host import cpustat
from perfkit.host.housekeeping import Confinement
from perfkit.knobs import Knobs, Port as KnobPort
from perfkit.libbpf import BpfStats, prog_info, xdp_attach, xdp_detach, xdp_prog_id
from perfkit.perf.stat import PerfCounter, perf_stat_fields, trial_counter
from perfkit.scenario import Scenario
from perfkit.stl.fieldengine import FlowSlice
from perfkit.testbed import netns
from perfkit.testbed.coreshare import CoreShare, trial_fields as core_share_fields

#: How long the sink must see nothing new before a trial counts as drained [s] (as the local testbed).
DRAIN_QUIET = 0.05
DRAIN_MAX = 2.0


def xmit_errors(dev: str) -> int:
    """Frames XDP redirected to ``dev`` that its peer's ring refused (veth), or 0."""
    return sum(v for k, v in netns.link_stats(None, dev).items() if k.endswith("xdp_xmit_errors"))


def threaded_napi(ifaces: list[str], cores: list[int]) -> list[int]:
    """Threaded NAPI on ``ifaces``, with SCHED_FIFO as on the local testbed: each interface's queue k
    (its k-th NAPI thread, by NAPI id) pinned to ``cores[k % len(cores)]``, as RSS and IRQ affinity
    spread a NIC's queues over cores; returns the threads' pids (none where the driver has none)."""
    pids = []
    for iface in ifaces:
        try:
            with open(f"/sys/class/net/{iface}/threaded", "w") as f:
                f.write("1")
        except OSError:
            continue
        threads = sorted(cpustat.find_kthreads(f"napi/{iface}-*"), key=lambda t: _napi_id(t.name))
        for k, t in enumerate(threads):
            if cores:
                os.sched_setaffinity(t.pid, {cores[k % len(cores)]})
            os.sched_setscheduler(t.pid, os.SCHED_FIFO, os.sched_param(50))
            pids.append(t.pid)
    return pids


def _napi_id(thread_name: str) -> int:
    """The NAPI id of a thread ``napi/<iface>-<id>`` (ids grow in the order a driver adds queues)."""
    tail = thread_name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _stall_probe(cores: list[int], threads: list[int]) -> Any:
    """The stall probe on the DUT cores, watching the packet threads (``perfkit.host.stallprobe``), as
    the local testbed arms it; None where it cannot run (the host's kernel has no BTF for it)."""
    from perfkit.host.stallprobe import StallProbe
    try:
        probe = StallProbe(set(cores))
    except (PerfkitError, OSError):
        return None
    probe.watch(threads)
    return probe


def _core_share(threads: list[int]) -> CoreShare | None:
    """Who runs on the DUT cores (``perfkit.testbed.coreshare``), as the local testbed measures it;
    None where its program cannot load on the host."""
    try:
        return CoreShare(threads)
    except (PerfkitError, OSError):
        return None


def attach(ifindex: int, fd: int) -> str:
    """Attach natively, else generically; returns the mode."""
    try:
        xdp_attach(ifindex, fd, "native")
        return "native"
    except BpfError:
        xdp_attach(ifindex, fd, "generic")
        return "generic"


class DutSide:
    """The dataplane on the DUT host: one instance per pair of interfaces ``[a, b]`` (a tester's
    cables), and what one trial cost it."""

    def __init__(self, scenario: Scenario, pairs: list[list[str]], cores: list[int], on_attach: Any = None,
                 macs: list[PortMacs] | None = None):
        """``on_attach(name, ifindex, mode, prog_id)`` records each attachment before anything else;
        ``macs``: each pair's ports' MAC addresses (default: the local testbed's). The scenario's
        system knobs are set on the pairs' interfaces once the dataplane runs, and restored on close."""
        self.scenario, self.cores = scenario, list(cores)
        self.knobs: Knobs | None = None
        self._counter: PerfCounter | None = None
        self.instances: list[Any] = []
        self.attached: dict[str, tuple[int, str, int]] = {}
        #: Interfaces whose program the NF's own loader attached (its teardown detaches it).
        self.by_nf: set[str] = set()
        self.modes: dict[str, str] = {}
        self.perf: Any = None
        self.stalls: Any = None
        self.coreshare: Any = None
        # the agent and its perf record stay off the DUT cores, as perfkit does locally
        self.confinement = Confinement(self.cores)
        self._stats: BpfStats | None = None
        traffic = scenario.traffic()
        try:
            for (a, b), port_macs in zip(pairs, macs or [PortMacs()] * len(pairs)):
                ia, ib = netns.ifindex(None, a), netns.ifindex(None, b)
                nf = scenario.dp.load(traffic.on_ports(port_macs), ia, ib)
                self.instances.append(nf)
                if getattr(nf, "attached_by_nf", False):
                    self._found_attached(nf, *((a, ia) if traffic.ingress == "a" else (b, ib)))
                    if on_attach:
                        on_attach(self.attached)
                    continue
                for name, idx in ((a, ia), (b, ib)):
                    mode = attach(idx, nf.program.fd)
                    self.attached[name] = (idx, mode, prog_info(nf.program.fd).id)
                    self.modes[name] = mode
                    if on_attach:
                        on_attach(self.attached)
            # the knobs before the NAPI threads are pinned: on a NIC, ethtool -L/-G (and some -K)
            # re-create the queues and their threads. The interfaces are the inventory's: the agent
            # refused any other.
            if scenario.knobs:
                self.knobs = Knobs(f"agent{os.getpid()}", tuple(KnobPort("", i) for p in pairs for i in p),
                                   scenario.knobs)
            self.packet_threads = threaded_napi([i for p in pairs for i in p], self.cores)
            self.stalls = _stall_probe(self.cores, self.packet_threads)
            self.coreshare = _core_share(self.packet_threads)
        except BaseException:
            self.close()
            raise
        self.egress = [p[1] if traffic.ingress == "a" else p[0] for p in pairs]
        self.forwarding = scenario.dp.forwarding(traffic)
        self.thread_cores = thread_cores(self.packet_threads)
        self._begin: dict[str, Any] = {}

    def _found_attached(self, nf: Any, name: str, ifindex: int) -> None:
        """The program the NF's own loader (a description's ``attach.setup``) attached on the ingress
        port ``name``: recorded (so that ``perfkit clean`` detaches it after a killed agent), not attached."""
        want = prog_info(nf.program.fd).id
        for mode in ("native", "generic"):
            if xdp_prog_id(ifindex, mode) == want:
                self.attached[name], self.modes[name] = (ifindex, mode, want), mode
                self.by_nf.add(name)
                return
        raise PerfkitError(f"dataplane {self.scenario.dp.name}: the program its setup attached (id {want}) is not on "
                           f"the ingress interface {name}")

    def object_hashes(self) -> dict[str, str]:
        """sha256 of every BPF object the instances loaded on this host, by path (``DutProgram.object_hashes``)."""
        return {k: v for nf in self.instances for k, v in nf.object_hashes().items()}

    def counters(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for nf in self.instances:
            for k, v in nf.counters().items():
                out[k] = out.get(k, 0) + v
        return out

    def _runtime(self) -> tuple[int, int]:
        infos = [prog_info(nf.program.fd) for nf in self.instances]
        return sum(i.run_cnt for i in infos), sum(i.run_time_ns for i in infos)

    def begin(self, start_at: float | None = None) -> None:
        """Mark the start of a trial at ``start_at`` (a Unix time: the testers' common start; the
        busy shares are over the window from then to ``end``); kernel BPF statistics are on until ``end``."""
        # every counter is read before the start: read after it, the first frames (and the drops
        # at a full ring) would fall outside the trial
        self._stats = BpfStats()
        self._stats.__enter__()
        self._begin = {"counters": self.counters(), "runtime": self._runtime(),
                       "threads": cpustat.runtime_ns(self.packet_threads), "slices": cpustat.timeslices(self.packet_threads),
                       "out_errors": sum(xmit_errors(d) for d in self.egress)}
        if self.coreshare:
            self.coreshare.set_perfkit(self.confinement.refresh())
        # perf stat of the DUT cores, started before the common start (it takes ~0.1 s to come up)
        self._counter = trial_counter(self.cores) if self.cores else None
        if self._counter:
            self._counter.start()
        if start_at is not None:
            time.sleep(max(0.0, start_at - time.time()))
        self._begin.update(stalls=self.stalls.mark() if self.stalls else None, window=time.monotonic_ns(),
                           share=self.coreshare.mark() if self.coreshare else None)

    def end(self) -> dict[str, Any]:
        """What the DUT did since ``begin``: drops by reason, program run time, its packet threads'
        CPU time per packet, busy shares, wake-ups; frames it could not hand to a tester's ring."""
        if not self._begin:
            raise PerfkitError("end without begin")
        threads1, window1 = cpustat.runtime_ns(self.packet_threads), time.monotonic_ns()
        slices1 = cpustat.timeslices(self.packet_threads)
        runs1, ns1 = self._runtime()
        counter, self._counter = self._counter, None
        counts = counter.stop() if counter else None
        if self._stats:
            self._stats.__exit__(None, None, None)
            self._stats = None
        b = self._begin
        counters1 = self.counters()
        from perfkit.host.stallprobe import evidence
        stalls = evidence(self.stalls.since(b["stalls"]), self.cores, []) if self.stalls and b["stalls"] else {}
        shares = core_share_fields(self.coreshare.since(b["share"], self.cores)) if self.coreshare and b["share"] else {}
        drops = accounting.counter_drops(b["counters"], counters1, self.forwarding)
        runs, ns = runs1 - b["runtime"][0], ns1 - b["runtime"][1]
        thread_ns = {p: threads1[p] - b["threads"][p] for p in threads1 if p in b["threads"]}
        window = window1 - b["window"]
        self._begin = {}
        return {"dut_drops": drops, "runs": runs, "bpf_ns_per_packet": ns / runs if runs else None,
                **dut_cost(sum(thread_ns.values()), runs, ns, window, len(self.cores)),
                "dut_busy_per_core": busy_per_core(thread_ns, self.thread_cores, window, self.cores),
                **perf_stat_fields(counts, runs),
                "dut_wakeups": sum(slices1[p] - b["slices"][p] for p in slices1 if p in b["slices"]),
                "tester_ring": sum(xmit_errors(d) for d in self.egress) - b["out_errors"],
                "forwarded": {k: counters1[k] - b["counters"].get(k, 0) for k in counters1 if k in self.forwarding},
                **shares,
                **{k: v for k, v in stalls.items() if k != "tester_stall_us"}}

    def perf_start(self, frequency: int) -> None:
        """``perf record`` the DUT cores (folded by the controller: a DUT host has no inferno)."""
        from perfkit.perf.record import PerfRecorder
        if self.perf is not None:
            raise PerfkitError("perf is recording already")
        rec = PerfRecorder(self.cores, frequency, fold=False)
        rec.start()
        self.perf = rec

    def perf_stop(self) -> dict[str, Any]:
        """Stop recording: the profile's fields, ``perf script``'s output as ``script`` (text)."""
        if self.perf is None:
            raise PerfkitError("perf is not recording")
        rec, self.perf = self.perf, None
        profile = rec.stop()
        return {"script": rec.script.decode(errors="replace"), "cpus": profile.cpus, "frequency": profile.frequency,
                "call_graph": profile.call_graph, "event": profile.event, "seconds": profile.seconds,
                "perf_cpu_seconds": profile.perf_cpu_seconds, "perf_process_cpus": profile.perf_process_cpus,
                "lost_events": profile.lost_events}

    def close(self) -> list[str]:
        """Detach this side's programs (only if still its own) and close them; returns the interfaces.
        A knob that cannot be restored is raised after everything else is taken down."""
        knobs, self.knobs = self.knobs, None
        try:
            if knobs is not None:
                knobs.close()
        except BaseException:
            self._take_down()
            raise
        return self._take_down()

    def _take_down(self) -> list[str]:
        if self._counter is not None:
            self._counter.abort()
            self._counter = None
        if self.perf is not None:
            self.perf.abort()
            self.perf = None
        if self.stalls is not None:
            self.stalls.close()
            self.stalls = None
        if self.coreshare is not None:
            self.coreshare.close()
            self.coreshare = None
        self.confinement.release()
        if self._stats:
            self._stats.__exit__(None, None, None)
            self._stats = None
        detached = []
        for name, (ifindex, mode, prog_id) in list(self.attached.items()):
            if name in self.by_nf:   # the NF's teardown detaches it (nf.close, below)
                del self.attached[name]
                continue
            try:
                if xdp_prog_id(ifindex, mode) == prog_id:
                    xdp_detach(ifindex, mode)
                    detached.append(name)
            except BpfError:
                pass   # the interface is gone, and its program with it
            del self.attached[name]
        for nf in self.instances:
            nf.close()
        self.instances = []
        return detached


class TesterSide:
    """perfkit's XDP generator and sink on a tester host's pair of interfaces ``[first, second]``
    (cabled to the DUT's ``a`` and ``b``), sending its slice of the flows into the DUT's ingress side."""

    def __init__(self, scenario: Scenario, pair: list[str], cores: list[int], capture_count: int = 64,
                 flow_slice: FlowSlice = FlowSlice(), macs: PortMacs = PortMacs()):
        from perfkit.testbed.livegen import LiveGenerator
        from perfkit.testbed.sink import Sink
        from perfkit.testbed.topology import Port
        if not cores:
            raise ConfigError("tester_cores", cores, "the tester host's CPUs for the generator, e.g. [2]")
        self.scenario, self.capture_count = scenario, capture_count
        profile = scenario.traffic().on_ports(macs)
        self.tx, self.rx = pair if profile.ingress == "a" else pair[::-1]
        # the generator's anchor: a veth pair of its own on the host (perfkit.testbed.livegen)
        self.anchor = f"pkg{os.getpid() % 0xfffff:05x}g"
        self.sink: Any = None
        self.gen: Any = None
        try:
            netns.run(None, "ip", "link", "add", self.anchor, "type", "veth", "peer", "name", self.anchor[:-1] + "h")
            for dev in (self.anchor, self.anchor[:-1] + "h"):
                netns.run(None, "ip", "link", "set", dev, "up")
            self.sink = Sink(capture_count)
            for dev in pair:
                self.sink.attach(None, netns.ifindex(None, dev))
            self.sink_threads = threaded_napi(list(pair), cores)
            self.gen = LiveGenerator(profile, Port(None, self.tx, "", ""), Port(None, self.anchor, "", ""), cores,
                                     flow_slice=flow_slice)
        except BaseException:
            self.close()
            raise

    def send(self, rate_pps: float | None, duration: float, packets: int | None = None,
             start_at: float | None = None) -> dict[str, Any]:
        """One trial's sending (from ``start_at``, a Unix time, when given) and what came back."""
        assert self.gen and self.sink
        self.sink.reset(self.capture_count)
        self.gen.reset()
        in_errors = xmit_errors(self.tx)
        if start_at is not None:
            time.sleep(max(0.0, start_at - time.time()))
        sent = self.gen.send(rate_pps, duration, packets)
        deadline, last, quiet = time.monotonic() + DRAIN_MAX, -1, time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - quiet < DRAIN_QUIET:
            frames = self.sink.totals()[0]
            if frames != last:
                last, quiet = frames, time.monotonic()
            time.sleep(0.005)
        end = time.time()
        rep = self.sink.read()
        tx_packets, tx_bytes = self.gen.counters()
        live = [s for s in rep.streams if s.packets]
        return {"tx_packets": tx_packets, "tx_bytes": tx_bytes, "intended": sent.intended, "elapsed": sent.elapsed,
                "start_time": sent.start, "end_time": end, "rx_packets": rep.packets, "rx_bytes": rep.bytes,
                "unsigned": rep.unsigned, "reordered": rep.reordered, "duplicates": rep.duplicates,
                "latency_hist": rep.latency_hist.tolist(), "ipdv_hist": rep.ipdv_hist.tolist(),
                "latency_min_ns": min((s.lat_min_ns for s in live), default=None),
                "latency_max_ns": max((s.lat_max_ns for s in live), default=None),
                "max_gap_ns": rep.max_gap_ns, "wire_frame_size": self.gen.wire_frame_size,
                "dut_ring": xmit_errors(self.tx) - in_errors,
                "captures": [c.data.hex() for c in self.sink.captures()]}

    def close(self) -> None:
        for part in (self.gen, self.sink):
            if part is not None:
                try:
                    part.close()
                except Exception:  # noqa: BLE001 - the anchor must go regardless
                    pass
        self.gen = self.sink = None
        subprocess.run(["ip", "link", "del", self.anchor], capture_output=True)
