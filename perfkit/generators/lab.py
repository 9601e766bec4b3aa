"""``LabGenerator``: trials in a lab of hosts (``perfkit.lab``), over SSH.

The DUT host's agent loads the dataplane on the DUT's interfaces cabled to the testers (one
instance per tester's pair of cables; with several DUT cores, each interface's queues spread over
them as RSS spreads a NIC's) and measures what each trial cost it (drops, the program's
run time, its packet threads' CPU time per packet). Each tester host's agent runs perfkit's XDP
generator and sink on its pair of interfaces; with several testers, each sends a disjoint slice of
the scenario's flows (``perfkit.stl.fieldengine.FlowSlice``) at an equal share of the rate from a
common start time, and their counts, sequence checks and latency histograms are
merged. A trial's notes say which hosts measured it and what each tester offered and received, and
which tester fell short of its share when generation limited it.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from perfkit import accounting, knobs
from perfkit.dataplane import NO_MODEL_NOTE, PortMacs
from perfkit.errors import ConfigError, PerfkitError
from perfkit.generators.base import Generator
from perfkit.generators.xdpcores import dut_queues
from perfkit.host import disturbance
from perfkit.lab import inventory as lab_inventory
from perfkit.lab.agent import LAB_DUT
from perfkit.lab.inventory import Lab, LabHost
from perfkit.lab.remote import AgentSession
from perfkit.scenario import Scenario
from perfkit.stl.fieldengine import FlowSlice, slice_engine
from perfkit.trial import TrialResult

#: Seconds between telling the testers to send and the common start (SSH round trips on the way).
START_DELAY = 0.3
#: Below this share of its rate a tester is said to have limited the trial.
SHORT = 0.95


def cabling(lab: Lab, tester: LabHost) -> tuple[list[str], list[str]]:
    """The tester's two interfaces cabled to the DUT, and the DUT's at their other ends (in the
    tester's cabling order: its first faces the DUT's ``a`` side)."""
    dut = lab.dut
    pairs = [(i.name, i.peer.split(":", 1)[1]) for i in tester.interfaces
             if i.peer and i.peer.split(":", 1)[0] == dut.name]
    if len(pairs) < 2:
        raise ConfigError(f"host {tester.name}: interfaces", [i.name for i in tester.interfaces],
                          f"two interfaces whose peer is an interface of the DUT {dut.name} (HOST:INTERFACE)")
    return [pairs[0][0], pairs[1][0]], [pairs[0][1], pairs[1][1]]


def port_macs(lab: Lab, tester: LabHost) -> PortMacs:
    """The MAC addresses of a tester's two cables to the DUT, at both ends, from the inventory."""
    (p0, p1), (a, b) = cabling(lab, tester)
    return PortMacs(a=lab.dut.interface(a).mac or "", b=lab.dut.interface(b).mac or "",
                    p0=tester.interface(p0).mac or "", p1=tester.interface(p1).mac or "")


def merged_percentiles(reports: list[dict[str, Any]], key: str) -> dict[str, float]:
    """Percentiles of the testers' summed histogram ``key`` (``latency_hist``: with exact min and max)."""
    import numpy as np
    from perfkit.testbed.sink import percentiles
    hists = [np.asarray(r[key], dtype=np.int64) for r in reports if r.get(key)]
    if not hists:
        return {}
    if key == "latency_hist":
        lows = [r["latency_min_ns"] for r in reports if r.get("latency_min_ns") is not None]
        highs = [r["latency_max_ns"] for r in reports if r.get("latency_max_ns") is not None]
        return percentiles(sum(hists), min(lows) if lows else None, max(highs) if highs else None)
    return percentiles(sum(hists))


def described(scenario: Scenario) -> dict[str, Any] | None:
    """Op ``describe``'s arguments when the scenario's dataplane is a description file (its files and
    its profile's streams, sent to each host: a lab host shares no file system with the controller and
    has no TRex library), else None."""
    from perfkit.describe import DescribedDataplane
    from perfkit.lab.descriptions import for_scenario
    dp = scenario.dp
    if not isinstance(dp, DescribedDataplane):
        return None
    return for_scenario(dp.desc, scenario.frame_size, scenario.flows, dict(scenario.params))


def plugin(scenario: Scenario) -> str | None:
    """The package (``NAME VERSION``) of the scenario's dataplane when a plugin, not perfkit, installs it."""
    from perfkit import dataplanes
    if dataplanes.is_path(scenario.dataplane):
        return None
    origin = dataplanes.origins().get(scenario.dataplane)
    if origin is None or origin.distribution in (None, "perfkit"):
        return None
    return f"{origin.distribution} {origin.version}"


def check_installed(session: AgentSession, scenario: Scenario, package: str | None) -> None:
    """Refuse a host whose environment lacks the plugin the controller's dataplane comes from (or
    has another version of it): each host loads the dataplane from its own environment."""
    if package is None:
        return
    there = (session.hello.get("dataplanes") or {}).get(scenario.dataplane, "none")
    if there != package:
        raise ConfigError(f"dataplane {scenario.dataplane} on host {session.host.name}", there or "perfkit's",
                          f"{package}, as on the controller: pip install it into {session.host.root}/venv")


def on_host(session: AgentSession, what: dict[str, Any], packed: dict[str, Any] | None) -> dict[str, Any]:
    """``what`` for the host of ``session``: a description's ``dataplane`` is its path there (op ``describe``)."""
    if packed is None:
        return what
    return {**what, "dataplane": session.call("describe", **packed)["dataplane"]}


class RemotePerf:
    """``perf record`` on the DUT host around a block, as ``perfkit.perf.record.PerfRecorder`` locally:
    the agent records and sends ``perf script``'s output, folded here with inferno."""

    def __init__(self, session: AgentSession, frequency: int):
        self.session, self.frequency = session, frequency
        self.profile: Any = None

    def __enter__(self) -> RemotePerf:
        self.session.call("perf_start", frequency=self.frequency)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            rec = self.session.call("perf_stop", timeout=120)
        except PerfkitError:
            if exc_type is None:
                raise
            return
        if exc_type is None:
            from perfkit.perf.folded import parse_folded, top_symbols
            from perfkit.perf.record import PerfProfile, fold_script
            folded = fold_script(rec.pop("script").encode())
            self.profile = PerfProfile(folded=folded, samples=sum(c for _, c in parse_folded(folded)),
                                       top=top_symbols(folded), **rec)


class LabGenerator(Generator):
    """The DUT host's and the testers' agents, prepared for one scenario."""

    name = "lab"
    sets_knobs = True
    #: XDP_DROP: traffic the dataplane drops as intended (xdp-filter denying it) counts as received
    #: at the DUT's forwarding counters, as the local testbed's ``CounterSink`` counts it.
    verdicts = frozenset({"XDP_REDIRECT", "XDP_DROP"})

    def __init__(self, scenario: Scenario, *, inventory: str | Path, testers: list[str] | None = None,
                 capture_count: int = 64):
        """``testers``: the tester hosts to use, by inventory name (default: every one)."""
        super().__init__(scenario)
        self.lab = lab_inventory.load(inventory)
        chosen = self.lab.role("tester")
        if testers is not None:
            names = [h.name for h in chosen]
            for t in testers:
                if t not in names:
                    raise ConfigError("testers", t, f"a tester host of the inventory: {', '.join(names) or 'none'}")
            chosen = tuple(h for h in chosen if h.name in testers)
        if not chosen:
            raise ConfigError("inventory group tester", [], "at least one host that runs perfkit's generator")
        dut = self.lab.dut
        if scenario.dut_cores > len(dut.dut_cores):
            raise ConfigError("dut_cores", scenario.dut_cores, f"<= {len(dut.dut_cores)}: the DUT host's dut_cores "
                              f"{list(dut.dut_cores)}")
        self.testers = chosen
        self.cabling = {t.name: cabling(self.lab, t) for t in chosen}
        self.macs = {t.name: port_macs(self.lab, t) for t in chosen}
        self.dut_cores = list(dut.dut_cores[:scenario.dut_cores])
        # each tester's frames carry the MAC addresses of its own cables
        self.traffics = {t.name: scenario.traffic().on_ports(self.macs[t.name]) for t in chosen}
        slice_engine(scenario.traffic().field_engine(), FlowSlice(0, len(chosen)))  # refused here, before any host
        self.agents: dict[str, AgentSession] = {}
        what = {"dataplane": scenario.dataplane, "frame_size": scenario.frame_size, "flows": scenario.flows,
                "params": dict(scenario.params)}
        packed, package = described(scenario), plugin(scenario)
        try:
            self.agents[dut.name] = AgentSession(dut)
            check_installed(self.agents[dut.name], scenario, package)
            self.loaded = self.agents[dut.name].call(
                "load", interfaces=[self.cabling[t.name][1] for t in chosen], cores=self.dut_cores,
                macs=[asdict(self.macs[t.name]) for t in chosen], knobs=dict(scenario.knobs),
                **on_host(self.agents[dut.name], what, packed))
            for part, t in enumerate(chosen):
                self.agents[t.name] = AgentSession(t)
                check_installed(self.agents[t.name], scenario, package)
                self.agents[t.name].call("tester", interfaces=self.cabling[t.name][0], cores=list(t.tester_cores),
                                           capture_count=capture_count, part=part, parts=len(chosen),
                                           macs=asdict(self.macs[t.name]),
                                           **on_host(self.agents[t.name], what, packed))
        except BaseException:
            self.close()
            raise

    @classmethod
    def check_knobs_and_path(cls, scenario: Scenario) -> None:
        super().check_knobs_and_path(scenario)
        knobs.system_only(scenario.knobs, LAB_DUT)

    @property
    def dut(self) -> AgentSession:
        return self.agents[self.lab.dut.name]

    def measure(self, rate_pps: float | None, duration: float, packets: int | None = None) -> TrialResult:
        if rate_pps is not None and not rate_pps > 0:
            raise ConfigError("rate", rate_pps, "a positive number of packets/s, or None (as fast as possible)")
        if not duration > 0:
            raise ConfigError("duration", duration, "a positive number of seconds")
        n = len(self.testers)
        shares = [packets // n + (i < packets % n) for i in range(n)] if packets is not None else [None] * n
        reports: dict[str, dict[str, Any]] = {}
        errors: list[BaseException] = []
        start_at = time.time() + START_DELAY

        def begin() -> None:
            try:
                self.dut.call("begin", start_at=start_at, timeout=START_DELAY + 30)
            except BaseException as err:  # noqa: BLE001 - raised below, in the caller's thread
                errors.append(err)

        def send(t: LabHost, share: int | None) -> None:
            try:
                reports[t.name] = self.agents[t.name].call(
                    "send", rate_pps=rate_pps / n if rate_pps else None, duration=duration, packets=share,
                    start_at=start_at, timeout=START_DELAY + 2 * duration + 30)
            except BaseException as err:  # noqa: BLE001 - raised below, in the caller's thread
                errors.append(err)

        threads = [threading.Thread(target=begin, daemon=True)]
        threads += [threading.Thread(target=send, args=(t, s), daemon=True) for t, s in zip(self.testers, shares)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        dut = self.dut.call("end")
        if errors:
            raise errors[0]
        return self._result(rate_pps, duration, packets, [reports[t.name] for t in self.testers], dut)

    def _result(self, rate_pps: float | None, duration: float, packets: int | None, reps: list[dict[str, Any]],
                dut: dict[str, Any]) -> TrialResult:
        tx = sum(r["tx_packets"] for r in reps)
        captures = [(self.traffics[t.name], bytes.fromhex(c)) for t, r in zip(self.testers, reps) for c in r["captures"]]
        mismatches = [why for traffic, c in captures if (why := self.scenario.dp.output_check(traffic, c))]
        ring_in = sum(r["dut_ring"] for r in reps)
        dut_drops = accounting.with_ring(dut["dut_drops"], ring_in)
        rx = sum(r["rx_packets"] for r in reps)
        rx_bytes = sum(r["rx_bytes"] for r in reps)
        if self.scenario.traffic().verdict == "XDP_DROP":   # dropped as intended: the DUT's counters
            rx = sum(dut.get("forwarded", {}).values())
            rx_bytes = rx * reps[0]["wire_frame_size"]
        seen = accounting.verdicts({**dut.get("forwarded", {}), **dut["dut_drops"]}, self.scenario.traffic().verdict,
                                   rx, dut_drops)
        elapsed = max(r["elapsed"] for r in reps)
        result = TrialResult.for_scenario(
            self.scenario, wire_frame_size=reps[0]["wire_frame_size"], dut_cores=len(self.dut_cores), generator=self.name,
            duration=duration, intended_pps=float(rate_pps or 0.0),
            intended_packets=sum(r["intended"] for r in reps) if rate_pps or packets else tx,
            tx_packets=tx, rx_packets=rx, tx_bytes=sum(r["tx_bytes"] for r in reps),
            rx_bytes=rx_bytes, elapsed=elapsed, start_time=min(r["start_time"] for r in reps),
            end_time=max(r["end_time"] for r in reps), latency_ns=merged_percentiles(reps, "latency_hist"),
            ipdv_ns=merged_percentiles(reps, "ipdv_hist"), reordered=sum(r["reordered"] for r in reps),
            duplicates=sum(r["duplicates"] for r in reps), mismatched_packets=len(mismatches), dut_drops=dut_drops,
            tester_drops=accounting.tester_drops(dut["tester_ring"]),
            bpf_ns_per_packet=dut["bpf_ns_per_packet"], dut_ns_per_packet=dut.get("dut_ns_per_packet"),
            kernel_ns_per_packet=dut.get("kernel_ns_per_packet"), dut_busy=dut.get("dut_busy"),
            dut_capacity_pps=dut.get("dut_capacity_pps"), dut_busy_per_core=dut["dut_busy_per_core"],
            dut_perf_counts=dut.get("dut_perf_counts", {}), dut_cycles_per_packet=dut.get("dut_cycles_per_packet"),
            # which core's queue overflowed cannot be told from a port's counters: every DUT core's
            dut_wakeups=dut["dut_wakeups"], ring_cores=list(self.dut_cores) if ring_in else [],
            sink_gap_us=max(r["max_gap_ns"] for r in reps) / 1e3,
            gen_slip_us=max(0.0, elapsed - duration) * 1e6 if rate_pps else None, stalls=dut.get("stalls", {}),
            dut_stall_us=dut.get("dut_stall_us"), dut_speed_ns_per_step=dut.get("dut_speed_ns_per_step"),
            dut_core_time=dut.get("dut_core_time", {}), dut_perfkit_share=dut.get("dut_perfkit_share"),
            dut_others_share=dut.get("dut_others_share"),
            hosts={"dut": [self.lab.dut.name], "tester": [t.name for t in self.testers]},
            objects={f"{self.lab.dut.name}:{k}": v for k, v in (self.loaded.get("objects") or {}).items()},
            verdicts=seen.packets, verdicts_from=seen.source,
            ceiling_hosts=self._short(rate_pps, reps))
        # the DUT host's stalls judged as the local testbed's: its veth rings, or a NIC's, on one core
        queues = dut_queues(self.dut_cores, 0)
        stall = disturbance.stalled(result, queues)
        result.stalled = bool(stall)
        result.disturbance = disturbance.disturbance(result, queues)
        result.disturbed = bool(result.disturbance)
        if stall:
            result.notes.append(f"stalled: {stall}: host stalls may have cost it frames")
        result.notes.extend(self._notes(result, reps, mismatches, len(captures)))
        return result

    def _notes(self, r: TrialResult, reps: list[dict[str, Any]], mismatches: list[str], captured: int) -> list[str]:
        modes = sorted(set(self.loaded["modes"].values()))
        notes = [f"lab {self.lab.source}: DUT {self.lab.dut.name} ({'/'.join(modes)} XDP, cores {self.dut_cores}), "
                 f"testers {', '.join(t.name for t in self.testers)}"]
        for t, rep in zip(self.testers, reps):
            notes.append(f"{t.name}: offered {rep['tx_packets']}, received {rep['rx_packets']}")
        if "generic" in modes:
            notes.append("the DUT's driver took no native XDP: the dataplane ran as generic XDP (slower)")
        notes.extend(accounting.notes(r))
        if not self.scenario.dp.has_model:
            notes.append(NO_MODEL_NOTE)
        if mismatches:
            notes.append(f"{len(mismatches)} of {captured} captured packets are not what the {self.scenario.dp.title} "
                         f"should emit; first: {mismatches[0]}")
        if r.ceiling_hosts:
            offered = {t.name: rep["tx_packets"] / rep["elapsed"] for t, rep in zip(self.testers, reps)}
            notes.append(f"generation limited the trial: {', '.join(f'{h} ({offered[h]:.0f} pps)' for h in r.ceiling_hosts)}"
                         f" offered less than its share of {r.intended_pps / len(reps):.0f} pps (its ceiling)")
        return notes

    def _short(self, rate_pps: float | None, reps: list[dict[str, Any]]) -> list[str]:
        """The testers that offered less than ``SHORT`` of their share of ``rate_pps``: at their ceiling."""
        if not rate_pps:
            return []
        share = rate_pps / len(reps)
        return [t.name for t, rep in zip(self.testers, reps)
                if rep["elapsed"] > 0 and rep["tx_packets"] / rep["elapsed"] < SHORT * share]

    def perf_recorder(self, frequency: int | None = None) -> RemotePerf:
        """``perf record`` of the DUT host's DUT cores by its agent, folded here."""
        from perfkit.perf.record import DEFAULT_FREQUENCY
        return RemotePerf(self.dut, frequency or DEFAULT_FREQUENCY)

    def close(self) -> None:
        for name, s in list(self.agents.items()):
            try:
                s.close()
            except (PerfkitError, OSError):
                s.kill()
            del self.agents[name]
