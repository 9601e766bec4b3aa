"""How a search judges a trial: at the rate it was really offered, by the DUT's loss against a
goal's tolerance, and when a bracket of rates is narrow enough.

Loss is the DUT's loss (``TrialResult.dut_loss_ratio``): offered - received - what the tester's own
receive ring dropped (``tester_drops``), against the *offered* packets. Frames the tester failed to
take in are the testbed's failure, not the DUT's: they stay in the trial and its notes but never
set a bound (on a 2-core VM the sink's ring overflows whenever its core stalls). Every trial is
judged at the rate really offered (never above the intended one); a generator that could not offer
the intended rate is ``perfkit.search.limits``'s subject.

Speed normalization (``Generator.speed_reference_ns``, off by default): a host that shares the
vCPUs' physical cores runs them slower at times, and a CPU-bound DUT's capacity moves with that
speed, so its NDR on a VM depends on the moments its trials ran in. A speed-normalized trial
carries the reference speed and is judged at ``offered x speed_factor`` (its DUT cores' time per
step of the stall probe's speed probe / the reference's): the rate at which a DUT on CPUs of the
reference speed is loaded as this one was. With a reference for the DUT's kernel path too
(``Generator.kernel_reference_ns``; ``"auto"`` measures both on a saturated DUT), a busy trial's
program cost is scaled by the speed and its kernel path (veth, redirect: the testbed's part, whose
cost moves by itself) is taken at the reference cost (``TrialResult.speed_factor``). Every bound
is then a rate at the reference, and the result's notes say so. It suits DUTs whose cost scales
with the CPU's speed (compare ``bpf_ns_per_packet`` with ``dut_speed_ns_per_step`` across trials);
the generator's ceiling is still compared at the offered rate.
"""
from __future__ import annotations

from perfkit.trial import TrialResult

#: Relative tolerance used when comparing rates computed along different paths.
RATE_EPS = 1e-9


def offered_rate(trial: TrialResult) -> float:
    """The rate [pps] a trial is judged at (``TrialResult.judged_pps``): at the reference CPU speed
    when the trial is speed-normalized."""
    return trial.judged_pps


def is_good(trial: TrialResult, loss_tolerance: float) -> bool:
    """Whether the trial's DUT loss ratio (against offered packets) is within ``loss_tolerance``."""
    return trial.dut_loss_ratio <= loss_tolerance


def narrow(lower: float, upper: float, relative_width: float, resolution: float | None = None) -> bool:
    """Whether ``[lower, upper]`` is within ``resolution`` [pps], or else ``relative_width`` of upper."""
    if resolution is not None:
        return upper - lower <= resolution * (1 + RATE_EPS)
    return upper - lower <= relative_width * upper * (1 + RATE_EPS)

