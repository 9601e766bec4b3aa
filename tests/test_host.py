"""``perfkit host check``: real measurements on this machine (a probe on every core), the rate
formula and the verdict on synthetic gaps, and the probe's gap counts against a busy loop."""
from __future__ import annotations

import bisect
import json
import math
import os
import random
import shutil
import signal
import subprocess

import pytest

from perfkit.cli import main
from perfkit.errors import ConfigError
from perfkit.host.check import allowed_cpus, check_host
from perfkit.host.gaps import (GAP_STEPS, LONG_US, PERIOD_US, THRESHOLD_US, CoreCheck, expected_overflows,
                               speed_figures, stall_limited_rate)
from perfkit.host.packetthreads import packet_threads, perfkit_interfaces
from perfkit.host.verdict import verdict

R = 256


# -- the rate formula and the verdict, on synthetic gaps -----------------------------------------
def test_rate_formula_on_synthetic_gaps():
    gaps = [4000.0, 2000.0, 1000.0, 500.0, 300.0]
    # 10 s measured, 2 s trials: fewer than one per trial = fewer than 5 gaps longer than R / r
    r, bound = stall_limited_rate(gaps, 10.0, ring_frames=R, trial_seconds=2.0)
    assert not bound and r == pytest.approx(R / 300e-6)
    assert expected_overflows(gaps, 10.0, r, ring_frames=R, trial_seconds=2.0) == pytest.approx(0.8)
    assert expected_overflows(gaps, 10.0, r * 1.001, ring_frames=R, trial_seconds=2.0) == pytest.approx(1.0)
    # 10 s trials: the longest gap alone is one per trial
    assert stall_limited_rate(gaps, 10.0, ring_frames=R, trial_seconds=10.0) == (pytest.approx(64_000), False)
    # one trial in ten
    assert stall_limited_rate(gaps, 10.0, per_trial=0.1, ring_frames=R, trial_seconds=2.0)[0] == pytest.approx(64_000)
    # fewer gaps than a trial's share: nothing the timer resolves limits the rate
    assert stall_limited_rate([4000.0], 10.0, ring_frames=R, trial_seconds=2.0) == (pytest.approx(R / 100e-6), True)
    assert stall_limited_rate([], 10.0, ring_frames=R) == (pytest.approx(2.56e6), True)
    # a bigger ring lasts longer
    assert stall_limited_rate(gaps, 10.0, ring_frames=2 * R, trial_seconds=2.0)[0] == pytest.approx(2 * R / 300e-6)


def test_the_rate_is_the_highest_with_fewer_overflows_than_asked():
    rng = random.Random(11)
    for _ in range(300):
        gaps = [THRESHOLD_US + rng.expovariate(1 / 400) for _ in range(rng.randrange(0, 60))]
        seconds, trial = rng.choice([2.0, 10.0, 60.0]), rng.choice([0.5, 1.0, 2.0, 10.0])
        per_trial = rng.choice([0.1, 1.0, 3.0])
        kw = dict(ring_frames=R, trial_seconds=trial)
        r, bound = stall_limited_rate(gaps, seconds, per_trial=per_trial, **kw)
        assert expected_overflows(gaps, seconds, r, **kw) < per_trial
        if not bound:
            assert expected_overflows(gaps, seconds, r * (1 + 1e-9), **kw) >= per_trial
        rates = sorted(rng.uniform(1e4, 3e6) for _ in range(20))
        e = [expected_overflows(gaps, seconds, x, **kw) for x in rates]
        assert e == sorted(e)  # more overflows the faster the traffic


def _cores(**gaps: list[float]) -> dict[int, CoreCheck]:
    return {int(c[3:]): CoreCheck.from_gaps(int(c[3:]), 10.0, g, trial_seconds=2.0, ring_frames=R)
            for c, g in gaps.items()}


def test_verdict_on_synthetic_hosts():
    quiet = verdict(_cores(cpu0=[], cpu1=[150.0]), trial_seconds=2.0, ring_frames=R)
    assert quiet.fit and quiet.bound and quiet.text.startswith("fit for zero-loss")
    assert quiet.one_per_trial_pps == pytest.approx(2.56e6)

    vm = verdict(_cores(cpu0=[200.0], cpu1=[4000.0, 1600.0, 1500.0, 600.0, 300.0, 200.0, 150.0]),
                 trial_seconds=2.0, ring_frames=R)
    assert not vm.fit and not vm.bound and vm.cpu == 1
    assert vm.one_per_trial_pps == pytest.approx(R / 300e-6)   # the 5th longest of 10 s, 2 s trials
    assert vm.clean_pps == pytest.approx(64_000)               # the longest
    assert vm.text.startswith("NOT fit") and "CPU 1" in vm.text and "disturbed" in vm.text

    # many short gaps: they overflow the ring only above 1.7 Mpps
    busy = verdict(_cores(cpu0=[150.0] * 100), trial_seconds=2.0, ring_frames=R)
    assert busy.fit and not busy.bound and busy.text.startswith("fit for zero-loss measurements at 1 Mpps")
    assert busy.clean_pps == pytest.approx(R / 150e-6)

    # faster than the timer resolves: no claim
    beyond = verdict(_cores(cpu0=[]), fit_pps=3e6, trial_seconds=2.0, ring_frames=R)
    assert not beyond.fit and beyond.text.startswith("cannot tell")


def test_speed_figures_are_the_median_and_the_relative_spread():
    assert speed_figures([10.0, 11.0]) == (None, None)  # too few windows to tell
    median, spread = speed_figures([10.0] * 5 + [20.0] * 5)
    assert median == 15.0 and spread == pytest.approx((20.0 - 10.0) / 15.0)
    assert speed_figures([12.0] * 8) == (12.0, 0.0)


def test_core_figures_from_gaps():
    cc = CoreCheck.from_gaps(3, 30.0, [50.0, 100.0, 101.0, 1500.0, 250.5], steal_us=3000.0)
    assert cc.gaps_100us == 3 and cc.gaps_1ms == 1 and cc.longest_us == 1500.0
    assert cc.gaps_us == [1500.0, 250.5, 101.0] and cc.stalled_us == pytest.approx(1851.5)
    assert cc.per_min_100us == pytest.approx(6.0) and cc.per_min_1ms == pytest.approx(2.0)
    assert cc.steal_us_per_s == pytest.approx(100.0) and cc.steal_pct == pytest.approx(0.01)
    assert cc.gaps_over == {100: 3, 250: 2, 500: 1, 1000: 1, 2000: 0, 5000: 0, 10000: 0}


# -- a real check ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def measured():
    return check_host(2.0)


def test_check_measures_every_core(measured):
    hc = measured
    assert sorted(hc.cores) == allowed_cpus()
    assert hc.seconds >= 2.0 and hc.window_ns[1] - hc.window_ns[0] == pytest.approx(hc.seconds * 1e9)
    for c, cc in hc.cores.items():
        assert cc.cpu == c and cc.seconds == hc.seconds
        assert cc.ticks > 0.2 * hc.seconds * 1e6 / PERIOD_US, "the timer did not run"
        assert cc.lost_events == 0
        assert all(g > THRESHOLD_US for g in cc.gaps_us) and len(cc.gap_ends_ns) == len(cc.gaps_us)
        assert all(hc.window_ns[0] < e <= hc.window_ns[1] for e in cc.gap_ends_ns)
        assert cc.gaps_1ms <= cc.gaps_100us == len(cc.gaps_us)
        assert cc.gaps_over[100] == cc.gaps_100us and cc.gaps_over[1000] == cc.gaps_1ms
        assert [cc.gaps_over[t] for t in GAP_STEPS] == sorted(cc.gaps_over.values(), reverse=True)
        assert cc.longest_us == max(cc.gaps_us, default=0.0)
        assert cc.longest_us > (LONG_US if cc.gaps_1ms else THRESHOLD_US if cc.gaps_100us else -1)
        assert cc.stalled_us == pytest.approx(sum(cc.gaps_us)) and cc.stalled_us >= cc.longest_us
        assert cc.steal_us >= 0 and 0 <= cc.steal_pct <= 100 and cc.proc_steal_us >= 0
        assert cc.clean_pps <= cc.one_per_trial_pps
        e = list(cc.expected_per_trial.values())
        assert e == sorted(e)
        # 2 s of 0.25 s windows: the speed probe ran on every core (a step is a few ns)
        assert 1.0 < cc.speed_ns_per_step < 200.0 and 0.0 <= cc.speed_spread < 2.0


def test_check_reads_the_host_and_ends_with_a_verdict(measured):
    hc = measured
    assert hc.kernel == os.uname().release and len(hc.load_average) == 3
    assert (hc.hypervisor == "none") == (not hc.vm)
    assert sorted(hc.governors) == hc.cpus_online and set(hc.cores) <= set(hc.cpus_online)
    assert all(set(i.effective) <= set(hc.cpus_online) and i.name for i in hc.irqs)
    v = hc.verdict
    assert v.cpu in hc.cores and v.text
    assert v.fit == (v.clean_pps >= v.fit_pps)
    assert v.one_per_trial_pps == min(c.one_per_trial_pps for c in hc.cores.values())
    assert v.clean_pps == min(c.clean_pps for c in hc.cores.values())
    if hc.vm:
        assert any("VM" in n for n in v.notes)


def test_to_dict_is_json_and_summary_one_line(measured):
    hc = measured
    d = json.loads(json.dumps(hc.to_dict()))
    assert set(d["cores"]) == {str(c) for c in hc.cores}
    for c, cc in hc.cores.items():
        got = d["cores"][str(c)]
        assert got["gaps_100us"] == cc.gaps_100us and got["gaps_1ms"] == cc.gaps_1ms
        assert got["steal_pct"] == pytest.approx(cc.steal_pct, abs=1e-3)
        assert "gaps_us" not in got and len(got["longest_gaps_us"]) == min(50, cc.gaps_100us)
    assert d["verdict"]["text"] == hc.verdict.text and d["summary"] == hc.summary()
    s = hc.summary()
    assert "\n" not in s and s.startswith("host: ") and f"CPU {hc.verdict.cpu}:" in s and "Mpps" in s


def test_packet_threads_and_perfkit_interfaces():
    from perfkit.testbed import netns
    from perfkit.testbed.topology import Testbed

    cpu = allowed_cpus()[-1]
    with Testbed() as tb:
        for port in (tb.a, tb.b):  # veth runs NAPI with GRO on (or an XDP program attached)
            netns.run(port.ns, "ethtool", "-K", port.dev, "gro", "on")
        (rt,) = tb.pin_napi(tb.a, {cpu}, realtime=True)
        (normal,) = tb.pin_napi(tb.b, {cpu})
        threads = {t.pid: t for t in packet_threads()}
        ifs = {i.dev: i for i in perfkit_interfaces(list(threads.values())) if tb.rid in i.ns}
    assert threads[rt].cpus == [cpu] and (threads[rt].policy, threads[rt].priority) == ("FIFO", 50)
    assert threads[normal].policy == "OTHER" and threads[rt].name.startswith(f"napi/{tb.a.dev}-")
    assert ifs[tb.a.dev].threaded and ifs[tb.a.dev].napi_threads == [rt] and ifs[tb.a.dev].ns == tb.dut_ns
    assert ifs[tb.p0.dev].threaded is False and ifs[tb.p0.dev].napi_threads == []
    assert set(ifs) == {tb.a.dev, tb.b.dev, tb.p0.dev, tb.p1.dev, tb.anchor.dev, tb.anchor.dev[:-1] + "h"}


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(seconds=0), dict(seconds=-1), dict(seconds=math.nan), dict(seconds=601),
                                dict(cpus=[99]), dict(cpus=[]), dict(cpus=[0, 0]), dict(trial_seconds=0),
                                dict(fit_pps=0), dict(ring_frames=0)])
def test_bad_arguments_are_refused(kw):
    field = next(iter(kw))
    with pytest.raises(ConfigError) as err:
        check_host(**{"seconds": 0.1, **kw})
    assert err.value.field == field


@pytest.mark.parametrize("argv, option", [(["--seconds", "0"], "--seconds"), (["--seconds", "x"], "--seconds"),
                                          (["--cpus", "99"], "--cpus"), (["--cpus", "0,"], "--cpus"),
                                          (["--trial-seconds", "-2"], "--trial-seconds"),
                                          (["--fit-rate", "40%"], "--fit-rate")])
def test_cli_refuses_bad_input_in_one_line(capsys, argv, option):
    assert main(["host", "check", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"perfkit: error: {option}: ") and "allowed" in err


def test_cli_json(capsys):
    cpu = allowed_cpus()[-1]
    assert main(["host", "check", "--seconds", "0.5", "--cpus", str(cpu), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert list(d["cores"]) == [str(cpu)] and d["verdict"]["cpu"] == cpu and d["summary"].startswith("host: ")


# -- the probe against a busy loop -----------------------------------------------------------------
#: Spins on one CPU (at a nice level, memory locked) reading CLOCK_MONOTONIC from a line on stdin until
#: SIGUSR1, and records each time it did not get to read it for more than 20 µs: with its
#: context-switch count unchanged, the CPU was taken (a gap); changed, another thread ran (the loop
#: was preempted; the probe's timer is not delayed by that).
BUSY_LOOP = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#define MAX (1 << 18)
static uint64_t rec[MAX][3];
static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = sig;
}

static uint64_t now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000ull + t.tv_nsec;
}

static long switches(void)
{
	struct rusage r;

	getrusage(RUSAGE_THREAD, &r);
	return r.ru_nvcsw + r.ru_nivcsw;
}

/* usage: busy CPU NICE */
int main(int argc, char **argv)
{
	cpu_set_t set;
	long sw;
	uint64_t start, last;
	int n = 0;

	CPU_ZERO(&set);
	CPU_SET(atoi(argv[1]), &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		return 1;
	setpriority(PRIO_PROCESS, 0, atoi(argv[2]));
	mlockall(MCL_CURRENT | MCL_FUTURE);
	signal(SIGUSR1, on_signal);
	printf("ready\n");
	fflush(stdout);
	getchar();
	sw = switches();
	start = last = now();
	while (!stop) {
		uint64_t t = now();

		if (t - last > 20000 && n < MAX) {
			long s = switches();

			rec[n][0] = last;
			rec[n][1] = t;
			rec[n][2] = s != sw;
			sw = s;
			n++;
		}
		last = t;
	}
	printf("{\"start\": %lu, \"end\": %lu, \"full\": %d, \"gaps\": [", start, last, n == MAX);
	for (int i = 0, first = 1; i < n; i++)
		if (!rec[i][2]) {
			printf("%s[%lu, %lu]", first ? "" : ", ", rec[i][0], rec[i][1]);
			first = 0;
		}
	printf("], \"preempted\": [");
	for (int i = 0, first = 1; i < n; i++)
		if (rec[i][2]) {
			printf("%s[%lu, %lu]", first ? "" : ", ", rec[i][0], rec[i][1]);
			first = 0;
		}
	printf("]}\n");
	return 0;
}
"""


@pytest.fixture(scope="module")
def busy_loop(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        pytest.skip("needs a C compiler for the busy loop")
    d = tmp_path_factory.mktemp("busy")
    (d / "busy.c").write_text(BUSY_LOOP)
    subprocess.run([cc, "-O2", "-o", str(d / "busy"), str(d / "busy.c")], check=True)
    return str(d / "busy")


def _agree(a: int, b: int) -> bool:
    """Within a factor of 2, or both small (fewer than 3: a count that cannot make a ratio)."""
    return max(a, b) < 3 or max(a, b) <= 2 * min(a, b)


def _side_by_side(busy_loop: str, cpu: int, seconds: float) -> tuple[dict[int, tuple[int, int]], str]:
    """Gap counts of the probe and of the busy loop on ``cpu`` over the same ``seconds``:
    ({threshold [µs]: (probe, loop)}, a line that says what was seen)."""
    others = set(allowed_cpus()) - {cpu}
    loop = subprocess.Popen([busy_loop, str(cpu), "0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, others)  # this process must not wait behind the loop
    try:
        assert loop.stdout.readline() == "ready\n"
        loop.stdin.write("go\n")
        loop.stdin.flush()
        hc = check_host(seconds, [cpu])
        loop.send_signal(signal.SIGUSR1)
        out = json.loads(loop.stdout.readline())
    finally:
        os.sched_setaffinity(0, saved)
        loop.kill()
        loop.wait()
    assert not out["full"]
    lo, hi = max(out["start"], hc.window_ns[0]), min(out["end"], hc.window_ns[1])
    assert hi - lo > 0.8 * seconds * 1e9, "the loop and the check did not run together"
    preempted = out["preempted"]
    starts = [a for a, _ in preempted]

    def loop_ran(t: int) -> bool:
        i = bisect.bisect_right(starts, t) - 1
        return i < 0 or preempted[i][1] < t

    cc = hc.cores[cpu]
    probe = [g for g, end in zip(cc.gaps_us, cc.gap_ends_ns) if lo < end <= hi and loop_ran(end)]
    busy = [(b - a) / 1e3 for a, b in out["gaps"] if lo < b <= hi]
    counts = {t: (sum(g > t for g in probe), sum(g > t for g in busy)) for t in (100, 250, 500, 1000)}
    held = 1 - sum(min(b, hi) - max(a, lo) for a, b in preempted if b > lo and a < hi) / (hi - lo)
    line = (f"CPU {cpu}, {(hi - lo) / 1e9:.1f} s, the loop held the CPU {held:.0%} of it; gaps (probe, busy loop): "
            + ", ".join(f"> {t} µs: {p}, {b}" for t, (p, b) in counts.items())
            + f"; longest {max(probe, default=0):.0f}, {max(busy, default=0):.0f} µs")
    return counts, line


def test_gap_counts_agree_with_a_busy_loop(busy_loop):
    """The issue's check: the probe's gap counts agree with a plain busy loop on the same core, at
    the same time, to within a factor of 2.

    The loop sees nothing while another thread has the CPU, so the probe's gaps that end in such a
    time are left out (among them the timer's softirq waiting for ksoftirqd, a thread, when other
    work keeps softirqs busy). Other tests' load can also take the loop's CPU for milliseconds
    without a context switch while the timer keeps ticking (work in interrupt context that serves
    the timer's softirq as it goes): up to 3 attempts of 5 s, the first that agrees passes.
    """
    cpus = allowed_cpus()
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    seen = []
    for _ in range(3):
        counts, line = _side_by_side(busy_loop, cpus[-1], 5.0)
        seen.append(line)
        print("\n" + line)
        if all(_agree(*counts[t]) for t in (100, 1000)):
            return
    pytest.fail("probe and busy loop disagree by more than a factor of 2:\n" + "\n".join(seen))
