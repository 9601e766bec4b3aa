"""perfkit's XDP traffic generator: ``bpf/gen.bpf.c`` run with BPF_PROG_TEST_RUN in live-frames mode.

Each call ``Program.run_live(frame, n)`` makes the kernel run the generator program ``n`` times on
frames from a page pool; a run that sends restores the headers from the template, applies the field
engine and the signature and redirects the frame out of the tester port (flushed in batches of
``batch_size``). One thread per tester core makes these calls, pinned to its core and inside the
tester's network namespace. The program is compiled for the profile (``compile_generator``): its
template and field engine become constants in the code.

Pacing happens inside the program, like a DPDK generator busy-polling its clock: each run reads
the clock and sends only when the next frame is due (else it returns XDP_DROP and the kernel
recycles the frame), so frames leave evenly spaced whatever Python does between calls. A thread
that lost its core (this VM's host takes a vCPU away for milliseconds now and then) sends at most
``GEN_MAX_BURST`` overdue frames back to back and shifts the rest of its schedule, so a stall never
becomes a burst the DUT is blamed for. A paced trial sends its rate x duration frames (the
program's quota) and so ends a little late after a stall; what is not sent by ``LATE_STOP`` past
the duration is intended but not offered (the generator could not keep up). Counts are exact.

Keeping the generator program attached (natively) to an otherwise unused veth pins it in the
kernel's XDP dispatcher: otherwise every test run with repeat > 1 adds and removes it there, and
each of those changes waits for an RCU grace period (~100 ms per call, measured here).
"""
from __future__ import annotations

import _thread
import ctypes
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from perfkit import stop
from perfkit.dataplane import Traffic
from perfkit.errors import ConfigError, PerfkitError
from perfkit.layouts import (GEN_MAX_CSUMS, GEN_MAX_STREAMS, GEN_MAX_VARS, GEN_MAX_WRITES, GEN_MIX_MAX_STREAMS,
                             GEN_TEMPLATE_MAX, GenOp, gen_config, gen_state)
from perfkit.libbpf import XdpMd, num_possible_cpus, xdp_attach
from perfkit.stl.fieldengine import FieldEngine, FlowSlice, slice_engine
from perfkit.stl.signature import SIGNATURE
from perfkit.testbed import netns
from perfkit.testbed.bpfbuild import load_generator, object_path, specialised
from perfkit.testbed.stlgen import Compiled, Stream
from perfkit.testbed.topology import Port, anchor_peer
from perfkit.units import FCS_LEN

#: Frames per call when sending as fast as possible.
MAX_CHUNK = 65536
#: Runs per call when pacing (idle runs spin for ~40 ns each): calls of ~10 ms. Between calls
#: the program does not run (the kernel sets up a new page pool), so calls are long; the program
#: stops sending at the trial's end by itself, so a call may run past it.
PACED_RUNS = 1 << 18
#: A paced trial may run this fraction of its duration (plus 20 ms) late to send all its frames.
LATE_STOP = 0.1
#: Frames per kernel batch (one flush to the port per batch) unless set: paced, frames leave
#: within ~3 us of their timestamp; unpaced, the kernel's maximum, whose page pool (as big as a
#: batch) then recycles the frames the DUT returns instead of allocating new pages (+10-20 %
#: measured at 64 bytes).
PACED_BATCH, UNPACED_BATCH = 64, 256
#: Nice value of generator threads while they send.
GEN_NICE = -20
#: Seconds between looks at the flags ``send`` and its threads share (see ``Sending``) while the
#: threads get ready, and while they send: ``send``'s own thread may run on a DUT core, and 2000
#: wake-ups a second would take its time (a timer tick costs ~20 µs on a KVM guest: bench/probe_cost.py).
POLL_S, SENDING_POLL_S = 0.0005, 0.01
#: 16.16 fixed point, as gen_state.interval.
FP_ONE = 1 << 16
_OPS = {"inc": GenOp.GEN_OP_INC, "dec": GenOp.GEN_OP_DEC, "random": GenOp.GEN_OP_RANDOM}


def build_config(frame: bytes, engine: FieldEngine | None) -> gen_config:
    """The generator's configuration for a template frame and field engine (compiled in)."""
    cfg = gen_config(frame_len=len(frame))
    cfg.restore_len = min(GEN_TEMPLATE_MAX, len(frame)) // 8 * 8
    head = frame[:GEN_TEMPLATE_MAX].ljust(GEN_TEMPLATE_MAX, b"\0")
    ctypes.memmove(cfg.tmpl, head, GEN_TEMPLATE_MAX)
    if engine is None:
        return cfg
    if len(engine.vars) > GEN_MAX_VARS or len(engine.writes) > GEN_MAX_WRITES or len(engine.csum_offsets) > GEN_MAX_CSUMS:
        raise ConfigError("field engine", f"{len(engine.vars)} vars, {len(engine.writes)} writes",
                          f"<= {GEN_MAX_VARS} vars, {GEN_MAX_WRITES} writes, {GEN_MAX_CSUMS} checksums")
    for off in engine.csum_offsets:
        if off % 2 or off + 2 > cfg.restore_len:
            raise ConfigError("checksum offset", off, f"even, within the first {cfg.restore_len} bytes")
    if engine.sig_offset + SIGNATURE.size > min(GEN_TEMPLATE_MAX, len(frame)):
        raise ConfigError("signature offset", engine.sig_offset, f"<= {min(GEN_TEMPLATE_MAX, len(frame)) - SIGNATURE.size}")
    cfg.sig_off, cfg.sig_csum_mask = engine.sig_offset, engine.sig_csum_mask
    cfg.sig_csum_old = _neg_words(head, engine.sig_offset, SIGNATURE.size)
    cfg.nvars, cfg.nwrites = len(engine.vars), len(engine.writes)
    for i, off in enumerate(engine.csum_offsets):
        cfg.csum_off[i] = off
    for i, v in enumerate(engine.vars):
        cfg.vars[i].min, cfg.vars[i].max, cfg.vars[i].step, cfg.vars[i].op = v.min, v.max, v.step, _OPS[v.op]
    for i, w in enumerate(engine.writes):
        if w.size not in (2, 4) or w.offset % 2 or w.offset + 4 > min(GEN_TEMPLATE_MAX, len(frame)):
            raise ConfigError(f"write {w.name}", f"{w.size} bytes at {w.offset}",
                              "2 or 4 bytes at an even offset inside the template")
        cw = cfg.writes[i]
        cw.offset, cw.size, cw.var, cw.add, cw.csum_mask = w.offset, w.size, w.var, w.add & 0xFFFFFFFF, w.csum_mask
        cw.csum_old = _neg_words(head, w.offset, w.size)
    return cfg


def compile_generator(profile: Traffic, flow_op: str = "inc", flow_slice: FlowSlice = FlowSlice()) -> Path:
    """The generator object for ``profile``'s first packet and field engine, restricted to the slice
    ``flow_slice`` of its flows (compiled once, cached)."""
    engine, _ = slice_engine(profile.field_engine(flow_op), flow_slice)
    return specialised("gen", "GEN_CONFIG", build_config(profile.packet(0), engine))


def compile_mix(mix: tuple[tuple[Traffic, int], ...], flow_op: str = "inc",
                flow_slice: FlowSlice = FlowSlice()) -> Compiled:
    """A frame mix (``Scenario.traffics``: a traffic profile per frame size, with its weight) as the
    generator's weighted streams (``bpf/gen.bpf.c``'s ``GEN_MIX``): each size's first packet and field
    engine, as ``compile_generator`` builds them, sent ``weight`` frames of every ``sum(weights)``,
    interleaved (smooth weighted round robin). The kernel's frame is the longest; the program trims it
    to each stream's length, so the shorter frames must equal the longest past the bytes it restores."""
    if not 1 <= len(mix) <= GEN_MIX_MAX_STREAMS:
        raise ConfigError("frame mix sizes", len(mix), f"1 .. {GEN_MIX_MAX_STREAMS}")
    streams = []
    for traffic, _ in mix:
        engine, _ = slice_engine(traffic.field_engine(flow_op), flow_slice)
        frame = traffic.packet(0)
        streams.append(Stream(build_config(frame, engine), frame, engine.sig_offset))
    longest = max((s.frame for s in streams), key=len)
    for st in streams:
        keep = st.config.restore_len
        if st.frame[keep:] != longest[keep:len(st.frame)]:
            raise ConfigError(f"{len(st.frame) + FCS_LEN}-byte frame of the mix", f"bytes {keep}.. differ from the "
                              f"{len(longest) + FCS_LEN}-byte frame's", "frames that differ only in the bytes the "
                              "generator restores per frame (their headers)")
    return Compiled(tuple(streams), tuple(w for _, w in mix))


def _neg_words(head: bytes, offset: int, size: int) -> int:
    """Sum of ~w over the 16-bit words at [offset, offset + size), loaded as the CPU loads them."""
    words = struct.unpack_from(f"={size // 2}H", head, offset)
    return sum(~w & 0xFFFF for w in words)


def stream_plan(cores: list[int], cpu: int, flows: int) -> tuple[int, int]:
    """(first stream id, flow mask) of the thread on ``cpu``: each thread gets the same power of
    two of streams, at most as many as there are flows, so sequence numbers are per flow when the
    flows fit (up to GEN_MAX_STREAMS / threads)."""
    if cpu not in cores:
        return 0xFFFF, 0
    per_thread = GEN_MAX_STREAMS // len(cores)
    slots = 1
    while slots * 2 <= min(per_thread, flows):
        slots *= 2
    return cores.index(cpu) * slots, slots - 1


@dataclass
class SendReport:
    """What the sending threads did."""

    intended: int
    """Packets the trial asked for (rate x duration, or the packet count)."""
    requested: int
    """Runs the threads asked the kernel for (the generator program counts what it sent)."""
    start: float
    """Unix time [s] the first call started."""
    elapsed: float
    """Sending time [s]: paced, the program's first to last frame plus one gap; else the calls' span."""


class Sending:
    """What one ``send`` and its threads share: plain flags, no locks.

    Python runs signal handlers (Ctrl-C, SIGTERM) in the main thread between any two calls, also
    inside ``threading``'s own Python code: an interrupt there can leave a Condition's lock held
    (``Barrier``, ``Event``, ``Thread.start``) or, in CPython 3.11's ``Thread.join``, mark a live
    thread as ended (gh-90882). So ``send`` takes no lock and joins nothing: its threads are started
    with ``_thread``, and each step is a store or a sleep, done or not begun. A thread sets
    ``sending`` before it reads ``stopped``; ``stop`` sets ``stopped`` before it reads ``sending``
    (the GIL orders them): the thread either sees the stop and does not send, or ``stop`` sees it
    send and waits until it has ``ended``.
    """

    def __init__(self, n: int):
        self.ready = [False] * n
        """Per thread: set up (CPU, priority, namespace), waiting for ``go``."""
        self.go = False
        self.stopped = False
        self.sending = [False] * n
        self.ended = [False] * n
        self.results: list[tuple[int, float, float] | None] = [None] * n
        """Per thread: (runs asked of the program, first and last call [s, monotonic])."""
        self.errors: list[BaseException] = []

    @staticmethod
    def wait(done: Callable[[], bool], every: float = POLL_S, stoppable: bool = True) -> None:
        """Sleep ``every`` s until ``done()``; ``stoppable``: raise a pending stop (``perfkit.stop``)."""
        while not done():
            if stoppable:
                stop.check()
            time.sleep(every)

    def may_send(self, idx: int) -> bool:
        """Thread ``idx``, set up: wait for ``go``; then, may it send? Not once ``stop`` has begun."""
        self.ready[idx] = True
        self.wait(lambda: self.go or self.stopped or bool(stop.requested()), stoppable=False)
        self.sending[idx] = True
        return not (self.stopped or stop.requested())

    def fail(self, err: BaseException) -> None:
        """A thread's error: the others do not send, and ``send`` raises it."""
        self.errors.append(err)
        self.stopped = True

    def stop(self) -> None:
        """Stop the threads; return once none of them runs the program (each stops within one chunk),
        since the caller closes it next. A thread not yet sending never will. A second interrupt
        whose handler raises again can still cut the wait short (perfkit's own raise only once)."""
        self.stopped = True
        while True:
            try:
                self.wait(lambda: not any(s and not e for s, e in zip(self.sending, self.ended)), SENDING_POLL_S,
                          stoppable=False)
                return
            except (KeyboardInterrupt, SystemExit):
                continue


class LiveGenerator:
    """The generator program for one traffic profile, sending from ``tx`` on ``cores``."""

    def __init__(self, profile: Traffic, tx: Port, anchor: Port, cores: list[int], batch_size: int | None = None,
                 flow_op: str = "inc", trivial: bool = False, stl: Compiled | None = None,
                 flow_slice: FlowSlice = FlowSlice(), mix: tuple[tuple[Traffic, int], ...] = ()):
        """``stl``: send a TRex STL stream (``perfkit.testbed.stlgen``) instead of ``profile``'s frames;
        ``flow_slice``: send only that slice of its flows (one of several generator hosts'); ``mix``: a
        frame mix (``Scenario.traffics``) sent instead of ``profile``'s frames (``compile_mix``)."""
        if not cores:
            raise ConfigError("tester_cores", cores, "at least one CPU")
        if batch_size is not None and not 1 <= batch_size <= UNPACED_BATCH:
            raise ConfigError("batch_size", batch_size, f"1 .. {UNPACED_BATCH}, or None (automatic)")
        self.mixed = compile_mix(mix, flow_op, flow_slice) if len(mix) > 1 and not stl else None
        if self.mixed and trivial:
            raise ConfigError("trivial_generator", trivial, "off with a frame mix (the trivial generator sends one frame)")
        self.profile, self.tx, self.cores, self.batch_size = profile, tx, list(cores), batch_size
        self.stl = stl
        #: Frames the last ``_arm`` planned over a TRex profile's streams (start delays, bursts); None: not so.
        self.planned: int | None = None
        self.frame = stl.frame if stl else self.mixed.frame if self.mixed else profile.packet(0)
        # a TRex profile: one sequence space (signature stream) per stream of the profile
        self.flows = 1 << (len(stl.streams) - 1).bit_length() if stl else profile.flows
        self.tx_ifindex = tx.ifindex
        self.anchor_ifindexes = (anchor.ifindex, netns.ifindex(anchor.ns, anchor_peer(anchor)))
        name = "gen_trivial" if trivial else "gen"
        if trivial:
            path = object_path("gen_trivial")
        else:
            weighted = stl or self.mixed
            path = specialised("gen", "GEN_CONFIG", weighted.config, weighted.extra()) if weighted else \
                compile_generator(profile, flow_op, flow_slice)
        # each variable's first position in the slice (unused by a TRex profile's engine)
        self.var_starts = slice_engine(profile.field_engine(flow_op), flow_slice)[1] if not (stl or trivial) else ()
        self.obj = load_generator(path, self.tx_ifindex)
        self.program = self.obj.program(f"xdp_{name}")
        with netns.inside(anchor.ns):
            xdp_attach(anchor.ifindex, self.program.fd)
        self.trivial = trivial

    # -- per-thread state ------------------------------------------------------------------------
    def reset(self) -> None:
        """Zero counters and sequence numbers (``send`` arms the threads itself)."""
        self._arm(None, 0.0, None)

    def _arm(self, rate_pps: float | None, duration: float, packets: int | None) -> list[int]:
        """Per thread: streams, pacing interval, time limit and quota; returns the quotas."""
        n = len(self.cores)
        stop_after = 0
        # a TRex profile with start delays or bursts: each stream's own count (Compiled.plan)
        plan = self.stl.plan(rate_pps, duration, packets) if self.stl and self.stl.timed else None
        if plan is not None and not rate_pps and packets is None:
            stop_after = int(duration * 1e9)  # as fast as possible for the duration: the clock ends it
        if rate_pps and packets is None:  # the duration's frames, with time to catch up after stalls
            packets, stop_after = round(rate_pps * duration), int((duration * (1 + LATE_STOP) + 0.02) * 1e9)
        if plan is not None:
            packets = sum(plan) if None not in plan else packets  # type: ignore[arg-type]
        quotas = [packets // n + (i < packets % n) for i in range(n)] if packets is not None else [0] * n
        if plan is not None and None not in plan:  # each thread: the sum of its shares of the streams
            quotas = [sum(each // n + (k < each % n) for each in plan) for k in range(n)]  # type: ignore[operator]
        self.planned = sum(quotas) if plan is not None and packets is not None else None
        if self.trivial:
            return quotas
        interval = round(1e9 * n / rate_pps * FP_ONE) if rate_pps else 0
        vals, starts = b"", (ctypes.c_uint32 * GEN_MAX_VARS)(*self.var_starts)
        for cpu in range(num_possible_cpus()):
            base, mask = stream_plan(self.cores, cpu, self.flows)
            mine = cpu in self.cores
            state = gen_state(stream_base=base, stream_mask=mask, var_pos=starts,
                              rng=int.from_bytes(os.urandom(8), "little") | 1,
                              interval=interval if mine else 0, stop_after=stop_after if mine else 0,
                              quota=quotas[self.cores.index(cpu)] if mine else 0, mix_clock=1)
            for i, each in enumerate(plan or ()):  # this thread's share of each stream, + 1 (0: no limit)
                k = self.cores.index(cpu) if mine else 0
                state.mix_limit[i] = each // n + (k < each % n) + 1 if each is not None else 0
            vals += bytes(state)
        self.obj.map("gen_state").update(struct.pack("=I", 0), vals)
        return quotas

    def _states(self) -> list[gen_state]:
        m = self.obj.map("gen_state")
        return [gen_state.from_bytes(v) for v in m.percpu_values(m.lookup(struct.pack("=I", 0)))]

    def counters(self) -> tuple[int, int]:
        """(frames, bytes) the generator program has produced since ``reset`` (FCS included)."""
        if self.trivial:
            return 0, 0
        states = self._states()
        return sum(s.tx_packets for s in states), sum(s.tx_bytes for s in states)

    # -- sending ---------------------------------------------------------------------------------
    def send(self, rate_pps: float | None, duration: float, packets: int | None = None) -> SendReport:
        """Send at ``rate_pps`` (None: as fast as possible) for ``duration`` s, or exactly ``packets``."""
        if self.trivial and rate_pps:
            raise ConfigError("rate", rate_pps, "none: the trivial generator only sends as fast as it can")
        quotas = self._arm(rate_pps, duration, packets)
        n = len(self.cores)
        run = Sending(n)
        # start delays and gaps leave runs idle: their threads count what the program sent, as paced ones
        timed = bool(self.stl and self.stl.timed)
        limited = packets is not None or rate_pps or self.planned is not None
        try:
            for i, c in enumerate(self.cores):
                _thread.start_new_thread(self._worker, (c, bool(rate_pps) or timed, duration,
                                                        quotas[i] if limited else None, run, i))
            run.wait(lambda: all(r or e for r, e in zip(run.ready, run.ended)))
            start_wall = time.time()
            run.go = True
            run.wait(lambda: all(run.ended), SENDING_POLL_S)
        except BaseException:  # Ctrl-C or SIGTERM, at any point: no thread may go on sending
            run.stop()
            raise
        if stop.requested():  # the threads stopped for it (the stop was dropped on its way here):
            raise KeyboardInterrupt   # what they sent is no trial
        if run.errors:
            raise run.errors[0]
        done = [r for r in run.results if r]
        elapsed = max(r[2] for r in done) - min(r[1] for r in done)
        if rate_pps and not self.trivial:
            # the program's own clock: first frame to last frame, plus one inter-frame gap
            mine = [s for s in self._states() if s.start_ns and s.tx_packets]
            if mine:
                elapsed = (max(s.last_ns for s in mine) - min(s.start_ns for s in mine)) / 1e9 + n / rate_pps
        intended = self.planned if self.planned is not None else \
            packets if packets is not None else round((rate_pps or 0) * duration)
        return SendReport(intended=intended, requested=sum(r[0] for r in done), start=start_wall, elapsed=elapsed)

    def _worker(self, cpu: int, paced: bool, duration: float, quota: int | None, run: Sending, idx: int) -> None:
        try:
            os.sched_setaffinity(0, {cpu})
            # like a DPDK generator on an isolated core: the highest normal priority, so other
            # processes hardly get the core; the sink's NAPI threads (SCHED_FIFO) still preempt it.
            # Not SCHED_FIFO itself: RT throttling would then stop it for 50 ms of every second.
            tid = threading.get_native_id()
            old_nice = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, GEN_NICE)
            with netns.inside(self.tx.ns):
                # the frames "arrive" on one anchor port or its peer, alternately: calls told apart
                ctxs = [XdpMd(0, len(self.frame), 0, ifindex, 0, 0) for ifindex in self.anchor_ifindexes]
                calls = 0
                batch = self.batch_size or (PACED_BATCH if paced else UNPACED_BATCH)
                if not run.may_send(idx):
                    return
                runs, t0 = 0, time.monotonic()
                # quota 0: this thread's share is none; a stop requested ends the sending here too
                while quota != 0 and not run.stopped and not stop.requested():
                    if paced:
                        k = PACED_RUNS
                        state = self._states()[cpu] if runs else None
                        if state is not None and ((quota is not None and state.tx_packets >= quota) or (
                                state.stop_after and state.start_ns and
                                time.monotonic_ns() - state.start_ns >= state.stop_after)):
                            break
                    else:
                        k = MAX_CHUNK if quota is None else min(MAX_CHUNK, quota - runs)
                        if k <= 0 or (quota is None and time.monotonic() - t0 >= duration):
                            break
                    calls += 1
                    self.program.run_live(self.frame, k, ctxs[calls % 2], batch)
                    runs += k
                run.results[idx] = (runs, t0, time.monotonic())
            os.setpriority(os.PRIO_PROCESS, tid, old_nice)
        except BaseException as err:  # noqa: BLE001 - surfaced by send()
            run.fail(err if isinstance(err, PerfkitError) else PerfkitError(f"generator thread on cpu {cpu}: {err}"))
        finally:
            run.ended[idx] = True

    @property
    def wire_frame_size(self) -> int:
        """Bytes per frame sent, FCS included; of a frame mix, the mean over the mix, rounded."""
        if self.mixed:
            w = self.mixed.weights
            return round(sum((len(s.frame) + FCS_LEN) * k for s, k in zip(self.mixed.streams, w)) / sum(w))
        return len(self.frame) + FCS_LEN

    def close(self) -> None:
        self.obj.close()
