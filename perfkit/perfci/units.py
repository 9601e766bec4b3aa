"""A campaign's units for two sides: one campaign file per unit, the interleaved order, the merged runs.

``unit_campaigns(campaign)``: the campaign's units with ``repeats`` left out (``expand`` of the
campaign at one repeat), each written as a campaign of its own: the unit's scenario (every axis
fixed to its value) and its one method. A side runs a unit as ``perfkit run UNIT_FILE``, so every
side runs exactly the same units with its own code.

``interleaved(units, repeats, sides)``: the order of the runs. Repeat 1 runs unit 1 on A then B, unit
2 on B then A, ...; repeat 2 starts the other way round: A B B A A B ..., so that a host that slows
down during the session slows both sides alike and neither side always goes first.

``merge_runs(side_root, run_ids, ...)``: the unit runs of one side gathered into one run of the store
(``<store>/<run_id>``): every trial file, each search summary under the unit id the campaign would
give it at that repeat (``__r2`` ...), the first unit run's metadata with the whole campaign. That
run is an ordinary run: ``perfkit compare``, ``perfkit report`` and ``perfkit history`` read it.
"""
from __future__ import annotations

import dataclasses
import json
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from perfkit.campaign.model import Campaign
from perfkit.campaign.schema import load_mapping
from perfkit.campaign.units import Unit, expand
from perfkit.durable import atomic_write
from perfkit.perf.store import perf_trial_ids, read_folded, write_folded
from perfkit.store import RunStore


@dataclass(frozen=True)
class UnitFile:
    """One unit of the campaign, as a campaign file of its own."""

    unit: Unit
    """The unit (repeat 1)."""
    path: Path
    """Its campaign file."""


def unit_mapping(campaign: Campaign, unit: Unit) -> dict[str, Any]:
    """The campaign file (as a mapping) that runs ``unit`` alone, once."""
    raw = load_mapping(campaign.text, campaign.source)
    sc = unit.scenario
    out = {k: v for k, v in raw.items() if k not in ("parts", "params", "knobs", "frame_sizes", "flows", "dut_cores",
                                                      "methods", "repeats", "perf", "name")}
    out.update(name=campaign.name, params={k: [v] for k, v in sc.params.items()},
               frame_sizes=[sc.frame_size], flows=[sc.flows], dut_cores=[sc.dut_cores], repeats=1,
               methods=[{"method": unit.method.name, "label": unit.method.label, "params": dict(unit.method.params)}],
               perf=unit.method.label in campaign.perf)
    if sc.knobs:
        out["knobs"] = {k: [v] for k, v in sc.knobs.items()}
    return out


def unit_campaigns(campaign: Campaign, directory: Path) -> list[UnitFile]:
    """Write one campaign file per unit (repeat 1) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    once = dataclasses.replace(campaign, repeats=1)
    out = []
    for i, unit in enumerate(expand(once)):
        path = directory / f"unit{i:03d}.yaml"
        path.write_text(f"# {unit.id}: one unit of {campaign.source}, written by perfkit.perfci\n"
                        + yaml.safe_dump(unit_mapping(campaign, unit), sort_keys=False))
        out.append(UnitFile(unit, path))
    return out


def interleaved(n_units: int, repeats: int, sides: tuple[str, str] = ("A", "B")) -> list[tuple[int, int, str]]:
    """(repeat 1.., unit index, side) in run order (module doc): the pair's order alternates per unit
    and each repeat starts where the previous one's first pair did not."""
    order = []
    for r in range(1, repeats + 1):
        for u in range(n_units):
            first = (r - 1 + u) % 2
            for s in (sides[first], sides[1 - first]):
                order.append((r, u, s))
    return order


def repeat_unit_id(unit: Unit, repeat: int, repeats: int) -> str:
    """The unit's id at ``repeat`` as the campaign would name it (``campaign.units.expand``)."""
    return unit.id + (f"__r{repeat}" if repeats > 1 else "")


def merge_runs(side_root: Path, parts: list[tuple[Unit, int, str]], repeats: int, store_root: Path, run_id: str,
               campaign: Campaign, extra: dict[str, Any]) -> RunStore:
    """Gather a side's unit runs (``parts``: (unit, repeat, run id under ``side_root``)) into one run
    ``run_id`` of ``store_root`` (module doc); ``extra`` goes into its metadata."""
    first = RunStore.open(parts[0][2], side_root).metadata()
    first.pop("run_id", None)
    meta = {**first, "campaign": {**first.get("campaign", {}), "text": campaign.text, "source": campaign.source,
                                  "name": campaign.name}, "units_total": len(parts), "units_done": len(parts),
            "unit_runs": [rid for _, _, rid in parts], **extra}
    merged = RunStore.create(run_id, store_root, meta)
    seq = 0
    for unit, repeat, rid in parts:
        src = RunStore.open(rid, side_root)
        uid = repeat_unit_id(unit, repeat, repeats)
        for f in sorted((src.path / "trials").glob("[0-9]*.parquet")):
            frame = pd.read_parquet(f)
            frame["unit"] = uid   # the unit at this repeat, as in a run of the whole campaign
            dest = merged.path / "trials" / f"{seq:06d}-{f.name.split('-', 1)[1]}"
            atomic_write(dest, _parquet(frame), "perfci.merge")
            seq += 1
        for s in src.searches():
            merged.write_search(uid, {**s, "unit": uid, "repeat": repeat})
        for tid in perf_trial_ids(src.path):   # the DUT's stacks: the comment's functions that moved
            write_folded(merged.path, tid, read_folded(src.path, tid))
    return merged


def _parquet(frame: pd.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    return buf.getvalue()


def write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
