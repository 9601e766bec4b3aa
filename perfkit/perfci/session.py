"""Two sides measured in one session: the campaign's units run interleaved (``perfci.units``).

``Session(campaign, workdir)`` writes the unit files once; ``measure(a, b, repeats)`` runs them on
both sides in the interleaved order, each unit a ``perfkit run`` of that side's perfkit into the
session's scratch store, and merges each side's unit runs into one run of the store
(``units.merge_runs``). Bisection calls ``measure`` once per round, one repeat at a time.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from perfkit.campaign.model import Campaign
from perfkit.perfci.sides import Side
from perfkit.perfci.units import UnitFile, interleaved, merge_runs, unit_campaigns
from perfkit.store import RunStore


@dataclass
class Measured:
    """What one side ran in a session: (unit, repeat, run id) per unit run, in the order they ran."""

    side: Side
    parts: list = field(default_factory=list)


@dataclass
class Session:
    """The units of a campaign and the scratch store their runs go to."""

    campaign: Campaign
    workdir: Path
    say: Callable[[str], None] = print
    units: list[UnitFile] = field(init=False)
    scratch: Path = field(init=False)
    order: list[tuple[int, int, str]] = field(default_factory=list, init=False)
    """Every unit run so far: (repeat, unit index, side name), in the order they ran."""

    def __post_init__(self) -> None:
        self.units = unit_campaigns(self.campaign, self.workdir / "units")
        self.scratch = self.workdir / "runs"
        self.scratch.mkdir(parents=True, exist_ok=True)

    def measure(self, a: Side, b: Side, repeats: int, first_repeat: int = 1,
                done: dict[str, Measured] | None = None) -> dict[str, Measured]:
        """Run every unit ``repeats`` times on both sides, interleaved; repeats are numbered from
        ``first_repeat`` (a later round goes on where the last stopped, the order still alternating)."""
        out = done if done is not None else {a.name: Measured(a), b.name: Measured(b)}
        sides = {a.name: a, b.name: b}
        for r, u, name in interleaved(len(self.units), repeats, (a.name, b.name)):
            repeat = first_repeat + r - 1
            if (repeat - r) % 2:   # the order goes on alternating across rounds
                name = b.name if name == a.name else a.name
            side = sides[name]
            t0 = time.monotonic()
            outcome = side.run_unit(self.units[u].path, self.scratch)
            self.order.append((repeat, u, name))
            out[name].parts.append((self.units[u].unit, repeat, str(outcome["run_id"])))
            self.say(f"  repeat {repeat} {self.units[u].unit.id} {side.label}: run {outcome['run_id']} "
                     f"({time.monotonic() - t0:.0f} s)")
        return out

    def merge(self, measured: Measured, store_root: Path, run_id: str, extra: dict) -> RunStore:
        repeats = max(r for _, r, _ in measured.parts)
        return merge_runs(self.scratch, measured.parts, repeats, store_root, run_id, self.campaign,
                          {"perfci": {"side": measured.side.name, "rev": measured.side.rev,
                                      "commit": measured.side.commit, **extra}})
