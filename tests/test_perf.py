"""perf attribution (perfkit.perf): real perf on the DUT cores of the real testbed, the folded stacks,
their tables and flame graphs, clean-up on every way out, ``perfkit trial --perf``, the report page."""
from __future__ import annotations

import base64
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from perfkit.generators import create
from perfkit.perf import flamegraph as perf_flamegraph
from perfkit.perf import folded as perf_folded
from perfkit.perf import record as perf_record
from perfkit.perf import session as perf_session
from perfkit.perf import report as perf_report
from perfkit.perf import store as perf_store
from perfkit.perf import tools as perf_tools
from perfkit.perf.record import PerfRecorder
from perfkit.perf.tools import PerfError
from perfkit.report import PAGES, build_report
from perfkit.scenario import Scenario
from perfkit.store import RunStore
from tests.conftest import ROOT

PERFKIT = str(ROOT / ".venv" / "bin" / "perfkit")
PERF_PAGE = next(p for p in PAGES if p.name == "perf")
#: Kernel functions of the DUT's receive path on veth with threaded NAPI and an XDP redirect.
VETH_NAPI = {"veth_poll", "veth_xdp_rcv", "__napi_poll", "napi_threaded_poll", "xdp_do_redirect"}


def _gone(pid: int, within: float = 5.0) -> bool:
    """No ``perf record`` process ``pid`` runs any more (checked until ``within`` seconds passed)."""
    deadline = time.monotonic() + within
    while pid in perf_session.perf_processes():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _recorder_dirs() -> set[Path]:
    import tempfile
    return set(Path(tempfile.gettempdir()).glob(f"{perf_session.TMP_PREFIX}*"))


@pytest.fixture(scope="module")
def ul_gen():
    with create("xdp", Scenario("pgwu", frame_size=64, params={"direction": "ul"})) as gen:
        yield gen


@pytest.fixture(scope="module")
def recorded(ul_gen):
    """One UL 64 B trial as fast as the generator sends, with perf on the DUT core."""
    before = _recorder_dirs()
    rec = PerfRecorder(ul_gen.dut_cores)
    with rec:
        during = _recorder_dirs() - before
        trial = ul_gen.measure(None, 2.0)
    assert rec.profile is not None
    return {"gen": ul_gen, "rec": rec, "trial": trial, "profile": rec.profile, "dirs": during}


# -- real perf, real testbed -----------------------------------------------------------------------------
def test_ul_stacks_name_the_pgwu_program_under_the_veth_napi_path(recorded):
    gen, prof = recorded["gen"], recorded["profile"]
    assert prof.samples > 0 and prof.cpus == gen.dut_cores
    tag = bytes(gen.dut.programs[-1].info().tag).hex()
    pgwu = f"bpf_prog_{tag}_xdp_pgwu"                       # the loaded program: SEC("xdp") int xdp_pgwu(...)
    stacks = perf_folded.parse_folded(prof.folded)
    ours = [frames for frames, _ in stacks if frames[0].startswith(f"napi/{gen.dut_in.dev}")]
    assert ours, "no sample of the DUT's NAPI thread"
    with_prog = [[perf_folded.strip_annotation(f) for f in frames] for frames in ours if pgwu in frames]
    assert with_prog, f"{pgwu} is in none of the DUT thread's stacks"
    # the program runs inside veth's NAPI poll: the kernel frames come first, the program after them
    assert any("veth_xdp_rcv" in fs and fs.index("veth_xdp_rcv") < fs.index(pgwu) for fs in with_prog)
    table = perf_folded.symbol_table(prof.folded)
    names = set(table["symbol"])
    assert VETH_NAPI <= names, f"missing kernel functions: {VETH_NAPI - names}"
    assert table.set_index("symbol").loc[pgwu, "kind"] == "bpf"
    assert set(table.set_index("symbol").loc[sorted(VETH_NAPI), "kind"]) == {"kernel"}
    assert perf_folded.bpf_program_name(pgwu) == "xdp_pgwu"


def test_top_symbols_are_kernel_and_bpf_functions_with_consistent_shares(recorded):
    prof = recorded["profile"]
    assert prof.top and {s.kind for s in prof.top} <= {"kernel", "bpf"}
    assert any(s.kind == "bpf" and perf_folded.bpf_program_name(s.symbol) == "xdp_pgwu" for s in prof.top)
    selfs = [s.self_samples for s in prof.top]
    assert selfs == sorted(selfs, reverse=True)
    for s in prof.top:
        assert 0 < s.self_samples <= s.inclusive_samples <= prof.samples
        assert s.self_share == pytest.approx(s.self_samples / prof.samples)
        assert s.inclusive_share == pytest.approx(s.inclusive_samples / prof.samples)
    d = json.loads(json.dumps(prof.to_dict()))
    assert "folded" not in d and d["top"][0]["symbol"] == prof.top[0].symbol
    assert any(p["process"].startswith(f"napi/{recorded['gen'].dut_in.dev}") for p in d["processes"])
    assert d["event"] and d["frequency"] == perf_record.DEFAULT_FREQUENCY and d["seconds"] > 0
    assert d["perf_cpu"] is None or d["perf_cpu"] >= 0


def test_folded_stacks_parse_and_count_every_sample(recorded):
    prof = recorded["profile"]
    stacks = perf_folded.parse_folded(prof.folded)
    assert sum(c for _, c in stacks) == prof.samples
    assert len({";".join(f) for f, _ in stacks}) == len(stacks)           # one line per distinct stack
    for frames, count in stacks:
        assert frames[0] and all(frames) and count >= 1
    assert perf_folded.merge_folded([prof.folded]) == "".join(sorted(prof.folded.splitlines(keepends=True)))


def test_a_clean_stop_leaves_no_perf_process_and_no_files(recorded):
    rec = recorded["rec"]
    assert rec.pid is not None and _gone(rec.pid, 0.0)
    assert rec.pid not in perf_session.perf_processes()
    assert len(recorded["dirs"]) == 1 and not any(d.exists() for d in recorded["dirs"])


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_an_exception_in_the_trial_kills_perf(ul_gen, exc):
    rec = PerfRecorder(ul_gen.dut_cores)
    before = _recorder_dirs()
    with pytest.raises(exc):
        with rec:
            pid, made = rec.pid, _recorder_dirs() - before
            assert pid in perf_session.perf_processes() and made
            raise exc("stop")
    assert rec.profile is None and _gone(pid)
    assert not any(d.exists() for d in made)


_RECORD_AND_WAIT = """
import sys, time
from perfkit.perf.record import PerfRecorder
rec = PerfRecorder([int(sys.argv[1])])
rec.start()
print(rec.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_perf_dies_with_a_python_killed_without_clean_up(ul_gen, sig):
    py = subprocess.Popen([sys.executable, "-c", _RECORD_AND_WAIT, str(ul_gen.dut_cores[0])], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True)
    try:
        pid = int(py.stdout.readline())
        assert pid in perf_session.perf_processes()
        py.send_signal(sig)                      # no handler: Python ends without running any clean-up
        py.wait(10)
        assert _gone(pid), "perf outlived the process that started it"
    finally:
        py.kill()
        py.wait()
    perf_session.remove_stale_dirs()                     # what the next recorder does first
    assert not any(json.loads((d / perf_session.OWNER_FILE).read_text())["pid"] == py.pid
                   for d in _recorder_dirs() if (d / perf_session.OWNER_FILE).exists())


def test_perf_that_cannot_record_is_a_one_line_error_and_leaves_nothing(ul_gen):
    before = _recorder_dirs()
    with pytest.raises(PerfError) as err:
        with PerfRecorder(ul_gen.dut_cores, event="no_such_event"):
            pass
    assert "perf record could not start recording" in str(err.value) and "no_such_event" in str(err.value)
    assert "\n" not in str(err.value)
    assert _recorder_dirs() <= before


def test_missing_tools_are_named(monkeypatch):
    real = perf_tools.find_tool
    for name in ("perf", "inferno-collapse-perf"):
        monkeypatch.setattr(perf_tools, "find_tool", lambda n, name=name: None if n == name else real(n))
        with pytest.raises(PerfError, match=f"needs {name}, not found"):
            PerfRecorder([0]).start()
    with pytest.raises(Exception, match="frequency"):
        PerfRecorder([0], frequency=0)
    with pytest.raises(Exception, match="cpus"):
        PerfRecorder([os.cpu_count()])
    with pytest.raises(Exception, match="call_graph"):
        PerfRecorder([0], call_graph="lbr-please")


# -- the command line ------------------------------------------------------------------------------------
def test_cli_trial_perf_keeps_folded_stacks_and_a_flame_graph(tmp_path, perfkit_script):
    """``.venv/bin/perfkit trial --perf`` (forked from the session's server: ``tests/script_forks.py``)."""
    out = perfkit_script.run(["trial", "--dataplane", "pgwu", "--direction", "ul", "--frame-size", "64",
                              "--duration", "1", "--perf", str(tmp_path), "--json"], timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    p = d["perf"]
    folded = Path(p["folded_file"])
    assert folded == tmp_path / f"{d['trial_id']}.folded"
    assert sum(c for _, c in perf_folded.parse_folded(folded.read_text())) == p["samples"] > 0
    assert any(perf_folded.bpf_program_name(s["symbol"]) == "xdp_pgwu" for s in p["top"])
    assert {"symbol", "kind", "self_share", "inclusive_share"} <= set(p["top"][0])
    svg = Path(p["flamegraph_file"]).read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "xdp_pgwu" in svg and "<script" in svg


def test_cli_perf_refusals_are_one_line_and_exit_2(tmp_path, perfkit_script):
    env = {**os.environ, "PATH": str(tmp_path), "HOME": str(tmp_path)}        # no perf anywhere
    cases = [
        (["--perf", str(tmp_path)], env, "needs perf, not found"),
        (["--perf", str(tmp_path / "missing")], None, "--perf: "),
        (["--perf", str(tmp_path), "--generator", "sim", "--rate", "1Mpps"], None, "only with --generator xdp"),
    ]
    for extra, e, message in cases:
        out = perfkit_script.run(["trial", "--duration", "1", *extra], env=e, timeout=120)
        assert out.returncode == 2, out.stderr
        assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_cli_sigterm_during_a_perf_trial_stops_perf(tmp_path):
    cli = subprocess.Popen([PERFKIT, "trial", "--duration", "20", "--rate", "0.1Mpps", "--perf", str(tmp_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, pids = time.monotonic() + 60, []
        while not pids and time.monotonic() < deadline:
            pids = [p for p in perf_session.perf_processes() if _ppid(p) == cli.pid]
            time.sleep(0.1)
        assert pids, "perf never started"
        time.sleep(0.5)
        cli.send_signal(signal.SIGTERM)
        cli.wait(60)
        assert cli.returncode != 0
        assert all(_gone(p) for p in pids)
        assert not list(tmp_path.iterdir())                                # nothing half-written
    finally:
        cli.kill()
        cli.wait()


def _ppid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


# -- folded stacks: parsing, tables, merging, storage, rendering ------------------------------------------
FOLDED = """\
napi/d1-1;ret_from_fork_[k];napi_threaded_poll_[k];veth_poll_[k];bpf_prog_0123456789abcdef_xdp_pgwu 6
napi/d1-1;ret_from_fork_[k];napi_threaded_poll_[k];veth_poll_[k];bpf_prog_0123456789abcdef_xdp_pgwu;htab_map_hash_[k] 2
napi/d1-1;ret_from_fork_[k];napi_threaded_poll_[k];veth_poll_[k] 4
rec;f_[k];f_[k];g_[k] 3
python;[unknown];PyEval 1
swapper;secondary_startup_64_[k];pv_native_safe_halt_[k] 4
"""


def test_symbol_table_counts_self_and_inclusive_samples_once_per_stack():
    t = perf_folded.symbol_table(FOLDED).set_index("symbol")
    assert t.loc["veth_poll", ["self_samples", "inclusive_samples"]].tolist() == [4, 12]
    prog = "bpf_prog_0123456789abcdef_xdp_pgwu"
    assert t.loc[prog, ["kind", "self_samples", "inclusive_samples"]].tolist() == ["bpf", 6, 8]
    assert t.loc["f", ["self_samples", "inclusive_samples"]].tolist() == [0, 3]   # recursion counted once
    assert t.loc["PyEval", "kind"] == "other" and t.loc["htab_map_hash", "kind"] == "kernel"
    assert "napi/d1-1" not in t.index and "swapper" not in t.index             # process names are no functions
    assert "pv_native_safe_halt" not in t.index                                 # idle is no function's time
    assert t.loc["veth_poll", "inclusive_share"] == pytest.approx(12 / 20)
    assert perf_folded.idle_share(FOLDED) == pytest.approx(4 / 20)
    procs = perf_folded.process_table(FOLDED).set_index("process")
    assert procs["samples"].to_dict() == {"napi/d1-1": 12, "swapper": 4, "rec": 3, "python": 1}
    assert procs.loc["napi/d1-1", "packet_thread"] and procs.loc["swapper", "idle"]
    assert not procs.loc["python", "packet_thread"] and procs["share"].sum() == pytest.approx(1)
    top = perf_folded.top_symbols(FOLDED, 3)
    assert [s.symbol for s in top] == [prog, "veth_poll", "g"]
    assert all(s.kind in ("kernel", "bpf") for s in perf_folded.top_symbols(FOLDED, 50))


def test_samples_without_frames_count_as_user_space():
    script = (b"python 1/1 [001] 1.0: cpu-clock:ppp: \n\n"
              b"napi/d1-1 2/2 [001] 1.1: cpu-clock:ppp: \n\tffffffff81 veth_poll+0x1 ([kernel.kallsyms])\n"
              b"\tffffffff82 __napi_poll+0x2 ([kernel.kallsyms])\n\n"
              b"busy 3/3 [001] 1.2: cpu-clock:ppp: \n")
    fixed = perf_record.with_user_frames(script)
    assert fixed.count(perf_record.USER_FRAME) == 2
    out = subprocess.run([perf_tools.find_tool("inferno-collapse-perf"), "--all"], input=fixed, capture_output=True,
                         check=True).stdout.decode()
    assert {";".join(f): c for f, c in perf_folded.parse_folded(out)} == {
        "python;[user]": 1, "busy;[user]": 1, "napi/d1-1;__napi_poll_[k];veth_poll_[k]": 1}


@pytest.mark.parametrize("bad", ["a;b", "a;b x", "a;b 0", " 3", "a;b -1"])
def test_parse_folded_names_the_bad_line(bad):
    with pytest.raises(ValueError, match="line 2"):
        perf_folded.parse_folded(f"a;b 1\n{bad}\n")


def test_merge_adds_identical_stacks():
    merged = perf_folded.parse_folded(perf_folded.merge_folded([FOLDED, FOLDED, "x;y 5\n"]))
    counts = {";".join(f): c for f, c in merged}
    assert counts["x;y"] == 5 and counts["rec;f_[k];f_[k];g_[k]"] == 6
    assert sum(counts.values()) == 2 * 20 + 5


def test_stacks_are_stored_with_the_run_atomically(tmp_path):
    store = RunStore.create("r1", tmp_path)
    assert perf_store.perf_trial_ids(store.path) == []
    path = perf_store.write_folded(store.path, "t-1", FOLDED)
    assert path == store.path / "perf" / "t-1.folded" and perf_store.read_folded(store.path, "t-1") == FOLDED
    assert perf_store.perf_trial_ids(store.path) == ["t-1"]
    assert not list((store.path / "perf").glob(".*.tmp"))
    with pytest.raises(ValueError):
        perf_store.write_folded(store.path, "t-2", "not folded\n")
    with pytest.raises(Exception, match="trial_id"):
        perf_store.write_folded(store.path, "../evil", FOLDED)
    assert perf_store.perf_trial_ids(store.path) == ["t-1"]


def test_each_scenario_is_shown_by_its_fastest_recorded_trial(tmp_path):
    trials = pd.DataFrame({"trial_id": ["a", "b", "c", "d"], "scenario_key": ["s1", "s1", "s2", "s1"],
                           "rx_pps": [1e6, 2e6, 5e5, 9e6], "method": ["maxrate"] * 4})
    assert perf_report.scenario_profiles(trials, tmp_path).empty
    for t in ("a", "b", "c"):
        perf_store.write_folded(tmp_path, t, FOLDED)
    prof = perf_report.scenario_profiles(trials, tmp_path)
    assert prof[["scenario_key", "trial_id", "perf_trials"]].values.tolist() == [["s1", "b", 2], ["s2", "c", 1]]
    secs = perf_report.scenario_sections(trials, tmp_path, n=5)
    assert [s.trial_id for s in secs] == ["b", "c"] and len(secs[0].top) == 5
    summ = perf_report.summary_table(secs).set_index("scenario_key")
    assert summ.loc["s1", "samples"] == 20 and summ.loc["s1", "idle %"] == pytest.approx(20)
    assert summ.loc["s1", "packet threads %"] == pytest.approx(60)
    assert summ.loc["s1", "BPF programs %"] == pytest.approx(30) and summ.loc["s1", "other %"] == pytest.approx(5)
    assert summ.loc["s1", "top BPF program"].endswith("_xdp_pgwu")


def test_flame_graph_is_an_interactive_svg_in_an_iframe():
    svg = perf_flamegraph.flamegraph_svg(FOLDED, "UL 64 B")
    assert "<svg" in svg and "<script" in svg and "UL 64 B" in svg and "xdp_pgwu" in svg
    html = perf_flamegraph.flamegraph_html(svg)
    url = html.split('src="', 1)[1].split('"', 1)[0]
    assert url.startswith("data:image/svg+xml;base64,")
    assert base64.b64decode(url.split(",", 1)[1]).decode() == svg
    with pytest.raises(PerfError, match="no samples"):
        perf_flamegraph.flamegraph_svg("")


# -- the report page -------------------------------------------------------------------------------------
@pytest.mark.slow   # make test renders the perf page without perf data (test_report)
def test_report_page_shows_tables_and_flame_graphs_only_with_perf_data(recorded, tmp_path):
    root = tmp_path / "runs"
    with_perf = RunStore.create("with-perf", root)
    trial = dataclasses.replace(recorded["trial"])
    with_perf.append(trial)
    perf_store.write_folded(with_perf.path, trial.trial_id, recorded["profile"].folded)
    without = RunStore.create("without-perf", root)
    without.append(dataclasses.replace(recorded["trial"]))
    for run in ("with-perf", "without-perf"):
        rep = build_report(run, data_root=root, reports_root=tmp_path / "reports", pages=(PERF_PAGE,),
                           progress=False)
        assert rep.ok, rep.pages[0].error
    page = (tmp_path / "reports" / "with-perf" / "perf.html").read_text()
    assert "No perf data" not in page and "Traceback" not in page
    assert trial.scenario_key in page and "xdp_pgwu" in page and "veth_xdp_rcv" in page
    assert page.count("<iframe") == 1 and "data:image/svg+xml;base64," in page
    empty = (tmp_path / "reports" / "without-perf" / "perf.html").read_text()
    assert "No perf data in this run" in empty and "<iframe" not in empty


# -- perf stat: counters per trial ---------------------------------------------------------------------
from perfkit.perf import stat as perf_stat  # noqa: E402


def test_perf_stat_output_is_read_per_cpu_and_an_event_the_cpu_lacks_is_said_in_words():
    text = ("CPU1,8,,context-switches,201947044,100.00,,\nCPU1,1,,cpu-migrations,201946423,100.00,,\n"
            "CPU1,<not supported>,,cycles,0,100.00,,\nCPU2,12,,context-switches,201947044,100.00,,\n"
            "CPU2,<not supported>,,cycles,0,100.00,,\n# a comment\n")
    counts = perf_stat.parse(text)
    assert counts.per_cpu == {"1": {"context-switches": 8.0, "cpu-migrations": 1.0, "cycles": perf_stat.NOT_AVAILABLE},
                              "2": {"context-switches": 12.0, "cycles": perf_stat.NOT_AVAILABLE}}
    assert counts.total("context-switches") == 20.0 and counts.total("cycles") == perf_stat.NOT_AVAILABLE
    assert counts.per_packet("cycles", 1000) is None and counts.per_packet("context-switches", 10) == 2.0


def test_perf_stat_counts_a_cpus_context_switches_and_leaves_no_perf_behind():
    cpu = max(os.sched_getaffinity(0))
    sleeper = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c",
                                "import time\nfor _ in range(200): time.sleep(0.001)"])
    with perf_stat.PerfCounter([cpu]) as counter:
        sleeper.wait()
    counts = counter.counts
    assert counts is not None and counts.total("context-switches") >= 100   # each sleep switches twice
    for event in perf_stat.HARDWARE_EVENTS:   # a number where the CPU has a PMU, else words: never 0
        value = counts.per_cpu[str(cpu)][event]
        assert value == perf_stat.NOT_AVAILABLE or value > 0, (event, value)
    assert not perf_session.perf_processes("stat")


def test_a_trial_carries_the_dut_cores_counts_and_cycles_per_packet_where_there_are_cycles(ul_gen):
    from perfkit.trial import TrialResult

    r = ul_gen.measure(100_000, 0.5)
    counts = r.dut_perf_counts[str(ul_gen.dut_cores[0])]
    assert counts["context-switches"] >= 0 and counts["cpu-migrations"] >= 0
    if counts["cycles"] == perf_stat.NOT_AVAILABLE:
        assert r.dut_cycles_per_packet is None
    else:
        assert r.dut_cycles_per_packet > 0
    back = TrialResult.from_record(r.to_record())
    assert back.dut_perf_counts == r.dut_perf_counts and not perf_session.perf_processes("stat")
