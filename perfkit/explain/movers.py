"""``top_movers``: the functions that moved most between two runs' profiled trials of a scenario,
in ns per packet, for a comment that says where a regression went (``perfkit ab``)."""
from __future__ import annotations

from pathlib import Path

from perfkit.analysis.run import load_run
from perfkit.errors import PerfkitError
from perfkit.explain.gap import Mover, explain, ns_text
from perfkit.explain.sets import run_pairs


def top_movers(run_id: str, baseline_id: str, scenario_key: str, root: str | Path, n: int = 3) -> list[Mover]:
    """The ``n`` functions of ``scenario_key`` whose self cost changed most (beyond their noise)
    from run ``baseline_id`` to run ``run_id``, largest first; [] when either run has no perf data
    of the scenario."""
    try:
        pair = run_pairs(load_run(run_id, root), load_run(baseline_id, root), scenario_key)[0]
    except PerfkitError:
        return []
    return [m for m in explain(pair.a, pair.b).movers if m.significant][:n]


def movers_text(movers: list[Mover]) -> str:
    """``xdp_calib +1100 ± 40 ns, csum_partial +12 ± 3.0 ns`` (empty without movers): the figures
    as ``perfkit explain``'s sentences write them."""
    return ", ".join(f"`{m.name}` {ns_text(m.delta_ns, '+')} ± {ns_text(m.delta_err_ns)} ns" for m in movers)
