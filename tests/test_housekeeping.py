"""perfkit's own work stays off the DUT cores, and every trial says who else ran there.

Real processes, the real testbed and the real scheduler: a busy child of this process is perfkit's
own (``perfkit.host.housekeeping.own_pids``) and must leave the DUT core while a testbed lives; a busy
process that is not perfkit's (an orphan, re-parented to init) is left where it is and shows up as
``dut_others_share``; a child that pins itself back onto the DUT core during a trial shows up as
``dut_perfkit_share`` (the measurement can fail what the confinement promises).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfkit.generators import create
from perfkit.host.housekeeping import own_pids
from perfkit.scenario import Scenario

SPIN = "import time\nwhile True: pass\n"


def _spinner(*, delay_pin: tuple[float, int] | None = None) -> subprocess.Popen:
    """A busy child of this process (perfkit's own); with ``delay_pin`` (seconds, cpu) it pins itself
    to that CPU that long after it says ``ready`` (read that line before timing anything)."""
    if delay_pin is None:
        return subprocess.Popen([sys.executable, "-c", SPIN])
    code = (f"import os, time\nprint('ready', flush=True)\ntime.sleep({delay_pin[0]})\n"
            f"os.sched_setaffinity(0, {{{delay_pin[1]}}})\n" + SPIN)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def _orphan_spinner(cpu: int, pidfile: Path) -> int:
    """A busy process pinned to ``cpu`` that is nobody's child here (its parent exited at once)."""
    subprocess.run(["sh", "-c", f"taskset -c {cpu} {sys.executable} -c '{SPIN}' >/dev/null 2>&1 & echo $! > {pidfile}"],
                   check=True)
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            return int(pidfile.read_text())
        time.sleep(0.01)
    raise AssertionError("the orphan did not start")


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def test_own_pids_are_this_process_and_its_children_not_an_orphan(tmp_path):
    child = _spinner()
    orphan = _orphan_spinner(0, tmp_path / "orphan.pid")
    try:
        own = own_pids()
        assert os.getpid() in own and child.pid in own
        assert orphan not in own and os.getppid() not in own  # pytest's parent is not perfkit
    finally:
        child.kill()
        _kill(orphan)


needs_two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a DUT core of its own")


@needs_two_cpus
def test_a_testbed_moves_perfkit_off_the_dut_core_and_counts_what_else_ran_there(tmp_path):
    child = _spinner()           # perfkit's own, allowed every CPU
    orphan = None
    try:
        before = os.sched_getaffinity(child.pid)
        with create("xdp", Scenario(frame_size=128, params={"direction": "ul"})) as g:
            dut = set(g.dut_cores)
            assert dut <= before
            assert not os.sched_getaffinity(child.pid) & dut      # moved off while the testbed lives
            assert not os.sched_getaffinity(os.getpid()) & dut
            clean = g.measure(50_000, 1.0)
            assert set(clean.dut_core_time) == {str(c) for c in dut}
            assert clean.dut_perfkit_share is not None and clean.dut_perfkit_share <= 0.01
            orphan = _orphan_spinner(min(dut), tmp_path / "orphan.pid")   # someone else's, on the DUT core
            busy = g.measure(50_000, 1.0)
            assert busy.dut_others_share is not None and busy.dut_others_share >= 0.3
            assert busy.dut_perfkit_share <= 0.01
            assert abs(sum(busy.dut_core_time[str(min(dut))].values()) - 1) < 0.02
        assert os.sched_getaffinity(child.pid) == before           # given back
    finally:
        child.kill()
        if orphan:
            _kill(orphan)


@needs_two_cpus
def test_perfkit_work_that_lands_on_the_dut_core_is_counted_as_perfkits():
    with create("xdp", Scenario(frame_size=128, params={"direction": "ul"})) as g:
        cpu = min(g.dut_cores)
        # starts before the trial (so it is perfkit's and confined), then pins itself back 0.3 s in
        intruder = _spinner(delay_pin=(0.3, cpu))
        try:
            trial = g.measure(50_000, 2.0)
        finally:
            intruder.kill()
    assert trial.dut_perfkit_share is not None and trial.dut_perfkit_share >= 0.2
    assert trial.dut_core_time[str(cpu)]["perfkit"] >= 0.2


def test_the_report_sums_up_who_ran_on_the_dut_cores(tmp_path):
    from perfkit.analysis import dutcores, load_run
    from perfkit.store import RunStore
    from perfkit.trial import TrialResult

    store = RunStore.create("shares", tmp_path)
    for i, (mine, others) in enumerate([(0.0, 0.02), (0.004, 0.10), (0.3, 0.0)]):
        t = TrialResult.for_scenario(Scenario(frame_size=64, params={"direction": "ul"}), wire_frame_size=100,
                                     dut_cores=1, generator="xdp", duration=1.0, intended_pps=1e5,
                                     intended_packets=100_000, tx_packets=100_000, rx_packets=100_000)
        t.dut_core_time = {"1": {"packet": 0.5, "perfkit": mine, "other": others, "idle": 0.5 - mine - others}}
        t.dut_perfkit_share, t.dut_others_share = mine, others
        store.append(t)
    t = TrialResult.for_scenario(Scenario(frame_size=64, params={"direction": "ul"}), wire_frame_size=100,
                                 dut_cores=1, generator="sim", duration=1.0, intended_pps=1e5,
                                 intended_packets=100_000, tx_packets=100_000, rx_packets=100_000)
    store.append(t)                                   # not measured (a simulated DUT)
    run = load_run("shares", tmp_path)
    frame = dutcores.core_time_frame(run)
    assert len(frame) == 3 and set(frame["cpu"]) == {1} and frame["perfkit"].max() == pytest.approx(0.3)
    table = dutcores.core_share_table(run)
    row = table.iloc[0]
    assert row["trials"] == 3 and row["perfkit_max_pct"] == pytest.approx(30.0)
    assert row["others_median_pct"] == pytest.approx(2.0) and row["perfkit_median_pct"] == pytest.approx(0.4)
    note = dutcores.core_share_note(run)
    assert "3 of 4 trials" in note and "at most 30.00 %" in note
