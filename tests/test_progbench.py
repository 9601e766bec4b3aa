"""prog-bench measures the intended path: proven with the dataplane's own counters."""
from __future__ import annotations

import json

import pytest

from perfkit.errors import ConfigError
from perfkit.dataplanes.pgwu.control import Pgwu, SessionPlan
from perfkit.dataplanes.pgwu.traffic import PgwuTraffic
from perfkit.progbench import prog_bench

FAST = dict(rounds=3, repeat=2000)


@pytest.mark.parametrize("direction", ["ul", "dl"])
@pytest.mark.parametrize("udp_csum", [False, True])
def test_every_measured_run_takes_the_forwarding_path(direction, udp_csum):
    res = prog_bench("pgwu", frame_size=128, params={"direction": direction, "udp_csum": udp_csum}, **FAST)
    assert res.path_counter == f"{direction}_fwd"
    assert res.path_packets == res.measured_runs == 3 * 2000
    assert res.other_counters == {}
    assert res.path_verified
    assert res.baseline_ns_per_packet > 0 and res.ns_per_packet > 0


def test_plain_repeat_would_measure_the_wrong_path():
    """The pitfall the harness exists for: without restoring, run 2.. sees the decapsulated packet."""
    prof = PgwuTraffic(direction="ul", frame_size=128)
    with Pgwu.load(max_sessions=1024) as pg:
        pg.add_sessions(prof.plan)
        pg.program.test_run(prof.packet(0), repeat=1000)
        stats = {k: v.packets for k, v in pg.stats().items() if v.packets}
    assert stats.get("ul_fwd", 0) == 1  # only the first run decapsulated
    assert sum(stats.values()) == 1000


@pytest.mark.parametrize("direction", ["ul", "dl"])
def test_many_sessions_are_all_hit_evenly(direction):
    n = 500
    plan = SessionPlan(n)
    hits: list[int] = []

    def read(dut) -> None:
        pg = dut.control
        hits.extend(pg.ul_session(s.ul_teid)[2].packets if direction == "ul" else pg.dl_session(s.ue_addr)[2].packets
                    for s in plan)

    res = prog_bench("pgwu", frame_size=64, params={"direction": direction, "sessions": n}, rounds=3, repeat=5000,
                     inspect=read)
    assert res.path_verified and res.keys == n
    # 4 rounds (one warm-up) x 5000 runs cycle through all 500 sessions: 40 each, plus the one
    # unvaried check run on the template's session 0
    assert sorted(set(hits)) in ([40, 41], [40])
    assert sum(hits) == 4 * 5000 + 1


def test_bad_input_names_the_field():
    with pytest.raises(ConfigError, match="direction: 'up'"):
        prog_bench(params={"direction": "up"})
    with pytest.raises(ConfigError, match="cpu: 99"):
        prog_bench(cpu=99)
    with pytest.raises(ConfigError, match="rounds"):
        prog_bench(rounds=1)


def test_cli_json_has_the_figures(perfkit_module):
    """``python -m perfkit prog-bench --json`` (forked: ``tests/script_forks.py``)."""
    out = perfkit_module.run(["prog-bench", "--direction", "dl", "--frame-size", "256", "--rounds", "3",
                              "--repeat", "2000", "--json"])
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    for key in ("ns_per_packet", "baseline_ns_per_packet", "net_ns_per_packet", "ratio", "path_verified"):
        assert key in d
    assert d["path_verified"] is True
    assert d["wire_frame_size"] == 256  # downlink offers the user frame itself
