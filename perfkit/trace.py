"""The path of perfkit's packets through the DUT's kernel (``perfkit trace``), traced by bpftrace.

A sample of the generator's packets is matched where the DUT's kernel first sees them as an skb (GRO's
entry, ``napi_gro_receive`` — ``gro_receive_skb`` on 6.15 and later — or ``netif_receive_skb`` /
``netif_rx``): in the DUT's namespace, IPv4, UDP to the traffic's destination port, perfkit's signature
magic at the start of the UDP payload. Each matched skb is then followed, by its address, through the
kernel's receive-path tracepoints until it is merged, freed or consumed:

- ``net:napi_gro_receive_entry`` / ``_exit``: into GRO, and GRO's verdict (``GRO_MERGED``/``GRO_MERGED_FREE``:
  ``skb_gro_receive`` merged it into a packet GRO held; ``GRO_HELD``: held as a new packet others merge into;
  ``GRO_NORMAL``: passed on alone);
- ``net:netif_receive_skb``: into the stack (``__netif_receive_skb_core``), with the segments GRO merged;
- ``skb:kfree_skb`` (with the function that dropped it and why), ``skb:consume_skb``,
  ``skb:skb_copy_datagram_iovec``.

Tracepoints, not kprobes or fentry: this project's kernels may have neither (the local machine's 6.18 has
``CONFIG_KPROBES`` off and refuses fentry programs under lockdown), and pwru and ipftrace2 need one of the
two. The tracepoints are in the functions that matter for GRO. At each event the skb's ``gso_type`` and
``gso_segs`` are read (from ``skb_shinfo``, by BTF).

bpftrace runs as a child in its own process group; it exits by itself after ``packets`` packets or
``seconds`` seconds, and ``Tracer.close`` kills its group (SIGINT, then SIGKILL) on every way out, so
nothing stays attached.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from perfkit.errors import ConfigError, PerfkitError
from perfkit.layouts import SIGNATURE_MAGIC

if TYPE_CHECKING:
    from perfkit.scenario import Scenario

BPFTRACE = os.environ.get("BPFTRACE", "bpftrace")
BPFTOOL = os.environ.get("BPFTOOL", "bpftool")
TRACEFS = "/sys/kernel/tracing"
#: Bounds of ``packets`` and ``seconds`` (the CLI's are the same: ``perfkit.cli.trace``).
PACKETS_MAX, SECONDS_MAX = 10_000, 120
#: Pages of bpftrace's perf buffer per CPU (its default, 64, loses events of a few thousand packets).
PERF_PAGES = 1024
#: GRO's verdicts (enum gro_result, include/linux/netdevice.h).
GRO_RESULTS = {0: "GRO_MERGED", 1: "GRO_MERGED_FREE", 2: "GRO_HELD", 3: "GRO_NORMAL", 4: "GRO_CONSUMED"}
#: A few drop reasons of kfree_skb (enum skb_drop_reason, as in 6.18's BTF; others are shown as numbers).
DROP_REASONS = {2: "NOT_SPECIFIED", 3: "NO_SOCKET", 5: "SOCKET_FILTER", 6: "UDP_CSUM", 12: "PKT_TOO_SMALL"}
#: Verdicts meaning skb_gro_receive merged the packet into one GRO held.
MERGED = ("GRO_MERGED", "GRO_MERGED_FREE")
#: enum skb_gso_type bits (include/linux/skbuff.h, as in 6.18's BTF).
GSO_BITS = {0: "TCPV4", 1: "DODGY", 2: "TCP_ECN", 3: "TCP_FIXEDID", 4: "TCPV6", 5: "FCOE", 6: "GRE",
            7: "GRE_CSUM", 8: "IPXIP4", 9: "IPXIP6", 10: "UDP_TUNNEL", 11: "UDP_TUNNEL_CSUM", 12: "PARTIAL",
            13: "TUNNEL_REMCSUM", 14: "SCTP", 15: "ESP", 16: "UDP", 17: "UDP_L4", 18: "FRAGLIST",
            19: "TCP_ACCECN", 30: "TCP_FIXEDID", 31: "TCP_FIXEDID_INNER"}
#: Each event's kernel function (the tracepoint's home), as the path shows it.
FUNCTIONS = {"gro_entry": "napi_gro_receive", "gro_exit": "napi_gro_receive", "rx_entry": "netif_receive_skb",
             "netif_rx": "netif_rx", "stack": "__netif_receive_skb_core", "kfree_skb": "kfree_skb",
             "consume_skb": "consume_skb", "copy_datagram": "skb_copy_datagram_iovec"}

_LINE = re.compile(r"^P (\d+) (\d+) (\d+) (\w+) (\d+) (\d+) (\d+)(?: (.*))?$")


@dataclass(frozen=True)
class Step:
    """One event of a packet's path."""

    function: str
    """The kernel function the tracepoint is in."""
    event: str
    """perfkit's name of the tracepoint (``gro_entry``, ``gro_exit``, ``stack``, ``kfree_skb``, ...)."""
    dt_us: float
    """Time since the packet's previous event [µs] (0 for the first)."""
    cpu: int
    gso_type: str
    """The skb's GSO type flags (``skb_shinfo(skb)->gso_type``), ``|``-joined, ``-`` for none."""
    gso_segs: int
    """``skb_shinfo(skb)->gso_segs``: the segments the skb carries (0 or 1: one datagram)."""
    detail: str = ""
    """GRO's verdict, or the function that freed it and the drop reason."""


@dataclass
class TracedPacket:
    """One packet of the sample, by the order it was matched in."""

    id: int
    steps: list[Step] = field(default_factory=list)

    @property
    def gro_result(self) -> str | None:
        """GRO's verdict on it (``GRO_HELD``, ...), None if it did not go through napi_gro_receive."""
        return next((s.detail.split(":")[0] for s in self.steps if s.event == "gro_exit"), None)

    @property
    def merged(self) -> bool:
        """skb_gro_receive merged it into a packet GRO held (its own path ends there)."""
        return self.gro_result in MERGED

    @property
    def delivered_segs(self) -> int | None:
        """gso_segs when it went into the stack (None: it did not)."""
        return next((max(s.gso_segs, 1) for s in self.steps if s.event == "stack"), None)


@dataclass(frozen=True)
class TraceSummary:
    """What the sample shows about GRO."""

    packets: int
    """Packets traced."""
    gro_results: dict[str, int]
    """Packets by GRO's verdict (packets that did not go through napi_gro_receive are left out)."""
    merged: int
    """Packets skb_gro_receive merged into another (GRO_MERGED, GRO_MERGED_FREE)."""
    delivered: int
    """Packets that went into the stack (``__netif_receive_skb_core``)."""
    delivered_aggregated: int
    """Of those, packets carrying more than one segment (GRO heads)."""
    segments_delivered: int
    """Segments the delivered packets carried, summed."""
    max_segs: int
    """Most segments one delivered packet carried."""

    def text(self) -> list[str]:
        verdicts = ", ".join(f"{k} {v}" for k, v in sorted(self.gro_results.items())) or "none"
        return [f"summary: {self.packets} packets; GRO verdicts: {verdicts}",
                f"  merged into another by skb_gro_receive: {self.merged}",
                f"  into the stack: {self.delivered}, of which {self.delivered_aggregated} carried merged segments "
                f"({self.segments_delivered} segments in all, at most {self.max_segs} in one)",
                f"  GRO merged: {'yes' if self.gro_merged else 'no'}"]

    @property
    def gro_merged(self) -> bool:
        """GRO merged segments in this sample."""
        return self.merged > 0 or self.delivered_aggregated > 0


@dataclass
class TraceResult:
    """A trace: the trial's scenario, the sample's paths, the summary, and what stopped it."""

    scenario: str
    knobs: dict[str, str]
    packets: list[TracedPacket]
    summary: TraceSummary
    stopped_by: str
    """``packets`` (N traced), ``seconds`` (the time bound) or ``traffic`` (the trial ended first)."""
    lost_events: int
    """Events the tracer lost (its buffer full): packets of the sample may miss steps, or be missing."""
    attached: int
    """BPF programs the tracer attached (``bpftool perf``: one per tracepoint)."""
    attached_after: int
    """Of those, programs still loaded after it was stopped (0: nothing left attached)."""
    tracer: str
    """The tracer and its version."""

    def text(self) -> str:
        """Each packet's path (function, Δt, gso_type and gso_segs where they change), then the summary."""
        knobs = " ".join(f"{k}={v}" for k, v in self.knobs.items())
        lines = [f"{self.scenario}{' ' + knobs if knobs else ''}: {len(self.packets)} packets traced "
                 f"(stopped by {self.stopped_by}; {self.tracer})"]
        for p in self.packets:
            lines.append(f"packet {p.id}")
            gso = None
            for s in p.steps:
                change = f"  gso_type {s.gso_type} gso_segs {s.gso_segs}" if (s.gso_type, s.gso_segs) != gso else ""
                gso = (s.gso_type, s.gso_segs)
                detail = f"  {s.detail}" if s.detail else ""
                lines.append(f"  {s.dt_us:+10.1f} us  cpu{s.cpu}  {s.function}{detail}{change}")
        lines += self.summary.text()
        if self.lost_events:
            lines.append(f"the tracer lost {self.lost_events} events (its buffer was full): paths may miss steps")
        lines.append(f"the tracer attached {self.attached} BPF programs; still loaded after it: {self.attached_after}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["summary"]["gro_merged"] = self.summary.gro_merged
        for p, q in zip(d["packets"], self.packets):
            p["gro_result"], p["merged"], p["delivered_segs"] = q.gro_result, q.merged, q.delivered_segs
        return d


def gso_names(bits: int) -> str:
    """``SKB_GSO_*`` flags of ``bits`` by name (``UDP_L4|FRAGLIST``), ``-`` for none."""
    names = [GSO_BITS.get(b, f"bit{b}") for b in range(32) if bits >> b & 1]
    return "|".join(names) or "-"


def script(netns_inode: int, dport: int, packets: int, seconds: int) -> str:
    """The bpftrace program: match in namespace ``netns_inode`` up to ``packets`` packets, follow them, exit
    after ``seconds``. Each event is one line ``P id ns cpu event gso_type gso_segs len [detail]``."""
    head = """
    $skb = (struct sk_buff *)args->skbaddr;
    $sh = (struct skb_shared_info *)($skb->head + $skb->end);
    $id = @id[(uint64)$skb];"""
    emit = 'printf("P %d %llu %d {ev} %u %u %u{fmt}\\n", $id, nsecs, cpu, $sh->gso_type, $sh->gso_segs, $skb->len{arg});'

    def entry(tp: str, ev: str, gro: bool = False) -> str:
        exit_of = ("\n    if ($id) { @cur[tid] = (uint64)$skb; @curid[tid] = $id; @curgso[tid] = $sh->gso_type;"
                   " @cursegs[tid] = $sh->gso_segs; @curlen[tid] = $skb->len; }") if gro else ""
        return f"""tracepoint:net:{tp} {{{head}
    if ($id) {{ delete(@id[(uint64)$skb]); $id = 0; }}
    if ($skb->dev->nd_net.net->ns.inum == {netns_inode} && @n < {packets}) {{
        $eth = $skb->head + $skb->mac_header;
        $ip = $eth + 14;
        $udp = $ip + (*(uint8 *)$ip & 15) * 4;
        if (*(uint16 *)($eth + 12) == 0x0008 && *(uint8 *)($ip + 9) == 17 &&
            *(uint16 *)($udp + 2) == {socket_order(dport)} && *(uint16 *)($udp + 8) == {SIGNATURE_MAGIC}) {{
            @n++; $id = @n; @id[(uint64)$skb] = $id;
            {emit.format(ev=ev, fmt="", arg="")}
            if (@n >= {packets}) {{ @done = 1; }}
        }}
    }}{exit_of}
}}
"""

    def follow(tp: str, ev: str, fmt: str = "", arg: str = "", end: bool = False) -> str:
        drop = " delete(@id[(uint64)$skb]);" if end else ""
        return f"""tracepoint:{tp} {{{head}
    if ($id) {{ {emit.format(ev=ev, fmt=fmt, arg=arg)}{drop} }}
}}
"""

    return "\n".join([
        'BEGIN { printf("READY\\n"); }',
        entry("napi_gro_receive_entry", "gro_entry", gro=True), entry("netif_receive_skb_entry", "rx_entry"),
        entry("netif_rx_entry", "netif_rx"),
        # The skb may be gone by GRO's exit (a batch flushed into the stack inside the call frees it):
        # the exit prints what the entry saw, and the id the entry kept.
        """tracepoint:net:napi_gro_receive_exit {
    $id = @curid[tid];
    if ($id) {
        printf("P %d %llu %d gro_exit %u %u %u %d\\n", $id, nsecs, cpu, @curgso[tid], @cursegs[tid], @curlen[tid],
               args->ret);
        if (args->ret <= 1) { delete(@id[@cur[tid]]); }
        delete(@cur[tid]); delete(@curid[tid]);
    }
}
""",
        follow("net:netif_receive_skb", "stack"),
        follow("skb:kfree_skb", "kfree_skb", " %s %d", ", ksym(args->location), args->reason", end=True),
        follow("skb:consume_skb", "consume_skb", " %s", ", ksym(args->location)", end=True),
        follow("skb:skb_copy_datagram_iovec", "copy_datagram"),
        f'interval:ms:100 {{ @t++; if (@done) {{ printf("STOP packets\\n"); exit(); }} '
        f'if (@t >= {seconds * 10}) {{ printf("STOP seconds\\n"); exit(); }} }}',
        "END { clear(@id); clear(@cur); clear(@curid); clear(@curgso); clear(@cursegs); clear(@curlen); clear(@n); "
        "clear(@t); clear(@done); }",
    ])


def socket_order(port: int) -> int:
    """A UDP port as a little-endian u16 load of its network-order bytes reads it."""
    return ((port & 0xFF) << 8) | (port >> 8)


def parse(lines: list[str]) -> list[TracedPacket]:
    """The packets of the tracer's output lines, each with its path (events in time order)."""
    raw: dict[int, list[tuple[int, int, str, int, int, str]]] = {}
    for line in lines:
        m = _LINE.match(line.strip())
        if not m or m.group(1) == "0":
            continue
        pid, ns, cpu, ev, gso, segs, _len = int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4), \
            int(m.group(5)), int(m.group(6)), m.group(7)
        raw.setdefault(pid, []).append((ns, cpu, ev, gso, segs, m.group(8) or ""))
    out = []
    for pid in sorted(raw):
        events = sorted(raw[pid], key=lambda e: e[0])
        pkt, prev = TracedPacket(pid), events[0][0]
        for ns, cpu, ev, gso, segs, detail in events:
            pkt.steps.append(Step(FUNCTIONS.get(ev, ev), ev, (ns - prev) / 1e3, cpu, gso_names(gso), segs,
                                  _detail(ev, detail)))
            prev = ns
        out.append(pkt)
    return out


def _detail(event: str, detail: str) -> str:
    if event == "gro_exit":
        verdict = GRO_RESULTS.get(int(detail), detail) if detail.lstrip("-").isdigit() else detail
        return f"{verdict}: skb_gro_receive merged it into a held packet" if verdict in MERGED else verdict
    if event == "kfree_skb" and detail:
        where, _, reason = detail.rpartition(" ")
        name = DROP_REASONS.get(int(reason), reason) if reason.isdigit() else reason
        return f"from {where}, drop reason {name}"
    if event == "consume_skb" and detail:
        return f"from {detail}"
    return detail


def summarize(packets: list[TracedPacket]) -> TraceSummary:
    results: dict[str, int] = {}
    for p in packets:
        if p.gro_result:
            results[p.gro_result] = results.get(p.gro_result, 0) + 1
    segs = [p.delivered_segs for p in packets if p.delivered_segs is not None]
    return TraceSummary(packets=len(packets), gro_results=results, merged=sum(p.merged for p in packets),
                        delivered=len(segs), delivered_aggregated=sum(s > 1 for s in segs),
                        segments_delivered=sum(segs), max_segs=max(segs, default=0))


# -- the tracer process ------------------------------------------------------------------------------------
class Tracer:
    """bpftrace running ``script`` in its own process group; ``close`` stops it, always."""

    def __init__(self, program: str, ready_timeout: float = 30.0):
        check_tracer()
        self.lines: list[str] = []
        self.attached = False
        self.stopped_by = "traffic"
        self.lost = 0
        self.version = subprocess.run([BPFTRACE, "--version"], capture_output=True, text=True).stdout.strip()
        env = {**os.environ, "BPFTRACE_PERF_RB_PAGES": str(PERF_PAGES)}
        self._err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([BPFTRACE, "-B", "line", "-e", program], stdout=subprocess.PIPE,
                                     stderr=self._err, text=True, start_new_session=True, env=env)
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.programs: set[int] = set()
        try:
            self._ready.wait(ready_timeout)
            if not self.attached or self.proc.poll() is not None:
                raise PerfkitError(f"bpftrace did not attach: {self._stderr()}")
            self.programs = attached_by(self.proc.pid)
        except BaseException:
            self.close()
            raise

    def _read(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            if line.startswith("READY"):
                self.attached = True
                self._ready.set()
            elif line.startswith("STOP "):
                self.stopped_by = line.split()[1]
            elif line.startswith("P "):
                self.lines.append(line)
            elif line.startswith("Lost "):   # bpftrace's perf buffer was full: "Lost N events"
                self.lost += int(line.split()[1]) if line.split()[1].isdigit() else 0
        self._ready.set()

    def _stderr(self) -> str:
        """bpftrace's first error on stderr but its warning about RLIMIT_MEMLOCK (harmless here)."""
        self.close()
        self._err.seek(0)
        lines = [x.strip() for x in self._err.read().splitlines() if "ERROR" in x and "RLIMIT_MEMLOCK" not in x]
        return lines[0] if lines else f"exit status {self.proc.poll()}"

    def wait(self, timeout: float) -> None:
        """Until the tracer exits by itself (N packets or its time bound), at most ``timeout`` seconds."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> int:
        """Stop the tracer's process group (SIGINT, then SIGKILL); how many of its BPF programs are still loaded."""
        pid = self.proc.pid
        for sig, grace in ((signal.SIGINT, 3.0), (signal.SIGKILL, 5.0)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                continue
        self._reader.join(2.0)
        return loaded(self.programs)


def check_tracer() -> None:
    """bpftrace and tracefs are there, or a one-line refusal (before any testbed comes up)."""
    if not shutil.which(BPFTRACE):
        raise ConfigError("tracer", BPFTRACE, "bpftrace installed (make setup: apt package bpftrace)")
    if not os.path.isdir(TRACEFS + "/events"):
        raise ConfigError("tracefs", TRACEFS, f"mounted (make setup, or mount -t tracefs tracefs {TRACEFS})")


def attached_by(pid: int) -> set[int]:
    """Ids of the BPF programs process ``pid`` has attached to tracepoints (``bpftool perf``)."""
    out = subprocess.run([BPFTOOL, "perf", "show", "-j"], capture_output=True, text=True).stdout or "[]"
    return {a["prog_id"] for a in json.loads(out) if a.get("pid") == pid}


def loaded(ids: set[int]) -> int:
    """How many of the BPF programs ``ids`` are still loaded."""
    out = subprocess.run([BPFTOOL, "prog", "show", "-j"], capture_output=True, text=True).stdout or "[]"
    return len(ids & {p["id"] for p in json.loads(out)})


def netns_inode(name: str) -> int:
    return os.stat(f"/run/netns/{name}").st_ino


def trace(scenario: Scenario, packets: int = 64, seconds: int = 10, rate_pps: float | None = None,
          duration: float = 1.0) -> TraceResult:
    """Run a trial of ``scenario`` on the local testbed (the xdp generator) for ``duration`` seconds at
    ``rate_pps`` (None: as fast as it can) while tracing up to ``packets`` of its packets for at most
    ``seconds`` seconds."""
    from perfkit.generators import create

    if not 1 <= packets <= PACKETS_MAX:
        raise ConfigError("--packets", packets, f"packets to trace, 1 .. {PACKETS_MAX}")
    if not 1 <= seconds <= SECONDS_MAX:
        raise ConfigError("--seconds", seconds, f"seconds, 1 .. {SECONDS_MAX}")
    traffic = scenario.traffic()
    if not traffic.to_socket:
        raise ConfigError("traffic", scenario.key, "traffic the dataplane passes to the DUT's kernel (its "
                          "traffic's to_socket); other traffic never becomes an skb on the DUT")
    port = traffic.to_socket[1]
    check_tracer()
    with create("xdp", scenario) as gen:
        tracer = Tracer(script(netns_inode(gen.testbed.dut_ns), port, packets, seconds))
        try:
            gen.measure(rate_pps, min(duration, seconds))
            tracer.wait(0.5)   # the last packets' way to the socket; the tracer may have exited already
        finally:
            left = tracer.close()
    traced = parse(tracer.lines)[:packets]
    return TraceResult(scenario=scenario.key, knobs=dict(scenario.knobs), packets=traced, summary=summarize(traced),
                       stopped_by=tracer.stopped_by, lost_events=tracer.lost, attached=len(tracer.programs),
                       attached_after=left, tracer=tracer.version)
