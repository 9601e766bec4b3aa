"""The difference between two sets of trials, decomposed into functions: ``explain(a, b)``.

The gap is ``b``'s measured ``dut_ns_per_packet`` minus ``a``'s (means over each set's trials). Each
function's share of it is its self cost in ``b`` minus its self cost in ``a``
(``perfkit.explain.cost``); these add up to the gap exactly, since a trial's self costs add up to
its cost. A function *carries* the gap when its change exceeds its noise (``Z`` standard
deviations) or is at least ``CARRIES`` of the gap (with repeats, the common noise of the trials'
costs can cover a large change: it is named with its ``±``); the ``top`` largest of those are
named, largest first, and the rest of the gap is *unexplained*: spread over functions each within
its noise, or left to the named ones' noise.

The named functions *account for* the gap when they add up to it within its uncertainty (the
measured gap's, with repeats on both sides), or, with one trial on a side, when the unexplained
part is within its own uncertainty.

Uncertainties are 95 % half-widths (``Z`` = 1.96 standard deviations): the gap's from the repeats
of each side (none with a single trial on a side: the gap's noise is then unknown, and said so),
a function's from its sample counts and the repeats (``cost.mean_and_sd``). The unexplained part's
is that of the other functions' samples taken together, per side (a binomial share, and the repeats
where there are several, ``cost.mean_and_sd``): it is known with one trial a side too. A gap within
its noise is said as such.

The DUT cores' speed (the stall probe's ``dut_speed_ns_per_step``, where measured) is compared too:
a host that runs the core slower during one side makes every function dearer there alike, a change
spread over all functions that the named ones cannot carry (``Explanation.speed_change``).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace
from typing import Any

import pandas as pd

from perfkit.errors import ConfigError
from perfkit.explain import TOP
from perfkit.explain.cost import cost_frame, function_costs, kind_costs, mean_and_sd, packet_samples, unseen_sd
from perfkit.explain.kinds import KINDS, display_name
from perfkit.explain.sets import TrialSet

#: Standard deviations of a 95 % interval (the ``±`` of every figure).
Z = 1.96
#: A change of the DUT cores' speed between the sides that the explanation mentions [1].
SPEED_NOTED = 0.01
#: A function within its noise still carries the gap when its change is at least this share of it [1].
CARRIES = 0.1


@dataclass(frozen=True)
class Mover:
    """One function's part of the gap."""

    symbol: str
    """The function (BPF tags zeroed)."""
    name: str
    """How sentences name it (a BPF program by its function's name)."""
    kind: str
    """``perfkit.explain.kinds.KINDS``."""
    a_ns: float
    """Its self cost in ``a`` [ns per packet]."""
    b_ns: float
    """Its self cost in ``b`` [ns per packet]."""
    delta_ns: float
    """``b_ns - a_ns`` [ns per packet]."""
    delta_err_ns: float
    """95 % half-width of ``delta_ns`` [ns per packet]."""
    inclusive_delta_ns: float
    """The change of its inclusive cost (it and what it calls) [ns per packet]."""

    @property
    def significant(self) -> bool:
        """The change exceeds its noise."""
        return abs(self.delta_ns) > self.delta_err_ns

    def carries(self, gap_ns: float) -> bool:
        """The change exceeds its noise or is at least ``CARRIES`` of the gap."""
        return self.significant or abs(self.delta_ns) >= CARRIES * abs(gap_ns) > 0


@dataclass(frozen=True)
class Explanation:
    """Where the nanoseconds per packet go between ``a`` and ``b``."""

    a: str
    """``a``'s label."""
    b: str
    """``b``'s label."""
    context: str
    """What stayed the same (a scenario key), or empty."""
    a_trials: int
    b_trials: int
    a_ns: float
    """``a``'s measured cost, mean over its trials [ns per packet]."""
    b_ns: float
    gap_ns: float
    """``b_ns - a_ns`` [ns per packet]."""
    gap_err_ns: float | None
    """95 % half-width of ``gap_ns`` from the repeats [ns per packet]; None with one trial on a side."""
    within_noise: bool
    """The gap is within its noise (``|gap| <= gap_err``); False when the noise is unknown."""
    movers: tuple[Mover, ...]
    """Every function, largest ``|delta_ns|`` first."""
    named: tuple[Mover, ...]
    """The functions that carry the gap (``Mover.carries``): up to ``top``, largest first."""
    unexplained_ns: float
    """``gap_ns`` minus the named functions' deltas [ns per packet]."""
    unexplained_err_ns: float
    """Its 95 % half-width: the other functions' samples taken together, per side, from their count
    and the repeats [ns per packet]."""
    kinds: dict[str, dict[str, float]]
    """Per kind: ``a_ns``, ``b_ns``, ``delta_ns``, ``delta_err_ns`` of its functions' self costs."""
    speed_change: float | None = None
    """How much slower the DUT cores ran during ``b`` than during ``a``: the ratio of their mean
    ``dut_speed_ns_per_step`` minus 1 [1] (0.05: 5 % slower); None where a side has no measure."""

    @property
    def speed_ns(self) -> float | None:
        """The part of the gap the speed change alone gives, every function of ``a`` alike
        (``a_ns x speed_change``) [ns per packet]; None without a speed measure."""
        return None if self.speed_change is None else self.a_ns * self.speed_change

    @property
    def accounted_within_ns(self) -> float:
        """What the unexplained part is held to [ns per packet]: the measured gap's uncertainty with
        repeats on both sides, else the unexplained part's own."""
        return self.gap_err_ns if self.gap_err_ns is not None else self.unexplained_err_ns

    @property
    def accounted(self) -> bool:
        """The named functions account for the gap: they add up to it within its uncertainty (with
        repeats on both sides), or the unexplained part is within its own (one trial on a side)."""
        return abs(self.unexplained_ns) <= self.accounted_within_ns

    def kind_fraction(self, kind: str) -> float:
        """The share of the gap the functions of ``kind`` carry (``delta / gap``; NaN without a gap)."""
        return self.kinds.get(kind, {}).get("delta_ns", 0.0) / self.gap_ns if self.gap_ns else math.nan

    def sentence(self) -> str:
        """``b costs 61 ± 6 ns more than a: f +28 ± 2, g +11 ± 1; unexplained +3 ± 6``."""
        err = f" ± {ns_text(self.gap_err_ns)}" if self.gap_err_ns is not None else ""
        where = f" ({self.context})" if self.context else ""
        if self.within_noise:
            return (f"{self.b} and {self.a} cost the same within the noise{where}: {self.b} - {self.a} = "
                    f"{ns_text(self.gap_ns, '+')}{err} ns per packet ({ns_text(self.b_ns)} against {ns_text(self.a_ns)})")
        word = "more" if self.gap_ns > 0 else "less"
        head = f"{self.b} costs {ns_text(abs(self.gap_ns))}{err} ns {word} per packet than {self.a}{where}"
        if self.gap_err_ns is None:
            head += " (one trial on a side: the gap's noise is unknown)"
        parts = [f"{m.name} {ns_text(m.delta_ns, '+')} ± {ns_text(m.delta_err_ns)}" for m in self.named]
        rest = f"unexplained {ns_text(self.unexplained_ns, '+')} ± {ns_text(self.unexplained_err_ns)}"
        return f"{head}: " + ", ".join(parts + [rest])

    def accounted_line(self) -> str:
        """Whether the named functions account for the gap, in words ("" for a gap within its noise)."""
        if self.within_noise:
            return ""
        rest = f"{ns_text(self.unexplained_ns, '+')} ± {ns_text(self.unexplained_err_ns)} ns"
        limit = (f"the gap's uncertainty (± {ns_text(self.gap_err_ns)} ns)" if self.gap_err_ns is not None
                 else "its uncertainty")
        if self.accounted:
            return f"the named functions account for the gap: the unexplained {rest} is within {limit}"
        return (f"the named functions leave {rest} unexplained, more than {limit}: functions each "
                f"within its noise that moved together" + self._speed_text())

    def _speed_text(self) -> str:
        """``; the DUT cores ran 6.0 % faster during b, ...`` where their speed changed by 1 % or more."""
        if self.speed_change is None or abs(self.speed_change) < SPEED_NOTED:
            return ""
        word = "slower" if self.speed_change > 0 else "faster"
        return (f"; the DUT cores ran {100 * abs(self.speed_change):.1f} % {word} during {self.b} (the stall "
                f"probe's speed), which alone gives {ns_text(self.speed_ns, '+')} ns spread over every function")

    def kinds_line(self) -> str:
        """``by kind: program +55 ± 2, stack +3 ± 1, ...`` (largest change first)."""
        order = sorted(self.kinds.items(), key=lambda kv: -abs(kv[1]["delta_ns"]))
        return "by kind: " + ", ".join(f"{k} {ns_text(v['delta_ns'], '+')} ± {ns_text(v['delta_err_ns'])}"
                                          for k, v in order)

    def table(self, n: int = 15) -> pd.DataFrame:
        """The ``n`` largest movers: name, kind, a ns, b ns, delta ns, ± ns, inclusive delta ns."""
        return pd.DataFrame([(m.name, m.kind, m.a_ns, m.b_ns, m.delta_ns, m.delta_err_ns, m.inclusive_delta_ns)
                             for m in self.movers[:n]],
                            columns=["function", "kind", f"{self.a} [ns]", f"{self.b} [ns]", "delta [ns]", "± [ns]",
                                     "inclusive delta [ns]"])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sentence"] = self.sentence()
        d["accounted"] = self.accounted
        d["accounted_within_ns"] = self.accounted_within_ns
        d["speed_ns"] = self.speed_ns
        d["movers"] = d["movers"][:50]
        return d


def set_cost(s: TrialSet) -> tuple[float, float | None]:
    """The set's measured cost, mean over its trials [ns], and its standard error (None: one trial)."""
    costs = [p.dut_ns_per_packet for p in s.profiles]
    se = statistics.stdev(costs) / math.sqrt(len(costs)) if len(costs) > 1 else None
    return statistics.fmean(costs), se


def explain(a: TrialSet, b: TrialSet, context: str = "", top: int = TOP) -> Explanation:
    """``b`` against ``a``, decomposed (module doc). Trials without a sample of the DUT's packet
    threads are left out of both the gap and the functions, so that these still add up."""
    a, b = (replace(s, profiles=tuple(p for p in s.profiles if packet_samples(p))) for s in (a, b))
    for opt, s in (("a", a), ("b", b)):
        if not s.profiles:
            raise ConfigError(opt, s.label, "a set with at least one trial with perf data and a measured cost")
    (a_ns, a_se), (b_ns, b_se) = set_cost(a), set_cost(b)
    gap = b_ns - a_ns
    gap_err = Z * math.hypot(a_se, b_se) if a_se is not None and b_se is not None else None
    movers = _movers(function_costs(a.profiles), function_costs(b.profiles), unseen_sd(a.profiles),
                     unseen_sd(b.profiles))
    named = tuple(m for m in movers if m.carries(gap))[:top]
    explained = sum(m.delta_ns for m in named)
    names = {m.symbol for m in named}
    unexp_err = Z * math.hypot(_rest_sd(a, names), _rest_sd(b, names))
    return Explanation(a.label, b.label, context, len(a.profiles), len(b.profiles), a_ns, b_ns, gap, gap_err,
                       gap_err is not None and abs(gap) <= gap_err, movers, named, gap - explained, unexp_err,
                       _kinds(kind_costs(a.profiles), kind_costs(b.profiles)), _speed_change(a, b))


def _speed_change(a: TrialSet, b: TrialSet) -> float | None:
    """``b``'s mean DUT speed [ns per step] over ``a``'s, minus 1; None where a side has none."""
    sa, sb = ([p.speed_ns_per_step for p in s.profiles if p.speed_ns_per_step] for s in (a, b))
    return statistics.fmean(sb) / statistics.fmean(sa) - 1 if sa and sb else None


def _rest_sd(s: TrialSet, named: set[str]) -> float:
    """The standard deviation of the set's cost outside the ``named`` functions [ns per packet]."""
    costs = cost_frame(s.profiles)
    trials = costs.drop_duplicates("trial_id").set_index("trial_id")[["packet_samples", "dut_ns_per_packet"]]
    inside = costs[costs["symbol"].isin(named)].groupby("trial_id")["self_samples"].sum()
    rest = trials["packet_samples"] - inside.reindex(trials.index, fill_value=0)
    return mean_and_sd(rest.to_numpy(float), trials["packet_samples"].to_numpy(float),
                       trials["dut_ns_per_packet"].to_numpy(float))[1]


def _movers(fa: pd.DataFrame, fb: pd.DataFrame, unseen_a: float, unseen_b: float) -> tuple[Mover, ...]:
    cols = ["kind", "self_ns", "self_ns_sd", "inclusive_ns"]
    both = pd.merge(fa.set_index("symbol")[cols], fb.set_index("symbol")[cols], how="outer", left_index=True,
                    right_index=True, suffixes=("_a", "_b"))
    out = []
    for sym, r in both.iterrows():
        kind = r["kind_b"] if isinstance(r["kind_b"], str) else r["kind_a"]
        va, vb = _num(r["self_ns_a"]), _num(r["self_ns_b"])
        sa, sb = _num(r["self_ns_sd_a"], unseen_a), _num(r["self_ns_sd_b"], unseen_b)
        out.append(Mover(str(sym), display_name(str(sym)), str(kind), va, vb, vb - va, Z * math.hypot(sa, sb),
                         _num(r["inclusive_ns_b"]) - _num(r["inclusive_ns_a"])))
    return tuple(sorted(out, key=lambda m: (-abs(m.delta_ns), m.symbol)))


def _kinds(ka: pd.DataFrame, kb: pd.DataFrame) -> dict[str, dict[str, float]]:
    a, b = ka.set_index("kind"), kb.set_index("kind")
    out = {}
    for kind in KINDS:
        if kind not in a.index and kind not in b.index:
            continue
        va = float(a.at[kind, "self_ns"]) if kind in a.index else 0.0
        vb = float(b.at[kind, "self_ns"]) if kind in b.index else 0.0
        sa = float(a.at[kind, "self_ns_sd"]) if kind in a.index else 0.0
        sb = float(b.at[kind, "self_ns_sd"]) if kind in b.index else 0.0
        out[kind] = {"a_ns": va, "b_ns": vb, "delta_ns": vb - va, "delta_err_ns": Z * math.hypot(sa, sb)}
    return out


def _num(x: Any, default: float = 0.0) -> float:
    return default if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def ns_text(x: float, sign: str = "") -> str:
    """A cost as sentences show it: whole ns from 10 ns on, one decimal below."""
    return format(x, f"{sign}.0f" if abs(x) >= 9.95 else f"{sign}.1f")
