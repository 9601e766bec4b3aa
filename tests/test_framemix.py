"""Frame mixes (IMIX): parsing, scenarios, line-rate math, the generator program's frames, the
throughput table and the plots' order."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import matplotlib
import pytest

from perfkit import analysis, framemix, plots
from perfkit.campaign import parse_campaign
from perfkit.errors import ConfigError
from perfkit.rate import Rate
from perfkit.scenario import Scenario
from perfkit.search.params import line_rate_pps
from perfkit.testbed.livegen import compile_mix
from perfkit.stl.signature import SIGNATURE
from perfkit.testbed.stlgen import show
from perfkit.trial import TrialResult
from tests.campaign_fixtures import produce_run
from tests.counting import QUIET_RATE

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[1]
IMIX_MEAN = (7 * 64 + 4 * 594 + 1518) / 12


def test_imix_is_the_simple_imix():
    mix = framemix.get("imix")
    assert (mix.sizes, mix.weights) == ((64, 594, 1518), (7, 4, 1))
    assert mix.mean_size == pytest.approx(361.8333, abs=1e-4) == pytest.approx(IMIX_MEAN)
    assert mix.frame_size == 362
    assert mix.mean_l1_bytes() == pytest.approx(IMIX_MEAN + 20)


@pytest.mark.parametrize("text, value", [("imix", "imix"), (" IMIX ", "imix"), ("128", 128), (64, 64), (9018, 9018)])
def test_a_frame_size_is_bytes_or_a_mix(text, value):
    assert framemix.parse_frame_size(text) == value


@pytest.mark.parametrize("text", ["imax", "63", 9019, True, 64.5, None, ""])
def test_anything_else_is_refused_naming_the_field(text):
    with pytest.raises(ConfigError, match=r"campaign.frame_sizes\[1\]: .* is not allowed; allowed: 64 .. 9018 bytes, "
                                          r"or imix"):
        framemix.parse_frame_size(text, "campaign.frame_sizes[1]")


def test_labels_and_order_put_imix_after_the_fixed_sizes():
    sizes = [(1518, ""), (362, "imix"), (64, ""), (9018, "")]
    ordered = sorted(sizes, key=lambda p: framemix.sort_key(*p))
    assert [framemix.label(*p) for p in ordered] == ["64", "1518", "9018", "imix"]
    assert framemix.label(362, float("nan")) == "362"   # a record older than frame mixes


@pytest.mark.parametrize("direction, overhead", [("dl", 0), ("ul", 36)])
def test_an_imix_scenario_and_its_line_rate(direction, overhead):
    sc = Scenario("pgwu", "imix", params={"direction": direction})
    assert (sc.frame_size, sc.frame_mix, sc.frame_label) == (362, "imix", "imix")
    assert sc.key == f"pgwu-{direction}-imix-1flow-1core"
    assert [t.frame_size for t, _ in sc.traffics()] == [64, 594, 1518]
    assert [w for _, w in sc.traffics()] == [7, 4, 1]
    assert sc.traffic().frame_size == 1518     # the DUT and the MTU are set up for the largest frames
    assert sc.wire_frame_size == pytest.approx(IMIX_MEAN + overhead)
    # 10GbE at IMIX: 10e9 / ((361.83 + 20) x 8) frames/s (uplink: each frame 36 bytes longer, GTP-U)
    assert line_rate_pps(sc) == pytest.approx(10e9 / ((IMIX_MEAN + overhead + 20) * 8))
    assert Rate.parse("5Gbps").pps(sc.wire_frame_size) == pytest.approx(line_rate_pps(sc) / 2)
    assert Scenario("pgwu", 362, params={"direction": direction}).key != sc.key


def test_a_mix_with_a_size_that_is_not_its_mean_is_refused():
    assert Scenario(frame_size=362, frame_mix="imix").frame_mix == "imix"
    with pytest.raises(ConfigError, match="frame_size: 64 is not allowed; allowed: 362"):
        Scenario(frame_size=64, frame_mix="imix")
    with pytest.raises(ConfigError, match="frame_mix: 'jumbo' is not allowed; allowed: .*imix"):
        Scenario(frame_mix="jumbo")
    with pytest.raises(ConfigError, match="frame_size: 'imix' is not allowed; allowed: >= 70 bytes .*smallest frame is 64"):
        Scenario("l4lb", "imix", params={"protocol": "tcp"})


def test_a_campaign_takes_imix_among_its_frame_sizes():
    c = parse_campaign(CAMPAIGN)
    assert c.frame_sizes == (64, "imix")
    assert [(s.frame_size, s.frame_mix) for s in c.scenarios()] == [(64, ""), (362, "imix")]
    for bad, allowed in (("[64, imax]", "'imax' is not allowed; allowed: 64 .. 9018 bytes, or imix"),
                         ("[64, '128']", "'128' is not allowed; allowed: 64 .. 9018 bytes, or imix"),
                         ("[imix, IMIX]", "'imix' is not allowed; allowed: each value once")):
        with pytest.raises(ConfigError, match=r"campaign.frame_sizes\[1\]: " + allowed):
            parse_campaign(CAMPAIGN.replace("[64, imix]", bad))


@pytest.mark.parametrize("dataplane, params, wire", [("pgwu", {"direction": "ul"}, (100, 630, 1554)),
                                                     ("pgwu", {"direction": "dl"}, (64, 594, 1518)),
                                                     ("l4lb", {}, (64, 594, 1518)), ("calib", {}, (64, 594, 1518))])
def test_the_generator_program_sends_the_mix_7_4_1_interleaved(dataplane, params, wire):
    """The real generator program (BPF_PROG_TEST_RUN): each size is the dataplane's own frame of that
    size, and every 12 frames hold 7, 4 and 1 of them, spread out (no run of the big ones)."""
    sc = Scenario(dataplane, "imix", params=params)
    compiled = compile_mix(sc.traffics())
    frames = show(compiled, 48)
    sizes = [len(f) + 4 for f in frames]
    for i in range(0, 48, 12):
        assert Counter(sizes[i:i + 12]) == {wire[0]: 7, wire[1]: 4, wire[2]: 1}
    assert sizes[:12] == [wire[i] for i in (0, 1, 0, 0, 1, 0, 2, 0, 1, 0, 1, 0)]
    by_size = {t.wire_frame_size: t for t, _ in sc.traffics()}
    for f in frames:   # each the dataplane's frame of its size, checksums right for its signature
        traffic = by_size[len(f) + 4]
        _, stream, seq, ts = SIGNATURE.unpack_from(f, traffic.field_engine().sig_offset)
        assert f == traffic.packet(0, seq, stream, ts)


def test_a_mix_trial_counts_l1_bits_of_the_frames_sent():
    sc = Scenario("calib", "imix")
    r = TrialResult.for_scenario(sc, wire_frame_size=362, generator="xdp", duration=1.0, intended_pps=1200,
                                 intended_packets=1200, tx_packets=1200, rx_packets=1200, tx_bytes=1200 * 4342 // 12,
                                 rx_bytes=1200 * 4342 // 12, elapsed=1.0)
    assert r.frame_mix == "imix" and r.scenario_key == "calib-imix-1flow-1core-w0"
    assert r.tx_bps_l1 == pytest.approx(1200 * (IMIX_MEAN + 20) * 8) == pytest.approx(r.rx_bps_l1)
    back = TrialResult.from_record(r.to_record())
    assert (back.frame_mix, back.frame_size) == ("imix", 362)
    old = {k: v for k, v in r.to_record().items() if k != "frame_mix"}
    assert TrialResult.from_record(old).frame_mix == ""


CAMPAIGN = """
name: imix-sim
dataplane: pgwu
params: {direction: dl}
frame_sizes: [64, imix]
flows: [1]
dut_cores: [1]
generator:
  backend: sim
  options: {model: sharp, threshold: 2Mpps}
methods:
  - method: ndrpdr
    params: {goals: [0.0], initial_duration: 0.5, final_duration: 1, relative_width: 0.01}
metrics: {enabled: false}
"""


@pytest.fixture(scope="module")
def imix_run(tmp_path_factory) -> analysis.RunData:
    tmp = tmp_path_factory.mktemp("imix")
    (tmp / "imix.yaml").write_text(CAMPAIGN)
    out = produce_run(tmp / "imix.yaml", tmp / "runs", "imix")
    assert out.status == "complete", out.units_failed
    return analysis.load_run("imix", tmp / "runs")


def test_the_throughput_table_has_imix_rows_in_frames_and_l1_bits(imix_run):
    tp = analysis.throughput_table(imix_run)
    assert list(tp["frame_mix"]) == ["", "imix"] and list(tp["frame_size"]) == [64, 362]
    imix = tp.iloc[1]
    assert imix["throughput_pps"] == pytest.approx(2e6, rel=0.02)     # the simulated DUT's limit, in frames/s
    assert imix["throughput_gbps"] == pytest.approx(imix["throughput_pps"] * (IMIX_MEAN + 20) * 8 / 1e9)
    fixed = tp.iloc[0]
    assert fixed["throughput_gbps"] == pytest.approx(fixed["throughput_pps"] * 84 * 8 / 1e9)
    pivot = analysis.throughput_pivot(tp, "throughput_gbps")
    assert [k[-1] for k in pivot.index] == ["64", "imix"]
    assert pivot.iloc[1, 0] == pytest.approx(imix["throughput_gbps"])


def test_plots_put_imix_after_the_fixed_sizes(imix_run):
    tp = analysis.throughput_table(imix_run)
    fig = plots.throughput_bars(tp.iloc[::-1], "throughput_mpps", "ndr")
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["64", "imix"]


def test_generators_that_send_no_mix_refuse_it_in_one_line():
    from perfkit.generators.trex import TRexGenerator
    with pytest.raises(ConfigError, match="frame_size: 'imix' is not allowed; allowed: a size in bytes with the trex "
                                          "generator"):
        TRexGenerator.check_scenario(Scenario(frame_size="imix"))


@pytest.mark.parametrize("argv, says", [(["trial", "--generator", "sim", "--rate", "1Mpps", "--frame-size", "imx"],
                                         "--frame-size: 'imx' is not allowed; allowed: a frame size, 64 .. 9018 bytes, or imix"),
                                        (["prog-bench", "--frame-size", "imix"], "frame_size: 'imix' is not allowed")])
def test_the_cli_refuses_a_bad_frame_size_in_one_line(argv, says):
    proc = subprocess.run([sys.executable, "-m", "perfkit", *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert says in proc.stderr, proc.stderr


def test_the_cli_runs_an_imix_trial_on_the_simulated_dut():
    proc = subprocess.run([sys.executable, "-m", "perfkit", "trial", "--generator", "sim", "--rate", "100%",
                           "--frame-size", "imix", "--direction", "dl", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert (d["frame_size"], d["frame_mix"]) == (362, "imix")
    assert d["intended_pps"] == pytest.approx(10e9 / ((IMIX_MEAN + 20) * 8))


@pytest.mark.slow   # the testbed or a real server: make test-slow (make test keeps 15 min)
def test_an_imix_trial_on_the_testbed_sends_and_counts_the_mix():
    """The local testbed: 1200 frames are 700, 400 and 100 of each size (each tester thread runs the
    mix), the sink gets them all back and every captured frame is what the DUT should emit. At
    ``QUIET_RATE``: at 100 kpps a 5.5 ms host stall outlasted the 2.6 ms a 256-frame ring lasts and
    CI lost 80 frames to it."""
    from perfkit.generators.xdp import XdpGenerator
    with XdpGenerator(Scenario(frame_size="imix", params={"direction": "dl"}), capture_count=64) as g:
        r = g.measure(QUIET_RATE, 1.0, packets=1200)
    assert (r.frame_size, r.frame_mix, r.wire_frame_size) == (362, "imix", 362)
    assert r.tx_packets == r.rx_packets == 1200 and r.tx_bytes == 700 * 64 + 400 * 594 + 100 * 1518
    assert r.rx_bytes == r.tx_bytes + 1200 * 36             # downlink: each frame GTP-U encapsulated
    assert r.mismatched_packets == 0 and r.reordered == 0 and r.duplicates == 0
    assert r.tx_bps_l1 == pytest.approx(r.tx_pps * (IMIX_MEAN + 20) * 8)
