"""The calibration: what one work iteration of the calibrated DUT costs, measured by prog-bench.

``calibrate(works)`` runs prog-bench (``perfkit.progbench``: kernel-timed BPF_PROG_TEST_RUN, net of
an XDP_DROP baseline) at each amount of work N and fits a line through the net cost per packet:
the slope is the cost of one iteration [ns], the intercept the program's fixed cost (parsing,
counters, MAC rewrite, redirect). A measurement that claims to see the DUT's cost must see the
cost rise with N by this slope: the BPF statistics of a live trial (``bpf_ns_per_packet``) and the
CPU time of the DUT's packet threads (``dut_ns_per_packet``) alike.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from perfkit.errors import ConfigError, PerfkitError
from perfkit.progbench import prog_bench

#: The amounts of work ``calibrate`` measures unless told otherwise.
DEFAULT_WORKS = (0, 100, 200, 400)


@dataclass(frozen=True)
class Line:
    """A least-squares line ``y = intercept + slope * x`` and how well it fits."""

    slope: float
    intercept: float
    r2: float
    """Coefficient of determination (1: every point on the line)."""


def fit_line(x: Sequence[float], y: Sequence[float]) -> Line:
    """The least-squares line through the points (x, y) (at least two distinct x)."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(xs) != len(ys) or len(set(xs.tolist())) < 2:
        raise ConfigError("points", list(zip(xs.tolist(), ys.tolist())), "at least two distinct x")
    slope, intercept = np.polyfit(xs, ys, 1)
    resid = ys - (intercept + slope * xs)
    total = float(((ys - ys.mean()) ** 2).sum())
    r2 = 1.0 - float((resid ** 2).sum()) / total if total > 0 else 1.0
    return Line(float(slope), float(intercept), r2)


@dataclass(frozen=True)
class Calibration:
    """The calibrated DUT's cost per packet as a function of the work N, from prog-bench."""

    frame_size: int
    works: tuple[int, ...]
    """The amounts of work measured (iterations per packet), ascending."""
    net_ns: tuple[float, ...]
    """prog-bench's net cost per packet at each of ``works`` [ns] (median over passes)."""
    ns_per_iteration: float
    """The slope: the cost of one work iteration [ns]."""
    intercept_ns: float
    """The fitted cost at N = 0 [ns]: the program's fixed cost over the XDP_DROP baseline."""
    r2: float
    """How straight the line is (R² of the fit through ``net_ns``)."""
    passes: int = 1
    """Measurements per amount of work (``net_ns`` holds their medians)."""

    @classmethod
    def fit(cls, points: Mapping[int, Sequence[float]], frame_size: int = 64) -> Calibration:
        """The line through each amount of work's median net cost (``points``: work -> prog-bench
        net ns per packet, one per pass; ``bench_work`` measures one)."""
        works = sorted(points)
        if len(works) < 2 or any(not points[w] for w in works):
            raise ConfigError("points", dict(points), "at least two amounts of work, each measured")
        net = tuple(float(statistics.median(points[w])) for w in works)
        line = fit_line(works, net)
        return cls(frame_size=frame_size, works=tuple(works), net_ns=net, ns_per_iteration=line.slope,
                   intercept_ns=line.intercept, r2=line.r2, passes=min(len(points[w]) for w in works))

    def predict(self, work: int) -> float:
        """The program's net cost per packet at ``work`` iterations [ns]."""
        return self.intercept_ns + self.ns_per_iteration * work

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bench_work(work: int, frame_size: int = 64, rounds: int = 11, repeat: int = 20_000,
               cpu: int | None = None) -> float:
    """prog-bench's net cost per packet of the calibrated DUT at ``work`` iterations [ns], its
    forwarding path verified (every measured run forwarded, no other counter moved)."""
    res = prog_bench("calib", frame_size=frame_size, params={"work_iterations": int(work)}, rounds=rounds,
                     repeat=repeat, cpu=cpu)
    if not res.path_verified:
        raise PerfkitError(f"calibration at {work} work iterations: prog-bench did not verify the forwarding path "
                           f"({res.path_packets} of {res.measured_runs} runs forwarded, other counters "
                           f"{res.other_counters})")
    return res.net_ns_per_packet


def calibrate(works: Sequence[int] = DEFAULT_WORKS, frame_size: int = 64, rounds: int = 11, repeat: int = 20_000,
              passes: int = 2, cpu: int | None = None) -> Calibration:
    """Measure the calibrated DUT with prog-bench at each amount of work of ``works`` and fit the
    line. Every N is measured ``passes`` times, in alternating order, and each keeps its median:
    this machine's speed drifts by some 10 % over seconds (other work on the host), and a drift
    must neither tilt the line nor weigh on one N.

    A measurement compared with the calibration should be taken over the same stretch of time:
    interleave its parts with the passes (``bench_work`` and ``Calibration.fit``)."""
    works = tuple(int(w) for w in works)
    if len(set(works)) < 2:
        raise ConfigError("works", list(works), "at least two distinct amounts of work")
    if passes < 1:
        raise ConfigError("passes", passes, "an integer >= 1")
    points: dict[int, list[float]] = {w: [] for w in works}
    for p in range(passes):
        for w in (works if p % 2 == 0 else works[::-1]):
            points[w].append(bench_work(w, frame_size, rounds, repeat, cpu))
    return Calibration.fit(points, frame_size)
