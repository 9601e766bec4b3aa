"""``perfkit dataplane check``: does a dataplane keep the interface's promises? A conformance check
in the spirit of scikit-learn's ``check_estimator``, for dataplanes perfkit did not write.

For every traffic profile (each value of the variant, with every boolean parameter switched, as the
fuzzer takes them) it loads the program (``Dataplane.load`` on the testbed's port numbers, as
``Dataplane.emit`` assumes), runs the profile's frames (``FLOWS`` flows) through
``BPF_PROG_TEST_RUN``, and checks:

- ``load``: the program loads and is configured;
- ``run``: every frame runs;
- ``counters``: the dataplane's counters rose by exactly the frames run (each counted once);
- ``model``: the kernel's verdict and output frame are the model's (``Dataplane.emit``), and a
  forwarded frame passes ``check_output``; the first frame that differs is named. SKIP without a model.

Once per dataplane, ``layouts``: each ctypes mirror of ``Dataplane.layouts`` has the size and the
field offsets of the struct of that name in the loaded object's BTF.
"""
from __future__ import annotations

import ctypes
import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from perfkit.dataplane import BpfDut, Dataplane, DutProgram, Traffic
from perfkit.errors import PerfkitError
from perfkit.fuzz.frames import config_name, configs
from perfkit.layouts import Struct
from perfkit.libbpf import TestRunResult

#: Flows (frames) run per traffic profile.
FLOWS = 4
#: The frame size the profiles are run at when the dataplane's smallest is below it [bytes, FCS included].
FRAME_SIZE = 128
PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class Check:
    """One check's outcome."""

    check: str
    """What was checked (``load``, ``run``, ``counters``, ``model``, ``layouts``)."""
    profile: str
    """The traffic profile (``direction=ul``, ``defaults``); empty for the dataplane's own checks."""
    status: str
    """PASS, FAIL or SKIP."""
    detail: str
    """What was seen, or why it failed or was skipped (one line)."""

    def line(self) -> str:
        where = f" [{self.profile}]" if self.profile else ""
        return f"{self.status} {self.check}{where}: {self.detail}"


@dataclass(frozen=True)
class Conformance:
    """Every check of one dataplane."""

    dataplane: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return not any(c.status == FAIL for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"dataplane": self.dataplane, "ok": self.ok, "checks": [asdict(c) for c in self.checks]}


def check(dp: Dataplane) -> Conformance:
    """Run every check on ``dp`` (needs root: it loads BPF programs)."""
    out: list[Check] = []
    layouts_done = False
    for params in configs(dp):
        name = config_name(dp, params)
        results, dut = _profile(dp, params, name, out)
        if dut is None:
            continue
        try:
            if not layouts_done:
                out.append(check_layouts(dp, dut))
                layouts_done = True
        finally:
            dut.close()
    if not layouts_done:
        out.append(Check("layouts", "", SKIP, "no profile loaded"))
    return Conformance(dp.name, tuple(out))


def _profile(dp: Dataplane, params: Mapping[str, Any], name: str,
             out: list[Check]) -> tuple[list[TestRunResult], DutProgram | None]:
    size = max(FRAME_SIZE, dp.min_frame_size(params))
    try:
        traffic = dp.traffic(size, FLOWS, params)
        dut = dp.load(traffic, 1, 2)
    except PerfkitError as err:
        out.append(Check("load", name, FAIL, str(err)))
        return [], None
    out.append(Check("load", name, PASS, f"{dut.program.name} loaded for {traffic.flows} flows of {size} B"))
    try:
        frames = [traffic.packet(i, seq=i) for i in range(traffic.flows)]
        before = dut.counters()
        try:
            results = [dut.program.test_run(f) for f in frames]
        except PerfkitError as err:
            out.append(Check("run", name, FAIL, str(err)))
            dut.close()
            return [], None
        after = dut.counters()
        verdicts = sorted({r.verdict for r in results})
        out.append(Check("run", name, PASS, f"{len(frames)} frames ran: {', '.join(verdicts)}"))
        out.append(_counters(before, after, len(frames), name))
        out.append(check_model(dp, traffic, frames, results, name))
    except BaseException:
        dut.close()
        raise
    return results, dut


def _counters(before: Mapping[str, int], after: Mapping[str, int], frames: int, name: str) -> Check:
    rose = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    total = sum(rose.values())
    seen = ", ".join(f"{k} +{n}" for k, n in sorted(rose.items())) or "none rose"
    if total != frames:
        return Check("counters", name, FAIL, f"counters rose by {total} for {frames} frames run ({seen})")
    return Check("counters", name, PASS, f"{frames} frames counted once each ({seen})")


def check_model(dp: Dataplane, traffic: Traffic, frames: list[bytes], results: list[TestRunResult],
                name: str) -> Check:
    """The kernel's verdict and output for each frame against the model's; FAIL names the first
    frame (its flow) that differs."""
    if not dp.has_model:
        return Check("model", name, SKIP, "no reference model (Dataplane.emit, check_output): output not checked")
    for flow, (frame, res) in enumerate(zip(frames, results)):
        want = dp.emit(traffic, frame)
        if res.verdict != want.verdict:
            return Check("model", name, FAIL, f"frame {flow} (flow {flow}): the kernel says {res.verdict}, "
                                              f"the model {want.verdict} ({want.stat})")
        if want.out is not None and res.data_out != want.out:
            return Check("model", name, FAIL, f"frame {flow} (flow {flow}): output differs from the model's "
                                              f"{_difference(res.data_out, want.out)}")
        if want.out is not None and (why := dp.check_output(traffic, res.data_out)):
            return Check("model", name, FAIL, f"frame {flow} (flow {flow}): check_output refuses its output: {why}")
    return Check("model", name, PASS, f"{len(frames)} frames as the model says")


def _difference(got: bytes, want: bytes) -> str:
    if len(got) != len(want):
        return f"({len(got)} bytes, the model's {len(want)})"
    first = next(i for i in range(len(got)) if got[i] != want[i])
    return f"at byte {first} (0x{got[first]:02x}, the model's 0x{want[first]:02x})"


def check_layouts(dp: Dataplane, dut: DutProgram) -> Check:
    """Each mirror of ``dp.layouts`` against the struct of its name in the loaded object's BTF."""
    if not dp.layouts:
        return Check("layouts", "", SKIP, "the dataplane declares no layouts (Dataplane.layouts)")
    if not isinstance(dut, BpfDut):
        return Check("layouts", "", SKIP, "the loaded program is not a BpfDut: its object file is not known")
    path = dut.control.obj.path
    try:
        btf = btf_structs(path)
    except PerfkitError as err:
        return Check("layouts", "", FAIL, str(err))
    for cname, cls in dp.layouts.items():
        why = layout_difference(cname, cls, btf)
        if why:
            return Check("layouts", "", FAIL, f"{path.name}: {why}")
    return Check("layouts", "", PASS, f"{len(dp.layouts)} structs match {path.name}'s BTF")


def layout_difference(cname: str, cls: type[Struct], btf: Mapping[str, tuple[int, list[tuple[str, int, int]]]]) -> str | None:
    """None when ``cls`` has the size and the fields (name, offset, size) of ``struct cname`` in ``btf``."""
    if cname not in btf:
        return f"struct {cname} is not in the object's BTF"
    size, members = btf[cname]
    if ctypes.sizeof(cls) != size:
        return f"struct {cname} is {size} bytes, its mirror {ctypes.sizeof(cls)}"
    mine = [(f[0], getattr(cls, f[0]).offset, getattr(cls, f[0]).size) for f in cls._fields_]
    for got, want in zip(mine, members):
        if got != want:
            return f"struct {cname}: mirror field {got[0]} at {got[1]} ({got[2]} B), BTF {want[0]} at {want[1]} ({want[2]} B)"
    if len(mine) != len(members):
        return f"struct {cname} has {len(members)} fields, its mirror {len(mine)}"
    return None


def btf_structs(path: Path) -> dict[str, tuple[int, list[tuple[str, int, int]]]]:
    """Every named struct of the object's BTF: name -> (size, [(field, offset, size) ...]) [bytes]."""
    proc = subprocess.run(["bpftool", "btf", "dump", "file", str(path), "-j"], capture_output=True, text=True)
    if proc.returncode:
        raise PerfkitError(f"bpftool btf dump file {path}: {' '.join(proc.stderr.split()) or 'failed'} "
                           "(an object without BTF: compile it with -g)")
    types = {t["id"]: t for t in json.loads(proc.stdout)["types"]}

    def size(type_id: int) -> int:
        t = types[type_id]
        while t["kind"] in ("TYPEDEF", "CONST", "VOLATILE"):
            t = types[t["type_id"]]
        if t["kind"] == "ARRAY":
            return t["nr_elems"] * size(t["type_id"])
        return 8 if t["kind"] == "PTR" else t.get("size", 0)

    return {t["name"]: (t["size"], [(m["name"], m["bits_offset"] // 8, size(m["type_id"])) for m in t["members"]])
            for t in types.values() if t["kind"] == "STRUCT" and t.get("name")}
