"""The dataplane seam: generic modules know a dataplane only through ``perfkit.dataplane``.

Code outside ``perfkit/dataplanes/`` (and every notebook) must not name a dataplane, its scenario
parameters or its counters: adding a dataplane then touches no generic module. Docstrings and
comments may use one as an example; identifiers and string literals may not.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from perfkit import dataplanes
from perfkit.dataplane import Dataplane
from perfkit.errors import ConfigError
from perfkit.scenario import Scenario
from perfkit.trial import RECORD_COLUMNS, TrialResult
from tests.conftest import ROOT

GENERIC = sorted(p for p in (ROOT / "perfkit").rglob("*.py") if "dataplanes" not in p.relative_to(ROOT).parts)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _forbidden() -> re.Pattern[str]:
    words = {"teid", "maglev", *dataplanes.names()}
    words |= {w.upper() for w in words} | {w.capitalize() for w in words}
    for name in dataplanes.names():
        dp = dataplanes.get(name)
        # parameters and counters are lower-case identifiers: ``protocol`` is the LB's, ``Protocol`` typing's
        words |= {*dp.forward_counters, *(p.name for p in dp.params)}
    words -= {"vlan"}  # a protocol every generic parser and capture filter may know
    return re.compile(r"\b(" + "|".join(sorted(map(re.escape, words))) + r")\b")


def _names_and_strings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every identifier and non-docstring string literal in ``source``."""
    tree = ast.parse(source)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    # a string right after an assignment documents it (``x = 1`` then ``"""what x is"""``)
    for n in ast.walk(tree):
        for field in ("body", "orelse"):
            stmts = getattr(n, field, None)
            if isinstance(stmts, list):
                for a, b in zip(stmts, stmts[1:]):
                    if isinstance(a, (ast.Assign, ast.AnnAssign)) and isinstance(b, ast.Expr) \
                            and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str):
                        docstrings.add(id(b.value))
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            out.append((n.lineno, n.id))
        elif isinstance(n, ast.Attribute):
            out.append((n.lineno, n.attr))
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            out.append((n.lineno, n.name))
        elif isinstance(n, ast.arg):
            out.append((n.lineno, n.arg))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
            out.append((n.lineno, n.value))
    return out


@pytest.mark.parametrize("path", GENERIC, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_generic_module_names_a_dataplane(path: Path) -> None:
    bad = _forbidden()
    hits = [f"{path.name}:{line}: {text!r}" for line, text in _names_and_strings(path.read_text()) if bad.search(text)]
    assert not hits, "dataplane knowledge in a generic module:\n" + "\n".join(hits)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_notebook_names_a_dataplane(path: Path) -> None:
    bad = _forbidden()
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    hits = []
    for i, cell in enumerate(cells):
        src = "".join(cell["source"])
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            continue  # the parameters cell may name a default run or dataplane
        hits += [f"cell {i}:{line}: {text!r}" for line, text in _names_and_strings(src) if bad.search(text)]
    assert not hits, "dataplane knowledge in a notebook:\n" + "\n".join(hits)


def test_every_dataplane_is_registered_and_complete() -> None:
    assert set(dataplanes.names()) >= {"pgwu"}
    reserved = {c.strip() for key in RECORD_COLUMNS for c in key.split(",")}
    for name in dataplanes.names():
        dp = dataplanes.get(name)
        assert isinstance(dp, Dataplane) and dp.name == name
        assert dp.variant in {p.name for p in dp.params}
        assert not {p.name for p in dp.params} & reserved, "a parameter would shadow a record column"
        defaults = dp.validate({})
        traffic = dp.traffic(128, 2, defaults)
        assert traffic.wire_frame_size >= 64 and traffic.ingress in ("a", "b")
        assert dp.check_output(traffic, traffic.expected_output(1)) is None
        assert dp.check_output(traffic, traffic.packet(1)) is not None, "the offered frame is not a correct output"


def test_parameters_are_validated_by_their_dataplane() -> None:
    with pytest.raises(ConfigError, match=r"pgwu parameter: 'protocol' is not allowed; allowed: direction, sessions"):
        Scenario("pgwu", params={"protocol": "tcp"})
    with pytest.raises(ConfigError, match=r"^direction: 'up' is not allowed; allowed: ul, dl$"):
        Scenario("pgwu", params={"direction": "up"})
    with pytest.raises(ConfigError, match=r"^sessions: -1 is not allowed; allowed: an integer 0 <= n$"):
        Scenario("pgwu", params={"sessions": -1})
    with pytest.raises(ConfigError, match=r"^dataplane: 'bng' is not allowed"):
        Scenario("bng")


def test_one_scenario_key_everywhere() -> None:
    """Scenario.key, TrialResult.scenario_key and the stored record agree, VLAN and sessions included."""
    sc = Scenario("pgwu", 512, 4, 1, params={"direction": "dl", "vlan": True, "sessions": 200_000})
    assert sc.key == "pgwu-dl-512B-4flow-1core-vlan-200000sess"
    result = TrialResult.for_scenario(sc, wire_frame_size=516, generator="sim", duration=1.0, intended_pps=1.0,
                                      intended_packets=1, tx_packets=1, rx_packets=1)
    rec = result.to_record()
    assert result.scenario_key == rec["scenario_key"] == sc.key
    assert rec["direction"] == "dl" and rec["vlan"] is True and rec["variant"] == "dl"
    back = TrialResult.from_record(rec)
    assert back.params == dict(sc.params) and back.scenario_key == sc.key


def test_records_written_before_dataplane_params_still_load() -> None:
    old = {"dataplane": "pgwu", "direction": "dl", "frame_size": 64, "wire_frame_size": 64, "flows": 1,
           "dut_cores": 1, "generator": "sim", "duration": 1.0, "intended_pps": 1.0, "intended_packets": 1,
           "tx_packets": 1, "rx_packets": 1, "udp_csum": True, "sessions": 1}
    r = TrialResult.from_record(old)
    assert r.params == {"direction": "dl", "sessions": 1, "udp_csum": True, "vlan": False}
    assert r.scenario_key == "pgwu-dl-64B-1flow-1core-csum-1sess"
