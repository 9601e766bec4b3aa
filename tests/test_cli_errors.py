"""Bad input through the real command line: every case is a process running ``.venv/bin/perfkit``
(forked from a server that has imported perfkit's third-party libraries: ``tests/script_forks.py``).

Each must exit 2 with exactly one line on stderr that names the option or field, the bad value and
what is allowed, print no traceback and nothing on stdout, and write nothing: each case runs in a
directory of its own (``$PERFKIT_DATA``, ``--root``, ``--reports``, capture paths), holding a copy of
one finished run, and the directory must be byte for byte the same afterwards. Cases that would
use the xdp testbed must be refused before it comes up.

Unexpected errors (bugs) are one line that says to run with ``--debug``; with it, the traceback.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.script_forks import ScriptForks

PERFKIT = ROOT / ".venv" / "bin" / "perfkit"
SIM = "--generator sim --rate 1Mpps"
BASE_RUN = "base"


@dataclass(frozen=True)
class Case:
    id: str
    argv: str
    """The command line after ``perfkit``; ``{runs}`` ``{reports}`` ``{dir}`` ``{files}`` are the case's paths."""
    says: tuple[str, ...]
    """What the one line must contain: the option or field, the bad value (as printed)."""


CASES = [
    # trial: rate, duration, packets (0, negative, nan, inf: none may wrap or run forever)
    Case("trace-packets-0", "trace --direction host --packets 0", ("--packets", "'0'", "1 .. 10000")),
    Case("trace-seconds-over", "trace --direction host --seconds 500", ("--seconds", "'500'", "1 .. 120")),
    Case("trace-not-to-the-kernel", "trace --direction ul", ("traffic", "pgwu-ul-64B-1flow-1core", "passes to the DUT's kernel")),
    Case("trial-sim-without-rate", "trial --generator sim", ("--rate", "None", "--generator sim")),
    Case("trial-duration-0", f"trial {SIM} --duration 0", ("--duration", "'0'")),
    Case("trial-duration-negative", f"trial {SIM} --duration -1", ("--duration", "'-1'")),
    Case("trial-duration-nan", f"trial {SIM} --duration nan", ("--duration", "'nan'")),
    Case("trial-duration-inf", f"trial {SIM} --duration inf", ("--duration", "'inf'")),
    Case("trial-packets-0", f"trial {SIM} --packets 0", ("--packets", "'0'")),
    Case("trial-packets-negative", f"trial {SIM} --packets -5", ("--packets", "'-5'")),
    Case("trial-packets-nan", f"trial {SIM} --packets nan", ("--packets", "'nan'")),
    Case("trial-xdp-packets-negative", "trial --packets -1", ("--packets", "'-1'")),
    Case("trial-xdp-duration-inf-no-rate", "trial --duration inf", ("--duration", "'inf'")),
    Case("trial-rate-words", "trial --generator sim --rate fast", ("rate", "'fast'")),
    Case("trial-rate-0", "trial --generator sim --rate 0pps", ("rate", "0.0")),
    # frame sizes: the veth XDP path (live frames, one page) cannot carry big ones
    Case("trial-xdp-frame-size-9000", "trial --rate 1kpps --frame-size 9000", ("frame_size", "9000", "<= 3376")),
    Case("trial-xdp-l4lb-frame-size", "trial --dataplane l4lb --rate 1kpps --frame-size 3500", ("frame_size", "3500")),
    Case("search-xdp-frame-size", "search ndr --frame-size 9000", ("frame_size", "9000")),
    Case("trial-frame-size-too-small", f"trial {SIM} --frame-size 10", ("--frame-size", "'10'", "64 .. 9018")),
    Case("trial-frame-size-below-dataplane-min", f"trial {SIM} --dataplane l4lb --proto tcp --frame-size 64",
         ("frame_size", "64")),
    # scenario and cores
    Case("trial-flows-0", f"trial {SIM} --flows 0", ("--flows", "'0'")),
    Case("trial-dut-cores-0", f"trial {SIM} --dut-cores 0", ("--dut-cores", "'0'")),
    Case("trial-xdp-dut-cores-99", "trial --rate 1kpps --dut-cores 99", ("dut_cores", "99")),
    Case("trial-xdp-tester-cores-words", "trial --rate 1kpps --tester-cores 0,x", ("tester_cores", "0,x")),
    Case("trial-xdp-tester-cores-missing-cpu", "trial --rate 1kpps --tester-cores 77", ("tester_cores", "77")),
    Case("trial-dataplane-unknown", f"trial {SIM} --dataplane bng", ("--dataplane", "'bng'", "choose from")),
    # dataplane parameters: a bad value, a parameter of another dataplane
    Case("trial-direction-up", f"trial {SIM} --dataplane pgwu --direction up", ("direction", "'up'", "ul, dl")),
    Case("trial-sessions-negative", f"trial {SIM} --dataplane pgwu --sessions -1", ("sessions", "'-1'")),
    Case("trial-bool-param-words", f"trial {SIM} --dataplane pgwu --vlan maybe", ("vlan", "'maybe'", "on or off")),
    Case("trial-param-of-another-dataplane", f"trial {SIM} --dataplane pgwu --proto tcp", ("--proto", "'tcp'")),
    Case("trial-l4lb-vips-0", f"trial {SIM} --dataplane l4lb --vips 0", ("vips", "'0'")),
    # generator options
    Case("trial-capture-no-directory", f"trial {SIM} --capture {{dir}}/nodir/out.pcap", ("--capture", "nodir")),
    Case("trial-capture-is-a-directory", f"trial {SIM} --capture {{dir}}", ("--capture", "directory")),
    Case("trial-xdp-capture-unwritable", "trial --rate 1kpps --capture /proc/perfkit-out.pcap", ("--capture", "/proc")),
    Case("trial-sim-model-unknown", f"trial {SIM} --sim-model bogus", ("--sim-model", "'bogus'", "choose from")),
    Case("trial-sim-threshold-0", f"trial {SIM} --sim-threshold 0", ("--sim-threshold", "'0'")),
    Case("trial-sim-sigma-too-big", f"trial {SIM} --sim-sigma 0.7", ("sigma", "0.7")),
    # search
    Case("search-duration-0", "search ndr --generator sim --duration 0", ("--duration", "'0'")),
    Case("search-initial-duration-0", "search ndrpdr --generator sim --initial-duration 0",
         ("--initial-duration", "'0'")),
    Case("search-loss-tolerance-2", "search pdr --generator sim --loss-tolerance 2", ("loss_tolerance", "2.0")),
    Case("search-relative-width-negative", "search pdr --generator sim --relative-width=-1%",
         ("relative_width", "-0.01")),
    Case("search-bestworst-n-0", "search bestworst --generator sim -n 0", ("-n", "'0'")),
    Case("search-latency-fraction-2", "search latency --generator sim --fractions 2", ("fractions", "2.0")),
    Case("search-packets", "search ndr --generator sim --packets 5", ("packets", "5")),
    Case("search-disturbed-retries-negative", "search ndr --generator sim --disturbed-retries -1",
         ("--disturbed-retries", "'-1'")),
    # prog-bench
    Case("prog-bench-cpu-99", "prog-bench --cpu 99", ("cpu", "99")),
    Case("prog-bench-rounds-1", "prog-bench --rounds 1", ("--rounds", "'1'")),
    Case("prog-bench-frame-size-4000", "prog-bench --frame-size 4000", ("frame_size", "4000", "<= 3488")),
    Case("prog-bench-param-of-another-dataplane", "prog-bench --dataplane l4lb --sessions 5", ("--sessions", "'5'")),
    # run: refused before the campaign runs, nothing written to the store
    Case("run-baseline-mistyped", "run campaigns/smoke.yaml --report --baseline nope --root {runs} "
         "--reports {reports} --no-progress", ("--baseline", "'nope'")),
    Case("run-baseline-without-report", f"run campaigns/smoke.yaml --baseline {BASE_RUN} --root {{runs}}",
         ("--baseline", f"'{BASE_RUN}'", "--report")),
    Case("run-resume-missing-run", "run --resume nope --root {runs}", ("--resume", "'nope'")),
    Case("run-resume-missing-campaign-file", f"run --resume {BASE_RUN} {{dir}}/missing.yaml --root {{runs}}",
         ("CAMPAIGN", "missing.yaml")),
    Case("run-missing-campaign-file", "run {dir}/missing.yaml --root {runs}", ("CAMPAIGN", "missing.yaml")),
    Case("run-resume-with-run-id", f"run --resume {BASE_RUN} --run other --root {{runs}}", ("--run", "'other'")),
    Case("run-prometheus-url-no-scheme", "run {files}/prometheus_url.yaml --root {runs}",
         ("campaign.metrics.prometheus_url", "'htp//prometheus:9090'")),
    Case("run-pushgateway-url-no-scheme", "run {files}/pushgateway_url.yaml --root {runs}",
         ("campaign.metrics.pushgateway_url", "'localhost:9091'")),
    Case("run-generator-option-unknown-sim", "run {files}/sim_option.yaml --root {runs}",
         ("campaign.generator.options", "bogus")),
    Case("run-generator-option-unknown-xdp", "run {files}/xdp_option.yaml --root {runs}",
         ("campaign.generator.options.bogus", "1", "tester_cores")),
    Case("run-duplicate-top-level-key", "run {files}/duplicate_top.yaml --root {runs}", ("'repeats'", "line")),
    Case("run-duplicate-nested-key", "run {files}/duplicate_nested.yaml --root {runs}", ("'duration'", "line")),
    Case("run-campaign-duration-0", "run {files}/duration_0.yaml --root {runs}",
         ("campaign.methods[0].params.duration", "0")),
    Case("run-campaign-xdp-frame-size", "run {files}/xdp_frame_size.yaml --root {runs}", ("frame_size", "9000")),
    Case("run-campaign-bad-param", "run {files}/bad_param.yaml --root {runs}", ("campaign.params.direction", "'up'")),
    Case("run-campaign-param-of-another-dataplane", "run {files}/other_param.yaml --root {runs}",
         ("campaign.params.proto", "'tcp'")),
    # report, compare, push, metrics, stack
    Case("report-missing-baseline", f"report --run {BASE_RUN} --baseline nope --root {{runs}} --reports {{reports}}",
         ("--baseline", "'nope'", BASE_RUN)),
    Case("compare-threshold-nan", f"compare --run {BASE_RUN} --baseline {BASE_RUN} --threshold nan --root {{runs}}",
         ("--threshold", "'nan'")),
    Case("push-missing-run", "push --run nope --root {runs}", ("--run", "'nope'", BASE_RUN)),
    Case("metrics-prometheus-url-malformed", "metrics check --prometheus-url notaurl", ("prometheus_url", "'notaurl'")),
    Case("metrics-config-duplicate-key", "metrics check --metrics-config {files}/metrics_duplicate.yaml",
         ("'prometheus_url'", "line")),
    Case("stack-port-out-of-range", "stack up --prometheus-port 70000 --stack-dir {dir}/stack",
         ("--prometheus-port", "'70000'")),
    Case("command-unknown", "frobnicate", ("'frobnicate'", "choose from")),
]

TINY = """\
name: tiny
dataplane: pgwu
frame_sizes: [64]
flows: [1]
dut_cores: [1]
generator: {backend: sim, options: {model: sharp, threshold: 1Mpps}}
methods:
  - method: maxrate
    params: {duration: 1}
metrics: {enabled: false}
"""

CAMPAIGNS = {
    "prometheus_url": TINY.replace("metrics: {enabled: false}", "metrics: {enabled: true, prometheus_url: 'htp//prometheus:9090'}"),
    "pushgateway_url": TINY.replace("metrics: {enabled: false}", "metrics: {enabled: true, pushgateway_url: 'localhost:9091'}"),
    "sim_option": TINY.replace("threshold: 1Mpps}", "threshold: 1Mpps, bogus: 1}"),
    "xdp_option": TINY.replace("{backend: sim, options: {model: sharp, threshold: 1Mpps}}", "{backend: xdp, options: {bogus: 1}}"),
    "duplicate_top": TINY + "repeats: 2\nrepeats: 3\n",
    "duplicate_nested": TINY.replace("params: {duration: 1}", "params: {duration: 1, duration: 2}"),
    "duration_0": TINY.replace("params: {duration: 1}", "params: {duration: 0}"),
    "xdp_frame_size": TINY.replace("[64]", "[64, 9000]").replace(
        "{backend: sim, options: {model: sharp, threshold: 1Mpps}}", "{backend: xdp}"),
    "bad_param": TINY + "params: {direction: up}\n",
    "other_param": TINY + "params: {proto: tcp}\n",
    "metrics_duplicate": "prometheus_url: http://127.0.0.1:9090\nprometheus_url: http://127.0.0.1:9091\n",
}


def _snapshot(d: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(PERFKIT), *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@dataclass(frozen=True)
class Setup:
    top: Path
    files: Path
    """The campaign files of ``CAMPAIGNS`` and ``tiny.yaml``."""
    base_runs: Path
    """A data root holding one finished run, ``BASE_RUN``: each case gets a copy."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    top = tmp_path_factory.mktemp("cli-errors")
    files = top / "files"
    files.mkdir()
    for name, text in CAMPAIGNS.items():
        (files / f"{name}.yaml").write_text(text)
    (files / "tiny.yaml").write_text(TINY)
    base_runs = top / "base-runs"
    env = {**os.environ, "PERFKIT_DATA": str(top / "base-data")}
    made = _run(["run", str(files / "tiny.yaml"), "--root", str(base_runs), "--run", BASE_RUN, "--no-metrics",
                 "--no-progress", "--json"], env)
    assert made.returncode == 0, made.stderr
    return Setup(top, files, base_runs)


def _case_dir(setup: Setup, case: Case, name: str) -> tuple[Path, list[str]]:
    """A directory of the case's own holding a copy of the finished run; the case's argv with its paths."""
    d = setup.top / name
    shutil.copytree(setup.base_runs, d / "runs")
    paths = {"runs": d / "runs", "reports": d / "reports", "dir": d, "files": setup.files}
    return d, [a.format(**paths) for a in shlex.split(case.argv)]


@pytest.fixture(scope="module")
def outcomes(setup: Setup) -> dict[str, tuple[subprocess.CompletedProcess, dict, dict]]:
    """Every case run once, two at a time: id -> (process, directory before, directory after).

    Each case is a process of its own running ``.venv/bin/perfkit``, forked from a server that has
    imported the third-party libraries perfkit imports (``tests/script_forks.py``): about 0.6 s of
    CPU a case instead of 1.6 s for a cold start. perfkit itself is imported by each case, after its
    environment is set. ``test_forked_cases_are_what_a_cold_start_gives`` checks cases both ways."""
    local = threading.local()
    servers: list[ScriptForks] = []
    lock = threading.Lock()

    def one(case: Case) -> tuple[str, tuple[subprocess.CompletedProcess, dict, dict]]:
        if not hasattr(local, "forks"):
            local.forks = ScriptForks(PERFKIT)
            with lock:
                servers.append(local.forks)
        d, argv = _case_dir(setup, case, case.id)
        before = _snapshot(d)
        proc = local.forks.run(argv, env={**os.environ, "PERFKIT_DATA": str(d / "data")}, cwd=ROOT)
        return case.id, (proc, before, _snapshot(d))

    try:
        with ThreadPoolExecutor(2) as pool:
            return dict(pool.map(one, CASES))
    finally:
        for server in servers:
            server.close()


#: Cases run both ways by ``test_forked_cases_are_what_a_cold_start_gives``: argparse's own refusal, a
#: refusal of perfkit's checks, a campaign file's, one that needs the run store.
COLD = ("command-unknown", "trial-duration-nan", "run-campaign-bad-param", "report-missing-baseline")


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(outcomes, case: Case) -> None:
    proc, before, after = outcomes[case.id]
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, f"exit {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("perfkit"), line
    assert "allowed" in line or "choose from" in line or "unrecognized" in line, line
    for word in case.says:
        assert word in line, f"{word!r} not in: {line}"
    assert proc.stdout == ""
    assert after == before, "the command wrote files: " + ", ".join(sorted(set(after) ^ set(before)) or
                                                                      [k for k in after if after[k] != before.get(k)])


@pytest.mark.parametrize("case_id", COLD)
def test_forked_cases_are_what_a_cold_start_gives(setup: Setup, outcomes, case_id: str) -> None:
    """The harness: a case run by a cold ``.venv/bin/perfkit`` process exits, prints and writes the
    same as its forked run (the paths in its argv differ only by the case directory's name)."""
    case = next(c for c in CASES if c.id == case_id)
    forked, before, after = outcomes[case_id]
    d, argv = _case_dir(setup, case, f"cold-{case_id}")
    cold_before = _snapshot(d)
    cold = _run(argv, {**os.environ, "PERFKIT_DATA": str(d / "data")})
    assert cold.returncode == forked.returncode
    assert cold.stdout == forked.stdout
    assert cold.stderr.replace(f"cold-{case_id}", case_id) == forked.stderr
    assert _snapshot(d) == cold_before and after == before


# -- unexpected errors: one line, --debug for the traceback ------------------------------------------------
BOOM = ("import sys; import perfkit.cli.trial as t; "
        "t.run = lambda args: {}['no such key']; "
        "from perfkit.cli import main; sys.exit(main(sys.argv[1:]))")


def _boom(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BOOM, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_an_unexpected_error_is_one_line_that_points_to_debug() -> None:
    proc = _boom("trial", "--generator", "sim", "--rate", "1Mpps")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("perfkit: internal error: KeyError: 'no such key'") and "--debug" in line


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_prints_the_traceback(where: str) -> None:
    args = ["trial", "--generator", "sim", "--rate", "1Mpps"]
    proc = _boom(*(["--debug", *args] if where == "before" else [*args, "--debug"]))
    assert proc.returncode == 2
    assert "Traceback (most recent call last)" in proc.stderr and "KeyError: 'no such key'" in proc.stderr


def test_debug_with_a_users_mistake_still_ends_with_the_one_line() -> None:
    proc = subprocess.run([str(PERFKIT), "--debug", "trial", "--generator", "sim"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("perfkit: error: --rate: None is not allowed")
