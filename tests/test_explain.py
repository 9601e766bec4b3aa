"""perfkit.explain: cost per function in ns per packet, the gap between two sets of trials decomposed,
its flame graph, ``perfkit explain``; rules on constructed folded stacks and runs, and the known
truth on the real testbed (the calibrated DUT at N against 2N)."""
from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest

from perfkit.analysis import load_run
from perfkit.cli import main
from perfkit.explain import top_movers
from perfkit.explain.cost import TrialProfile, cost_frame, function_costs, kind_costs, share_sd
from perfkit.explain.flame import ns_diff_flamegraph_svg, ns_diff_folded
from perfkit.explain.gap import explain
from perfkit.explain.kinds import function_kind
from perfkit.explain.sets import TrialSet, all_knob_pairs, profiled, variant_pairs
from perfkit.perf.store import write_folded
from perfkit.perfci.comment import ab_comment
from perfkit.store import RunStore
from perfkit.trial import TrialResult
from tests.conftest import ROOT

PROG = "bpf_prog_1234567890abcdef_xdp_calib"
PATH = "napi/veth-dut0-8193;ret_from_fork_[k];kthread_[k];napi_threaded_poll_[k];veth_poll_[k];veth_xdp_rcv_[k]"


def folded(prog: int, csum: int = 0, veth: int = 300, redirect: int = 200, idle: int = 500, other: int = 100) -> str:
    """A DUT core's stacks: the program, a checksum under it, the driver, the redirect, idle time and
    another task's samples (the last two are not the DUT's cost)."""
    lines = [f"{PATH};{PROG}_[k] {prog}", f"{PATH} {veth}", f"{PATH};xdp_do_redirect_[k] {redirect}",
             f"swapper;cpu_startup_entry_[k];default_idle_[k] {idle}", f"python3;[user] {other}"]
    if csum:
        lines.append(f"{PATH};{PROG}_[k];bpf_csum_diff_[k];csum_partial_[k] {csum}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("symbol, kind", [
    (f"{PROG}_[k]", "program"), ("bpf_prog_0000000000000000_work_step", "program"),
    ("bpf_xdp_adjust_head_[k]", "helper"), ("htab_map_lookup_elem", "helper"), ("lookup_nulls_elem_raw", "helper"), ("bpf_loop", "helper"),
    ("veth_xdp_rcv_one_[k]", "driver"), ("napi_gro_receive", "gro"), ("udp4_gro_receive", "gro"),
    ("__cgroup_account_cputime", "other"), ("xdp_do_redirect", "stack"), ("__netif_receive_skb_core", "stack"),
    ("csum_partial", "stack"), ("__schedule", "scheduler"), ("enqueue_task_fair", "scheduler"),
    ("memcpy_orig", "other"), ("[user]", "other"),
])
def test_functions_are_grouped_by_kind(symbol, kind):
    assert function_kind(symbol) == kind


def test_self_costs_of_a_trial_add_up_to_its_measured_cost_without_idle_or_other_tasks():
    p = TrialProfile("t", 1000.0, folded(prog=400, csum=100))   # 1000 packet-thread samples
    df = cost_frame([p])
    assert df["packet_samples"].unique().tolist() == [1000]
    assert df["self_ns"].sum() == pytest.approx(1000.0)
    row = df.set_index("symbol").loc["bpf_prog_0000000000000000_xdp_calib"]   # tags zeroed
    assert (row["self_ns"], row["inclusive_ns"]) == pytest.approx((400.0, 500.0))
    assert row["self_ns_sd"] == pytest.approx(1000 * math.sqrt(0.4 * 0.6 / 1000))
    assert "default_idle" not in set(df["symbol"]) and "[user]" not in set(df["symbol"])
    assert df.set_index("symbol").loc["veth_poll", "inclusive_ns"] == pytest.approx(1000.0)


def test_a_recursive_function_is_counted_once_per_stack():
    p = TrialProfile("t", 100.0, "napi/x-1;f;g;f;h 10\nnapi/x-1;f 10\n")
    row = cost_frame([p]).set_index("symbol").loc["f"]
    assert (row["inclusive_samples"], row["self_samples"]) == (20, 10)


def test_a_share_unseen_counts_as_one_sample_and_repeats_widen_the_noise():
    assert share_sd(0, 100) == pytest.approx(share_sd(1, 100)) and share_sd(50, 100) == pytest.approx(0.05)
    steady = [TrialProfile(f"t{i}", 1000.0, folded(prog=400, csum=100)) for i in range(3)]
    drifting = [TrialProfile(f"t{i}", t, folded(prog=400, csum=100)) for i, t in enumerate((800.0, 1000.0, 1200.0))]
    a, b = (function_costs(s).set_index("symbol").loc["bpf_prog_0000000000000000_xdp_calib"] for s in (steady, drifting))
    assert a["self_ns"] == pytest.approx(b["self_ns"]) == pytest.approx(400.0)
    assert a["self_ns_sd"] == pytest.approx(1000 * math.sqrt(0.4 * 0.6 / 1000) / math.sqrt(3))   # sampling only
    assert b["self_ns_sd"] == pytest.approx(80 / math.sqrt(3))   # the repeats' standard error, larger
    kinds = kind_costs(steady).set_index("kind")["self_ns"]
    assert kinds.sum() == pytest.approx(1000.0) and kinds["program"] == pytest.approx(400.0)


def _set(label, costs_and_stacks):
    return TrialSet(label, tuple(TrialProfile(f"{label}{i}", t, f) for i, (t, f) in enumerate(costs_and_stacks)))


def test_the_gap_goes_to_the_function_that_grew_and_the_deltas_add_up_to_it():
    # a sample is 1 ns: UL has 900 samples of its packet threads, DL 100 more, of checksum under the
    # program, the rest the same in ns (so every other share fell)
    a = _set("UL", [(900.0, folded(prog=400)), (910.0, folded(prog=400))])
    b = _set("DL", [(1000.0, folded(prog=400, csum=100)), (1010.0, folded(prog=400, csum=100))])
    e = explain(a, b)
    assert e.gap_ns == pytest.approx(100.0) and not e.within_noise
    assert e.named[0].name == "csum_partial" and e.named[0].delta_ns == pytest.approx(100.0, abs=3)
    assert sum(m.delta_ns for m in e.movers) == pytest.approx(e.gap_ns)
    assert e.unexplained_ns == pytest.approx(e.gap_ns - sum(m.delta_ns for m in e.named))
    prog = next(m for m in e.movers if m.name == "xdp_calib")
    assert abs(prog.delta_ns) < prog.delta_err_ns and prog not in e.named   # same ns, though its share fell
    assert e.sentence().startswith("DL costs 100 ± ") and "csum_partial +" in e.sentence()
    assert e.kinds["stack"]["delta_ns"] == pytest.approx(100.0, abs=3)


def test_a_function_whose_share_stays_is_dearer_when_the_packet_is():
    a = _set("a", [(900.0, folded(prog=400))] * 2)
    b = _set("b", [(1800.0, folded(prog=400))] * 2)   # same shares, twice the cost
    prog = next(m for m in explain(a, b).movers if m.name == "xdp_calib")
    assert prog.delta_ns == pytest.approx(400.0) and prog.significant


def test_a_gap_within_the_noise_is_said_so_and_one_trial_a_side_has_no_noise():
    a = _set("a", [(1000.0, folded(prog=400)), (1200.0, folded(prog=400))])
    b = _set("b", [(1050.0, folded(prog=410)), (1150.0, folded(prog=400))])
    e = explain(a, b)
    assert e.within_noise and "cost the same within the noise" in e.sentence()
    single = explain(_set("a", [(1000.0, folded(prog=400))]), _set("b", [(1300.0, folded(prog=700))]))
    assert single.gap_err_ns is None and not single.within_noise and "noise is unknown" in single.sentence()
    assert single.named[0].name == "xdp_calib"


def _spread(stacks: str, samples: int, functions: int = 30) -> str:
    """``stacks`` and ``functions`` small driver functions of ``samples`` samples each."""
    return stacks + "".join(f"{PATH};small_fn_{i}_[k] {samples}\n" for i in range(functions))


def test_the_unexplained_part_has_its_own_uncertainty_with_one_trial_a_side():
    # one sample is 1 ns on each side: the gap is the checksum's 100 samples, the rest unchanged
    a = _set("UL", [(1200.0, _spread(folded(prog=400), 10))])
    b = _set("DL", [(1300.0, _spread(folded(prog=400, csum=100), 10))])
    e = explain(a, b)
    assert e.gap_err_ns is None and e.named[0].name == "csum_partial"
    assert e.unexplained_err_ns > 0 and e.accounted and "within its uncertainty" in e.accounted_line()
    assert e.to_dict()["accounted"] is True and f"unexplained {e.unexplained_ns:+.1f} ± " in e.sentence()


def test_functions_each_within_their_noise_that_move_together_are_not_accounted_for():
    # 30 functions of 10 samples grow to 20 each: none beyond its own noise, 300 ns together
    a = _set("UL", [(1200.0, _spread(folded(prog=400), 10))])
    b = _set("DL", [(1500.0, _spread(folded(prog=400), 20))])
    e = explain(a, b)
    assert not any(m.name.startswith("small_fn") for m in e.named)
    assert e.unexplained_ns == pytest.approx(300.0, abs=30)
    assert not e.accounted and "more than its uncertainty" in e.accounted_line()


def test_with_repeats_the_named_functions_must_add_up_to_the_gap_within_its_noise():
    # the trials' costs drift by 10 % together (the host): the checksum's +200 ns exceeds its noise,
    # the program's +50 does not but carries a fifth of the gap, so both are named
    def side(label, prog, csum, small, costs):
        return _set(label, [(t, _spread(folded(prog=prog, csum=csum), small)) for t in costs])
    a = side("UL", 400, 0, 10, (1080.0, 1200.0, 1320.0))
    b = side("DL", 450, 200, 10, (1330.0, 1450.0, 1570.0))
    e = explain(a, b)
    prog = next(m for m in e.movers if m.name == "xdp_calib")
    assert not prog.significant and [m.name for m in e.named] == ["csum_partial", "xdp_calib"]
    assert not e.within_noise and e.accounted and "within the gap's uncertainty (± " in e.accounted_line()
    # 30 small functions grown by 300 ns together besides: the named ones fall short of the gap
    b = side("DL", 450, 200, 20, (1630.0, 1750.0, 1870.0))
    e = explain(a, b)
    assert abs(e.unexplained_ns) > e.gap_err_ns and not e.accounted and "more than the gap's" in e.accounted_line()
    assert e.to_dict()["accounted_within_ns"] == pytest.approx(e.gap_err_ns)


def test_a_slower_dut_core_on_one_side_is_said_with_what_it_alone_costs():
    # every function 10 % dearer on b, the speed probe 10 % slower there: the named ones leave the rest
    def side(label, cost, speed):
        return TrialSet(label, tuple(TrialProfile(f"{label}{i}", cost, _spread(folded(prog=400), 10), (), speed)
                                     for i in range(3)))
    e = explain(side("a", 1200.0, 10.0), side("b", 1320.0, 11.0))
    assert e.speed_change == pytest.approx(0.1) and e.speed_ns == pytest.approx(120.0)
    assert "ran 10.0 % slower during b" in e.accounted_line() and "+120 ns spread over every function" in e.accounted_line()
    e = explain(side("a", 1200.0, None), side("b", 1320.0, 11.0))
    assert e.speed_change is None and "speed" not in e.accounted_line()


def test_a_set_holds_the_units_trials_at_its_top_rate_a_stalled_one_and_its_rerun(tmp_path):
    store = RunStore.create(None, tmp_path)
    for i, rate in enumerate((1e6, 1e6, 5e5)):   # a max-rate trial, its re-run, a trial below
        t = dataclasses.replace(_trial(100, 1000.0 + i, f"t{i}"), intended_pps=rate)
        store.append(t, {"unit": "u100"})
        write_folded(store.path, t.trial_id, folded(prog=400))
    assert sorted(profiled(load_run(store.run_id, tmp_path))["trial_id"]) == ["t0", "t1"]


def test_the_flame_graph_weighs_stacks_in_ps_per_packet():
    a = [TrialProfile("a", 900.0, folded(prog=400))]
    b = [TrialProfile("b", 1800.0, folded(prog=400))]
    lines = dict(line.rsplit(" ", 2)[0:1] + [line.rsplit(" ", 2)[1:]] for line in ns_diff_folded(a, b).splitlines())
    prog = "napi;ret_from_fork;kthread;napi_threaded_poll;veth_poll;veth_xdp_rcv;bpf_prog_0000000000000000_xdp_calib"
    assert lines[prog] == ["400000", "800000"]
    assert not any(s.startswith(("swapper", "python3")) for s in lines)
    svg = ns_diff_flamegraph_svg(a, b, "b against a")
    assert "<svg" in svg and "ps per packet" in svg and "xdp_calib" in svg


# -- from stored runs, and the command ----------------------------------------------------------------------
def _trial(work: int, ns: float, trial_id: str) -> TrialResult:
    return TrialResult(dataplane="calib", frame_size=64, wire_frame_size=64, flows=1, dut_cores=1, generator="xdp",
                       duration=1.0, intended_pps=1e6, intended_packets=1_000_000, tx_packets=1_000_000,
                       rx_packets=900_000, elapsed=1.0, trial_id=trial_id, method="maxrate",
                       params={"work_iterations": work, "drop_every": 0}, dut_ns_per_packet=ns,
                       dut_kthread_cpu={"napi/veth-dut0-8193": 0.9, "napi/veth-dut1-8194": 0.0})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two runs of the calibrated DUT at N = 100 and 200, two trials each: the second run's N = 100
    costs 50 ns more, in its program."""
    root = tmp_path_factory.mktemp("runs")
    ids = []
    for extra in (0, 50):
        store = RunStore.create(None, root)
        for i, (work, ns, prog) in enumerate([(100, 1000 + extra, 400 + extra), (100, 1004 + extra, 402 + extra),
                                              (200, 1500, 900), (200, 1490, 895)]):
            tid = f"t{extra}-{i}"
            store.append(_trial(work, ns, tid), {"unit": f"u{work}-{i}"})
            write_folded(store.path, tid, folded(prog=prog, veth=ns - prog - 200))
        ids.append(store.run_id)
    return root, ids


def test_explain_names_the_program_between_two_scenarios_and_writes_the_flame_graph(runs, tmp_path, capsys):
    root, (run, _) = runs
    code = main(["explain", "--run", run, "--root", str(root), "--a", "calib-64B-1flow-1core-w100",
                 "--b", "calib-64B-1flow-1core-w200", "--flamegraph", str(tmp_path), "--json"])
    d = json.loads(capsys.readouterr().out)["explanations"][0]
    assert code == 0 and d["gap_ns"] == pytest.approx(493.0) and d["named"][0]["name"] == "xdp_calib"
    assert d["kinds"]["program"]["delta_ns"] / d["gap_ns"] > 0.9
    assert "ps per packet" in open(d["flamegraph"]).read()


def test_explain_against_a_baseline_run_and_top_movers(runs, capsys):
    root, (base, head) = runs
    assert main(["explain", "--run", head, "--baseline", base, "--root", str(root), "--no-flamegraph"]) == 0
    out = capsys.readouterr().out
    assert "run " + head + " costs 50 ± " in out and "xdp_calib +50" in out
    assert "cost the same within the noise (calib-64B-1flow-1core-w200)" in out
    movers = top_movers(head, base, "calib-64B-1flow-1core-w100", root)
    assert [m.name for m in movers][:1] == ["xdp_calib"] and movers[0].delta_ns == pytest.approx(50.0, abs=5)
    assert top_movers(head, base, "nonesuch", root) == []


@pytest.mark.parametrize("argv, message", [
    (["--a", "calib-64B-1flow-1core-w100"], "--b: None is not allowed"),
    (["--a", "nope", "--b", "calib-64B-1flow-1core-w200"], "--a: 'nope' is not allowed"),
    (["--knob", "gro"], "--knob: 'gro' is not allowed"),
    (["--baseline", "nonesuch"], "--baseline: 'nonesuch' is not allowed"),
])
def test_bad_input_is_one_line_and_exit_2(runs, argv, message, capsys):
    root, (run, _) = runs
    code = main(["explain", "--run", run, "--root", str(root), "--no-flamegraph", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


# -- known truth on the real testbed ------------------------------------------------------------------------
@pytest.mark.slow   # some 40 s: 4 testbeds of the calibrated DUT with perf, and prog-bench passes between
def test_the_calibrated_gap_is_the_programs_and_what_the_calibration_predicts(tmp_path):
    """N = 400 against 2N = 800 (bench/explain_calib.py): >= 90 % of the gap on the BPF program
    (its function and its bpf_loop callback), and the gap within 15 % of prog-bench's slope x N.

    N = 100 against 200 passed and failed by turns on this 2-vCPU VM shared with other work: the
    kernel's part per packet moves by 100-200 ns with the load and the rate (NAPI wake-ups,
    batching), 10-20 % of a 1000 ns gap, and the VM's speed drifted 15 % between testbeds."""
    for attempt in range(3):
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "explain_calib.py"), "--work", "400", "--rounds",
                              "2", "--trials", "2", "--root", str(tmp_path / str(attempt)), "--json", "--no-record"],
                             capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr
        f = json.loads(out.stdout)
        print(f"\n{f['sentence']}\npredicted {f['predicted_gap_ns']:.0f} ns ({f['ns_per_iteration']:.2f} ns per "
              f"iteration); the core ran {100 * (f['speed_drift'] or 0):+.1f} % slower during 2N")
        # measured again only when the host's measured slowdown between the sides, or the gap's own
        # noise (its 95 % half-width from the repeats), could explain a miss: a gap of 1.17 x the
        # prediction with +-9 % of noise and 2 % of drift failed a clean-clone CI run
        miss = abs(f["gap_over_predicted"] - 1) - 0.15
        noise = (f["gap_err_ns"] or 0) / f["predicted_gap_ns"]
        if miss <= 0 or (abs(f["speed_drift"] or 0) < 0.05 and miss > noise):
            break
    assert f["program_fraction"] >= 0.90
    assert f["gap_over_predicted"] == pytest.approx(1.0, abs=0.15)
    assert f["top_function"] in ("xdp_calib", "work_step")


def test_the_ab_comment_names_the_functions_that_moved_in_a_regressed_scenario(runs):
    root, (base, head) = runs
    row = {"verdict": "regression", "scenario_key": "calib-64B-1flow-1core-w100", "label": "maxrate",
           "metric": "max rate rx", "baseline_mpps": 1.0, "current_mpps": 0.95, "change_pct": -5.0, "band_pct": 2.0}
    facts = {"verdict": "regression", "headline": "slower", "threshold_pct": 5.0, "repeats": 2, "caveats": [],
             "base": {"commit": "a" * 40, "run_id": base}, "head": {"commit": "b" * 40, "run_id": head},
             "rows": [row, {**row, "metric": "ndr"}], "plots": ["change.png"]}
    with_root = ab_comment({**facts, "root": str(root)})
    assert with_root.count("moved most") == 1 and "`xdp_calib` +50 ± " in with_root
    assert "moved most" not in ab_comment(facts)


def test_the_report_page_pairs_each_variant_with_the_first_where_the_rest_is_the_same(runs):
    root, (run, _) = runs
    (pair,) = variant_pairs(load_run(run, root))
    assert (pair.a.label, pair.b.label) == ("N = 100 work iterations", "N = 200 work iterations")
    assert pair.context == "calib-64B-1flow-1core-w100 vs calib-64B-1flow-1core-w200"
    assert [len(pair.a.profiles), len(pair.b.profiles)] == [2, 2]
    assert all_knob_pairs(load_run(run, root)) == []


def test_another_testbeds_packet_thread_on_the_dut_core_is_not_the_duts_cost():
    """perf names tasks by their first 15 characters: napi/veth-dut0-8193 is napi/veth-dut0-."""
    mine = folded(prog=400, csum=100)
    theirs = "napi/veth-other-77;napi_threaded_poll_[k];bpf_prog_abcdefabcdefabcd_xdp_other_[k] 1000\n"
    own = TrialProfile("t", 1000.0, mine + theirs, ("napi/veth-dut0-8193", "napi/veth-dut1-8194"))
    df = cost_frame([own]).set_index("symbol")
    assert df["packet_samples"].iloc[0] == 1000 and "bpf_prog_0000000000000000_xdp_other" not in df.index
    assert df.loc["bpf_prog_0000000000000000_xdp_calib", "self_ns"] == pytest.approx(400.0)
    every = cost_frame([TrialProfile("t", 1000.0, mine + theirs)])   # threads unknown: every NAPI thread
    assert every["packet_samples"].iloc[0] == 2000
