"""perfkit.host.cpustat on the real /proc: per-CPU modes, busy fractions, per-thread accounting."""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest

from perfkit.host import cpustat
from perfkit.errors import ConfigError
from tests.metrics_fixtures import BURNER_NAME, burner

CPUS = sorted(os.sched_getaffinity(0))


def test_snapshot_has_every_cpu_and_mode_and_counters_only_grow():
    a = cpustat.snapshot()
    time.sleep(0.3)
    b = cpustat.snapshot()
    online = {int(p.name[3:]) for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*")
              if not (p / "online").exists() or (p / "online").read_text().strip() == "1"}
    assert set(a.cpus) == online
    for cpu in a.cpus:
        assert set(a.ticks[cpu]) == set(cpustat.MODES)
        assert all(b.ticks[cpu][m] >= a.ticks[cpu][m] for m in cpustat.MODES)
    assert b.time > a.time and b.monotonic > a.monotonic


def test_delta_frame_is_tidy_and_fractions_sum_to_one():
    a = cpustat.snapshot()
    time.sleep(1.0)
    d = cpustat.delta(a, cpustat.snapshot())
    f = d.frame()
    assert list(f.columns) == ["cpu", "mode", "seconds", "fraction", "busy"]
    assert len(f) == len(d.cpus) * len(cpustat.MODES)
    assert set(f[~f["busy"]]["mode"]) == {"idle", "iowait"}
    for cpu, g in f.groupby("cpu"):
        assert g["fraction"].sum() == pytest.approx(1.0)
        # each CPU accounted about the wall-clock window (ticks are 10 ms)
        assert g["seconds"].sum() == pytest.approx(d.wall, abs=0.1)
        busy = 1 - g[g["mode"].isin(["idle", "iowait"])]["fraction"].sum()
        assert d.busy([cpu])[cpu] == pytest.approx(busy)


def test_pinned_busy_loop_makes_its_cpu_busy():
    cpu = CPUS[-1]
    with burner(cpu):
        time.sleep(0.5)
        a = cpustat.snapshot()
        time.sleep(2.0)
        b = cpustat.snapshot()
    d = cpustat.delta(a, b)
    assert d.busy([cpu])[cpu] > 0.9
    assert d.fraction(cpu, "user") > 0.8        # a Python loop runs in user mode
    assert d.fraction(cpu, "us") == d.fraction(cpu, "user")


def test_thread_accounting_of_a_named_busy_process():
    """The per-thread path (used for NAPI / cpumap kthreads) measured on a real busy thread."""
    with burner(CPUS[-1]) as proc:
        time.sleep(0.5)
        assert cpustat.find_kthreads(BURNER_NAME) == []         # not a kernel thread
        found = cpustat.find_threads(BURNER_NAME, kernel_only=False)
        assert [t.pid for t in found] == [proc.pid]
        assert found[0].cpu == CPUS[-1] and not found[0].kernel
        a = cpustat.snapshot(kthreads=BURNER_NAME, kernel_only=False)
        time.sleep(2.0)
        b = cpustat.snapshot(kthreads=BURNER_NAME, kernel_only=False)
    d = cpustat.delta(a, b)
    busy = d.kthread_busy()
    assert list(busy) == [BURNER_NAME]
    assert 0.85 < busy[BURNER_NAME] <= 1.05
    row = d.kthread_frame().iloc[0]
    assert row["pid"] == proc.pid and row["utime_s"] > row["stime_s"]


def test_kernel_threads_by_pattern():
    ksoftirqd = cpustat.find_kthreads("ksoftirqd/*")
    assert {t.name for t in ksoftirqd} >= {f"ksoftirqd/{c}" for c in CPUS}
    assert all(t.kernel for t in ksoftirqd)
    both = cpustat.find_kthreads(["ksoftirqd/*", "migration/*"])
    assert len(both) > len(ksoftirqd)
    a = cpustat.snapshot(kthreads=["ksoftirqd/*", "napi/dut-*", "cpumap/*"])
    time.sleep(0.3)
    d = cpustat.delta(a, cpustat.snapshot(kthreads=["ksoftirqd/*", "napi/dut-*", "cpumap/*"]))
    busy = d.kthread_busy()
    assert {f"ksoftirqd/{c}" for c in CPUS} <= set(busy)
    assert all(0.0 <= v <= 1.05 for v in busy.values())


def test_thread_started_inside_the_window_counts_from_its_start():
    a = cpustat.snapshot(kthreads=BURNER_NAME, kernel_only=False)
    assert a.threads == {}
    with burner(CPUS[-1]):
        time.sleep(1.5)
        b = cpustat.snapshot(kthreads=BURNER_NAME, kernel_only=False)
    busy = cpustat.delta(a, b).kthread_busy()
    assert list(busy) == [BURNER_NAME]
    assert busy[BURNER_NAME] > 0.5          # ran ~1.4 s of the ~1.5 s window
    # a thread seen only at the end that is older than the first snapshot has unknown times: left out
    old = {pid: cpustat.ThreadTimes(**{**t.__dict__, "start": 0}) for pid, t in b.threads.items()}
    assert cpustat.delta(a, cpustat.CpuSnapshot(**{**b.__dict__, "threads": old})).kthread_busy() == {}


def test_zero_length_window_gives_nan_not_a_number_pulled_from_thin_air():
    a = cpustat.snapshot()
    d = cpustat.delta(a, a)
    assert all(math.isnan(v) for v in d.busy().values())


def test_bad_input_names_field_value_and_allowed():
    a = cpustat.snapshot()
    d = cpustat.delta(a, cpustat.snapshot())
    with pytest.raises(ConfigError) as e:
        d.busy([4096])
    assert e.value.field == "cpu" and e.value.value == 4096 and "both snapshots" in str(e.value)
    with pytest.raises(ConfigError) as e:
        cpustat.normalize_mode("busy")
    assert "mode: 'busy' is not allowed; allowed: user, nice, system" in str(e.value)
    with pytest.raises(ConfigError) as e:
        cpustat.find_kthreads("")
    assert e.value.field == "kthread patterns"
    b = cpustat.snapshot()
    with pytest.raises(ConfigError):
        cpustat.delta(b, a)


def test_proc_stat_parser_on_an_older_kernel_layout(tmp_path):
    (tmp_path / "stat").write_text(
        "cpu  10 0 20 300 4 0 1\n"
        "cpu0 5 0 10 150 2 0 1\n"
        "cpu3 5 0 10 150 2 0 0\n"
        "intr 12345 0 0\n"
        "cpu9 1 1 1 1 1 1 1 1\n")      # not a CPU line block any more: ignored
    ticks = cpustat.read_proc_stat(tmp_path)
    assert sorted(ticks) == [0, 3]
    assert ticks[0] == {"user": 5, "nice": 0, "system": 10, "idle": 150, "iowait": 2, "irq": 0,
                        "softirq": 1, "steal": 0}
