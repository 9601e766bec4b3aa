"""Stalled and disturbed trials: the rules that judge a trial by the host stalls it met.

The stalls are measured by the stall probe (``perfkit.host.stallprobe``), which gives a trial its
``stalls`` evidence; these rules read only that evidence and the trial's counters.

Each DUT core serves one receive queue (``Queue``: the frames it holds and its share of the offered
rate): a veth port's 256-frame ring on the core of its NAPI thread, a cpumap queue (one per core,
each an even share of the rate), or the NIC-sized queue of ``perfkit.testbed.dut``. It lasts
``frames / (offered rate x share)``: a stall of its core at least that long may overflow it.

``stalled(trial, queues)``: a DUT core stalled (its longest tick gap or wait) at least as long as
its queue lasts. This says nothing of the trial's loss, and must not: searches re-run a stalled
trial *whatever it lost* (``perfkit.search.trials``). Re-running only the lossy ones kept a trial
that lost nothing through a stall and re-ran one that lost frames through the same stall, which
gives a DUT losing frames of its own extra chances whenever a stall does not overflow the queue
(the whole VM, the generator too, was away; a stall of a core that carried no traffic; a stall
read long by the probe's half period): the search judged the DUT's loss by the trials the host
spared. A stall of the DUT's queue core is as likely in a trial the DUT would have passed as in
one it would have failed, so the trials left to judge are a fair sample.

``disturbance(trial, queues)`` decides whether a stalled trial's DUT loss is explained by the
stalls (its figure is then labelled ``host stalls``, a lower bound, not the DUT's). The DUT's loss
is what was lost minus what the tester's own receive ring dropped (``tester_drops``): those frames
the DUT did forward, and searches never count them against it (``TrialResult.dut_loss_ratio``).
It is explained when all of these hold:

1. every frame the DUT lost is an overflow of its receive queue (``rx_ring_full`` in
   ``dut_drops``), give or take ``trial.IN_FLIGHT`` frames -- what can still be in flight when the
   trial is read, not the queue's size: a DUT that drops by its program (an unknown session, a
   malformed frame) keeps its loss, and so does one that loses frames no counter explains;
2. a core whose queue overflowed (``TrialResult.ring_cores``; every DUT core when the overflowing
   queue cannot be told) stalled at least as long as its queue lasts at the trial's rate;
3. the stalls can account for the overflow: it is at most ``STALL_SLACK`` x the frames that arrive
   at those queues during those cores' stalls and waits (rate x share x summed stall time).

The DUT and the tester sharing a core (``shared_cores``) makes waits part of the set-up, not a
disturbance: such trials are never stalled nor disturbed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from perfkit.trial import RING_DROP, TrialResult

#: Ring drops the summed stall time may explain, relative to rate x stall time (a generator that
#: catches up after its own stall sends faster than the average rate for a moment).
STALL_SLACK = 1.5


@dataclass(frozen=True)
class Queue:
    """The receive queue a DUT core's packet threads serve (see the module doc)."""

    frames: int
    """What it holds [frames]."""
    share: float = 1.0
    """Its share of the offered rate [0..1]: 1 when every frame passes it (the veth ring in front of
    the NAPI thread), 1 / cores for one of the cpumap's per-core queues."""


def _rate_pps(trial: TrialResult) -> float:
    seconds = trial.elapsed if trial.elapsed > 0 else trial.duration
    return trial.tx_packets / seconds if seconds > 0 else 0.0


def _core(trial: TrialResult, core: int) -> dict[str, float]:
    return trial.stalls.get(str(core), {})


def _longest_us(trial: TrialResult, core: int) -> float:
    """The longest time ``core`` could not process packets [µs]: its longest tick gap or wait."""
    s = _core(trial, core)
    return max(s.get("longest_us", 0.0), s.get("longest_wait_us", 0.0))


def _stalled_us(trial: TrialResult, core: int) -> float:
    """Time ``core`` could not process packets [µs]: the larger of its summed stalls and its summed
    packet-thread waits (a thread woken just before its CPU stalls waits through it)."""
    s = _core(trial, core)
    return max(s.get("stalled_us", 0.0), s.get("waited_us", 0.0))


def lasts_us(trial: TrialResult, queue: Queue) -> float:
    """How long ``queue`` takes to fill at the trial's offered rate [µs] (inf: nothing offered)."""
    pps = _rate_pps(trial) * queue.share
    return queue.frames / pps * 1e6 if pps > 0 else math.inf


def stalled(trial: TrialResult, queues: Mapping[int, Queue]) -> str:
    """Why host stalls may have cost the trial frames, whatever it lost (the module doc): the first
    DUT core of ``queues`` that stalled at least as long as its queue lasts, in words; or ``""``."""
    if trial.shared_cores or not trial.stalls:
        return ""
    for core, queue in sorted(queues.items()):
        longest, fill = _longest_us(trial, core), lasts_us(trial, queue)
        if longest >= fill:
            return (f"DUT core {core} stalled {longest:.0f} µs, longer than the {fill:.0f} µs its "
                    f"{queue.frames}-frame ring lasts at {_rate_pps(trial) * queue.share / 1e6:.3g} Mpps")
    return ""


def disturbance(trial: TrialResult, queues: Mapping[int, Queue]) -> str:
    """Why the DUT's loss in the trial is explained by host stalls (the rule of the module doc), or
    ``""``. ``queues``: the receive queue of each DUT core."""
    lost = trial.lost_packets - sum(trial.tester_drops.values())
    if lost <= 0 or trial.shared_cores or not trial.stalls or not trial.ring_overflow_only():
        return ""
    ring = trial.dut_drops[RING_DROP]
    overflowed = {c: q for c, q in queues.items() if c in trial.ring_cores} or dict(queues)
    why = stalled(trial, overflowed)
    arrived = sum(_rate_pps(trial) * q.share * _stalled_us(trial, c) / 1e6 for c, q in overflowed.items())
    if not why or ring > STALL_SLACK * arrived:
        return ""
    return f"{ring} DUT ring overflows; {why}"
