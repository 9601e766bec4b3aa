"""Shielding the DUT cores (``perfkit.testbed.shield``): other tasks move off them and get their
CPUs back on close, after a crash by ``perfkit clean``; tasks bound to the DUT cores stay."""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from typing import Iterator

import pytest

from perfkit.cli import main
from perfkit.generators import create
from perfkit.generators.xdpcores import allocate_cores  # its CPUs are read at import: before any shield here moves us
from perfkit.scenario import Scenario
from perfkit.testbed import shield
from perfkit.testbed.shield import Shield

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
ALL = os.sched_getaffinity(0)
DUT = max(ALL)


@contextlib.contextmanager
def sleeper(cpus: set[int] | None = None) -> Iterator[int]:
    """A process that sleeps (on ``cpus``, default: every CPU this test may use); yields its pid."""
    proc = subprocess.Popen(["sleep", "120"], preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_shield_moves_other_tasks_off_the_dut_core_and_gives_them_back():
    with sleeper() as free, sleeper({DUT}) as bound:
        with Shield("5e1d01", frozenset({DUT})) as sh:
            assert os.sched_getaffinity(free) == ALL - {DUT}
            assert os.sched_getaffinity(bound) == {DUT}                  # bound to the DUT core alone: stays
            assert os.sched_getaffinity(0) == ALL                        # this process is not moved
            rec = json.loads(shield.record_path("5e1d01").read_text())   # on disk before anything moved
            assert free in [m["tid"] for m in rec["moved"]] and bound not in [m["tid"] for m in rec["moved"]]
            assert free in sh.moved
        assert os.sched_getaffinity(free) == ALL
        assert not shield.record_path("5e1d01").exists()


def test_perfkit_clean_gives_back_what_a_killed_owners_shield_moved():
    code = (f"import time; from perfkit.testbed.shield import Shield; Shield('5e1d02', frozenset({{{DUT}}})); "
            "print('up', flush=True); time.sleep(120)")
    with sleeper() as free:
        owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            assert owner.stdout.readline().strip() == "up"
            assert os.sched_getaffinity(free) == ALL - {DUT}
        finally:
            owner.send_signal(signal.SIGKILL)
            owner.wait()
        assert os.sched_getaffinity(free) == ALL - {DUT}                 # nobody gave it back
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["clean", "--json"]) == 0
        assert any(line.startswith("shield 5e1d02") for line in json.loads(buf.getvalue())), buf.getvalue()
        assert os.sched_getaffinity(free) == ALL
        assert not shield.record_path("5e1d02").exists()


def test_perfkit_clean_leaves_a_live_owners_shield_alone():
    with sleeper() as free, Shield("5e1d03", frozenset({DUT})):
        with contextlib.redirect_stdout(io.StringIO()):
            main(["clean", "--json"])
        assert os.sched_getaffinity(free) == ALL - {DUT}
        assert shield.record_path("5e1d03").exists()


def test_the_generator_shields_its_dut_core_while_it_lives():
    with sleeper() as free:
        with create("xdp", Scenario(frame_size=64, flows=1, params={"direction": "ul"}), shield=True) as gen:
            assert (gen.dut_cores, gen.tester_cores, gen.shared) == allocate_cores(1) == ([DUT], sorted(ALL - {DUT}), False)
            assert os.sched_getaffinity(free) == set(gen.tester_cores)
            r = gen.measure(100_000, 0.2)
            assert r.rx_packets > 0
        assert os.sched_getaffinity(free) == ALL


def test_a_task_started_after_the_shield_is_moved_before_the_next_trial():
    with create("xdp", Scenario(frame_size=64, flows=1, params={"direction": "ul"}), shield=True) as gen:
        with sleeper(ALL) as late:                                        # asks for every CPU itself
            assert os.sched_getaffinity(late) == ALL
            gen.measure(100_000, 0.2)
            assert os.sched_getaffinity(late) == set(gen.tester_cores)
            rec = json.loads(shield.record_path(gen.shield.testbed_id).read_text())
            assert late in [m["tid"] for m in rec["moved"]]               # on disk, to be given back
            os.sched_setaffinity(late, ALL)                               # asks for them again
            gen.measure(100_000, 0.2)
            assert os.sched_getaffinity(late) == set(gen.tester_cores)
        stamp = shield.record_path(gen.shield.testbed_id).stat().st_mtime_ns
        assert gen.shield.refresh() == 0                                  # nothing new: nothing moves,
        assert shield.record_path(gen.shield.testbed_id).stat().st_mtime_ns == stamp  # nor is rewritten


def test_shield_must_be_a_bool():
    from perfkit.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        create("xdp", Scenario(frame_size=64, flows=1, params={"direction": "ul"}), shield="yes")
    assert err.value.field == "shield"
