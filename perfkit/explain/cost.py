"""Cost per function in ns per packet: a function's share of the DUT's packet-thread samples in a
trial times the trial's measured ``dut_ns_per_packet``.

``dut_ns_per_packet`` is the CPU time of the DUT's packet threads (threaded NAPI, cpumap) per packet;
perf's ``cpu-clock`` samples of those same threads divide that time among functions. Idle samples
and other tasks on the DUT cores are left out on both sides. Self costs of a trial add up to its
``dut_ns_per_packet`` exactly; inclusive costs (the function and what it calls) do not add up.

Uncertainty: a share of ``k`` samples of ``n`` is binomial, sd ``sqrt(k (n - k) / n) / n`` (a function
not sampled in a trial counts as one sample's worth, ``1 / n``: it may cost that much unseen).
Over several trials (repeats), a function's cost is the mean over the trials, its uncertainty the
larger of the sampling one (the trials' sds combined) and the standard error of the repeats.

``cost_frame(profiles)`` -- tidy, one row per trial x function:
    trial_id           str    the trial
    symbol             str    the function, BPF tags zeroed (``perfkit.perf.folded.untagged``)
    kind               str    ``perfkit.explain.kinds.KINDS``
    self_samples       int    samples with the function as the leaf
    inclusive_samples  int    samples with the function anywhere on the stack (once per stack)
    packet_samples     int    the trial's samples of the DUT's packet threads
    dut_ns_per_packet  float  the trial's measured cost [ns]
    self_share, inclusive_share   float  of ``packet_samples`` [0..1]
    self_ns, inclusive_ns         float  share x ``dut_ns_per_packet`` [ns per packet]
    self_ns_sd, inclusive_ns_sd   float  their sampling standard deviation [ns per packet]

``function_costs(profiles)`` -- one row per function over the trials of a set:
    symbol, kind; trials (how many); self_samples, inclusive_samples (summed over trials);
    self_ns, inclusive_ns (mean over the trials) [ns per packet]; self_ns_sd, inclusive_ns_sd
    (the larger of sampling and repeats, see above) [ns per packet]. Most self ns first.

``kind_costs(profiles)`` -- the same per kind (self costs summed over the kind's functions):
    kind, self_ns, self_ns_sd [ns per packet].
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from perfkit.errors import ConfigError
from perfkit.explain.kinds import function_kind
from perfkit.perf.folded import PACKET_THREADS, parse_folded, strip_annotation, untagged

#: The length of a task's name as the kernel keeps it (TASK_COMM_LEN - 1) [characters].
COMM_LEN = 15
COST_COLUMNS = ["trial_id", "symbol", "kind", "self_samples", "inclusive_samples", "packet_samples",
                "dut_ns_per_packet", "self_share", "inclusive_share", "self_ns", "inclusive_ns", "self_ns_sd",
                "inclusive_ns_sd"]
FUNCTION_COLUMNS = ["symbol", "kind", "trials", "self_samples", "inclusive_samples", "self_ns", "self_ns_sd",
                    "inclusive_ns", "inclusive_ns_sd"]


@dataclass(frozen=True)
class TrialProfile:
    """One trial's measured cost and its perf profile of the DUT cores."""

    trial_id: str
    dut_ns_per_packet: float
    """CPU time of the DUT's packet threads per packet processed [ns] (the trial's field)."""
    folded: str
    """Folded stacks of the DUT cores during the trial (``perfkit.perf.store.read_folded``)."""
    threads: tuple[str, ...] = ()
    """The DUT's own packet threads (the trial's ``dut_kthread_cpu`` names): only their samples
    count, not those of another testbed's threads on the same cores. Empty: every NAPI and cpumap
    thread's."""
    speed_ns_per_step: float | None = None
    """The DUT cores' speed during the trial (the trial's ``dut_speed_ns_per_step``; higher is
    slower) [ns]; None when not measured."""

    def __post_init__(self) -> None:
        if not (isinstance(self.dut_ns_per_packet, (int, float)) and math.isfinite(self.dut_ns_per_packet)
                and self.dut_ns_per_packet > 0):
            raise ConfigError(f"trial {self.trial_id}: dut_ns_per_packet", self.dut_ns_per_packet,
                              "a measured cost > 0 [ns]")


def packet_stacks(folded: str, threads: Sequence[str] = ()) -> list[tuple[list[str], int]]:
    """The stacks of the DUT's packet threads (``threads``, or every NAPI and cpumap kernel thread),
    BPF tags zeroed and each thread named by its kind (``napi``, ``cpumap``: their device and id
    differ from testbed to testbed), annotations stripped. perf names a task as the kernel keeps its
    name, cut to ``COMM_LEN`` characters."""
    own = {t[:COMM_LEN] for t in threads}
    out = []
    for frames, count in parse_folded(untagged(folded)):
        comm = frames[0]
        kind = next((p for p in PACKET_THREADS if comm.startswith(p)), None)
        if kind is not None and (not own or comm[:COMM_LEN] in own):
            out.append(([kind.rstrip("/")] + [strip_annotation(f) for f in frames[1:]], count))
    return out


def packet_samples(profile: TrialProfile) -> int:
    """The trial's samples of the DUT's packet threads."""
    return sum(c for _, c in packet_stacks(profile.folded, profile.threads))


def share_sd(k: float, n: float) -> float:
    """Standard deviation of a share of ``k`` samples of ``n`` (binomial; ``k = 0`` counts as one
    sample's worth) [0..1]."""
    if n <= 0:
        return math.nan
    k = max(float(k), 1.0)
    return math.sqrt(k * max(n - k, 0.0) / n) / n


def trial_costs(profile: TrialProfile) -> pd.DataFrame:
    """``cost_frame``'s rows of one trial (empty when perf sampled none of its packet threads)."""
    stacks = packet_stacks(profile.folded, profile.threads)
    n = sum(c for _, c in stacks)
    self_c: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    for frames, count in stacks:
        funcs = frames[1:] or [frames[0]]   # a sample without frames: the thread itself
        self_c[funcs[-1]] += count
        for name in set(funcs):
            incl[name] += count
    t = float(profile.dut_ns_per_packet)
    rows = [(profile.trial_id, s, function_kind(s), self_c[s], incl[s], n, t, self_c[s] / n, incl[s] / n,
             t * self_c[s] / n, t * incl[s] / n, t * share_sd(self_c[s], n), t * share_sd(incl[s], n))
            for s in incl]
    return pd.DataFrame(rows, columns=COST_COLUMNS)


def cost_frame(profiles: Sequence[TrialProfile]) -> pd.DataFrame:
    """One row per trial x function (module doc), most self ns first within each trial."""
    frames = [trial_costs(p) for p in profiles]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COST_COLUMNS)
    order = {p.trial_id: i for i, p in enumerate(profiles)}
    return df.assign(_o=df["trial_id"].map(order)).sort_values(["_o", "self_ns", "symbol"], ascending=[True, False, True],
                                                                  ignore_index=True).drop(columns="_o")


def function_costs(profiles: Sequence[TrialProfile]) -> pd.DataFrame:
    """One row per function over the trials (module doc)."""
    frame = cost_frame(profiles)
    if frame.empty:
        return pd.DataFrame(columns=FUNCTION_COLUMNS)
    trials = frame.drop_duplicates("trial_id").set_index("trial_id")[["packet_samples", "dut_ns_per_packet"]]
    rows = []
    for symbol, g in frame.groupby("symbol", sort=False):
        g = g.set_index("trial_id").reindex(trials.index)
        row = {"symbol": symbol, "kind": function_kind(symbol), "trials": int(g["self_samples"].notna().sum()),
               "self_samples": int(g["self_samples"].fillna(0).sum()),
               "inclusive_samples": int(g["inclusive_samples"].fillna(0).sum())}
        for level in ("self", "inclusive"):
            row[f"{level}_ns"], row[f"{level}_ns_sd"] = mean_and_sd(
                g[f"{level}_samples"].fillna(0).to_numpy(float), trials["packet_samples"].to_numpy(float),
                trials["dut_ns_per_packet"].to_numpy(float))
        rows.append(row)
    return pd.DataFrame(rows, columns=FUNCTION_COLUMNS).sort_values(["self_ns", "inclusive_ns", "symbol"],
                                                                   ascending=[False, False, True], ignore_index=True)


def mean_and_sd(k: np.ndarray, n: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """Mean over trials of ``t k / n`` [ns] and its uncertainty: the larger of the trials' sampling
    sds combined and the repeats' standard error (with two trials or more)."""
    cost = t * k / n
    sampling = math.sqrt(sum((ti * share_sd(ki, ni)) ** 2 for ki, ni, ti in zip(k, n, t))) / len(k)
    repeats = float(np.std(cost, ddof=1) / math.sqrt(len(k))) if len(k) > 1 else 0.0
    return float(cost.mean()), max(sampling, repeats)


def unseen_sd(profiles: Sequence[TrialProfile]) -> float:
    """The uncertainty of a function none of the trials sampled: one sample's worth per trial,
    combined (``share_sd(0, n)``) [ns per packet]."""
    sds = [p.dut_ns_per_packet * share_sd(0, n) for p in profiles
           if (n := packet_samples(p)) > 0]
    return math.sqrt(sum(x * x for x in sds)) / len(sds) if sds else 0.0


def kind_costs(profiles: Sequence[TrialProfile]) -> pd.DataFrame:
    """Self cost per kind over the trials: columns kind, self_ns, self_ns_sd [ns per packet]."""
    frame = cost_frame(profiles)
    if frame.empty:
        return pd.DataFrame(columns=["kind", "self_ns", "self_ns_sd"])
    per = frame.groupby(["trial_id", "kind"])["self_samples"].sum().unstack(fill_value=0)
    trials = frame.drop_duplicates("trial_id").set_index("trial_id").loc[per.index]
    rows = [(kind, *mean_and_sd(per[kind].to_numpy(float), trials["packet_samples"].to_numpy(float),
                                trials["dut_ns_per_packet"].to_numpy(float))) for kind in per.columns]
    return pd.DataFrame(rows, columns=["kind", "self_ns", "self_ns_sd"]).sort_values(
        "self_ns", ascending=False, ignore_index=True)
