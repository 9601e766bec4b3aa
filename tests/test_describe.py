"""Dataplane descriptions (``perfkit.describe``): a program perfkit did not write, measured from a YAML file.

The program (``tests/describe/mynf.bpf.c``, of the shape real NFs have: a struct-keyed hash map, an
array, a per-CPU array of counters indexed by a BTF enum, an LPM trie, ``.rodata`` configuration, a
devmap) is copied to a scratch directory outside the tree and built there by the description's own
build command. Its configuration is written through BTF and checked by BPF_PROG_TEST_RUN; every bad
description is refused in one line (exit 2) and leaves nothing loaded or attached; one real trial
runs on the local testbed.
"""
from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from perfkit import dataplanes
from perfkit.btf import Btf
from perfkit.describe import load
from perfkit.describe.btfconfig import encode
from perfkit.describe.dataplane import attached_program
from perfkit.dataplane import NotProvided
from perfkit.errors import ConfigError
from perfkit.libbpf import BpfObject
from perfkit.testbed.topology import Testbed

HERE = Path(__file__).resolve().parent / "describe"
CFLAGS = "-O2 -g -target bpf -I/usr/include/$(uname -m)-linux-gnu"
PROGRAM = "xdp_mynf"



def base() -> dict:
    """The description every test varies (``tests/describe/mynf.dataplane.yaml``, the docs' example)."""
    return yaml.safe_load((HERE / "mynf.dataplane.yaml").read_text())


@pytest.fixture(scope="module")
def scratch(tmp_path_factory, monkeypatch_module):
    """A directory outside the tree with the NF's sources, and a cache of its own."""
    d = tmp_path_factory.mktemp("mynf")
    for f in ("mynf.bpf.c", "udp.py", "mynf_model.py"):
        shutil.copy(HERE / f, d / f)
    monkeypatch_module.setenv("PERFKIT_CACHE", str(tmp_path_factory.mktemp("cache")))
    return d


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def write(d: Path, desc: dict, name: str = "mynf") -> Path:
    path = d / f"{name}.dataplane.yaml"
    path.write_text(yaml.safe_dump(desc))
    return path


def loaded(name: str = PROGRAM) -> int:
    """Programs of that name loaded in the kernel."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True, check=True).stdout
    return sum(1 for p in json.loads(out) if p.get("name") == name)


def udp(src: str = "198.18.0.1", dst: str = "198.19.0.1", dport: int = 5001) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    return bytes(Ether(src="02:00:00:00:01:02", dst="02:00:00:00:01:01") / IP(src=src, dst=dst) /
                 UDP(sport=1234, dport=dport, chksum=0) / (b"\0" * 18))


@pytest.fixture(scope="module")
def nf(scratch):
    """The description's dataplane and its program, loaded for the default scenario (ports 1 and 2:
    this namespace's, so that the devmap takes them)."""
    dp = load(write(scratch, base()))
    traffic = dp.traffic(64, 1, dp.validate({}))
    dut = dp.load(traffic, 1, 1)
    yield dp, traffic, dut
    dut.close()


# -- what the description sets up -------------------------------------------------------------------
def test_the_written_configuration_forwards_and_counts(nf):
    dp, traffic, dut = nf
    before = dut.counters()
    res = dut.program.test_run(traffic.packet(0))
    assert res.verdict == "XDP_REDIRECT"                      # the hash entry by struct fields -> backend 1
    assert res.data_out[:12].hex() == "020000000202" "020000000201"  # the array entry's MACs: {mac_p1}, {mac_b}
    assert dp.check_output(traffic, res.data_out) is None      # the model agrees
    after = dut.counters()
    assert after["fwd"] == before["fwd"] + 1 and set(after) == {"fwd", "no_flow", "not_ip", "denied"}


def test_rodata_global_and_lpm_trie_decide_drops(nf):
    dp, _, dut = nf
    before = dut.counters()
    assert dut.program.test_run(udp(dport=5002)).verdict == "XDP_DROP"     # no flow, default_backend = ~0
    assert dut.program.test_run(udp(src="198.18.2.1")).verdict == "XDP_DROP"  # not in the LPM trie
    assert dut.program.test_run(udp(src="198.18.1.9")).verdict == "XDP_REDIRECT"  # the Python hook's prefix
    after = dut.counters()
    assert after["no_flow"] - before["no_flow"] == 1 and after["denied"] - before["denied"] == 1
    assert dp.emit(None, udp(dport=5002)).verdict == "XDP_DROP"


def test_counters_are_the_dataplanes_for_the_exporter(nf):
    dp, _, dut = nf
    assert dp.forward_counters == {"fwd"}
    assert [s.name for s in dp.counter_specs()] == ["perfkit_mynf_packets_total", "perfkit_mynf_bytes_total"]
    cells = dut.counter_cells()
    assert {c.labels[0] for c in cells} == {"fwd", "no_flow", "not_ip", "denied"}
    assert {(c.metric.split("_")[2], c.offset) for c in cells} == {("packets", 0), ("bytes", 8)}
    assert set(dut.map_ids()) == {"stats"}
    assert list(dut.object_hashes().values())[0] != ""


def test_the_exporter_serves_the_counters(nf):
    from perfkit.metrics.exporter import DutCollector, describe
    dp, traffic, dut = nf
    dut.program.test_run(traffic.packet(0))
    collector = DutCollector(describe(dp, dut, "abcdef"))
    try:
        served = collector.read()
    finally:
        collector.close()
    counts = dut.counters()
    assert served[("perfkit_mynf_packets_total", ("fwd",))] == counts["fwd"] > 0
    assert served[("perfkit_mynf_bytes_total", ("fwd",))] == 60 * counts["fwd"]


def test_params_come_from_the_file_its_defines_and_the_profiles_tunables(nf):
    dp, traffic, _ = nf
    by_name = {p.name: p for p in dp.params}
    assert set(by_name) == {"backend", "mynf_max_backends", "dport"}
    assert by_name["mynf_max_backends"].build and not by_name["backend"].build
    assert traffic.wire_frame_size == 64 and traffic.verdict == "XDP_REDIRECT" and dp.has_model
    with pytest.raises(ConfigError, match="mynf_max_backends"):
        dp.validate({"mynf_max_backends": 100})


def test_a_build_option_builds_another_object_once(scratch):
    dp = load(write(scratch, base(), "opts"))
    from perfkit.describe.build import object_path
    a, b = object_path(dp.desc, {"mynf_max_backends": 8}), object_path(dp.desc, {"mynf_max_backends": 32})
    assert a != b and a.is_file() and object_path(dp.desc, {"mynf_max_backends": 8}) == a


def test_typed_values_follow_btf_byte_order(nf):
    _, _, dut = nf
    btf = dut._maps["flows"].btf
    key = dut._maps["flows"].key_type
    raw = encode(btf, key, {"daddr": "198.19.0.1", "dport": 5001, "proto": 17}, "k")
    assert raw == ipaddress.IPv4Address("198.19.0.1").packed + (5001).to_bytes(2, "big") + bytes([17, 0])
    with pytest.raises(ConfigError, match=r"k\.dport: 70000 .*0 \.\. 65535 \(__be16, network byte order\)"):
        encode(btf, key, {"dport": 70000}, "k")
    with pytest.raises(ConfigError, match=r"k\.port: .*a field of struct flow_key: daddr, dport, proto, pad"):
        encode(btf, key, {"port": 1}, "k")


# -- refusals: one line, exit 2, nothing left loaded or attached ---------------------------------------
def refused(scratch: Path, desc: dict, match: str, name: str = "bad") -> str:
    before = loaded()
    dp = None
    with pytest.raises(ConfigError, match=match) as err:
        dp = load(write(scratch, desc, name))
        dp.load(dp.traffic(64, 1, dp.validate({})), 1, 1)
    assert loaded() == before, "a refused description left its program loaded"
    assert err.value.exit_code == 2 and "\n" not in str(err.value)
    return str(err.value)


def test_a_program_not_in_the_object_is_refused_listing_those_that_are(scratch):
    desc = base()
    desc["program"]["name"] = "xdp_other"
    refused(scratch, desc, r"program\.name: 'xdp_other' .*a program of mynf\.o: xdp_mynf")


def test_a_map_or_field_not_in_btf_is_refused(scratch):
    desc = base()
    desc["config"]["maps"]["sessions"] = [{"key": 1, "value": 2}]
    refused(scratch, desc, r"config\.maps: 'sessions' .*allowed: a map of the program: allowed, backends, flows")
    desc = base()
    desc["config"]["maps"]["flows"][0]["key"]["sport"] = 1
    refused(scratch, desc, r"config\.maps\.flows\[0\]\.key\.sport: .*daddr, dport, proto, pad")
    desc = base()
    desc["config"]["globals"]["max_flows"] = 1
    refused(scratch, desc, r"config\.globals\.max_flows: .*default_backend, last_stat, seen_ttl, use_devmap")


NO_BTF = """#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
const volatile __u32 verdict = XDP_PASS;
SEC("xdp") int xdp_mynf(struct xdp_md *ctx) { return verdict; }
char LICENSE[] SEC("license") = "GPL";
"""


def test_an_object_without_btf_is_refused_where_names_are_used(scratch):
    (scratch / "nobtf.bpf.c").write_text(NO_BTF)
    desc = base()
    desc["program"].update(build=f"clang {CFLAGS.replace(' -g', '')} -c nobtf.bpf.c -o {{output}}",
                           sources=["nobtf.bpf.c"], defines={})
    desc["config"] = {"globals": {"verdict": 1}}
    desc.pop("counters")
    refused(scratch, desc, r"config\.globals: \['verdict'\] .*an object with BTF \(built with clang -g\)")
    desc = base()  # BTF-defined maps without BTF: libbpf cannot open it
    desc["program"]["build"] = desc["program"]["build"].replace(" -g ", " ")
    refused(scratch, desc, r"program\.object: .*maps defined in \.maps need BTF: clang -g")


def test_a_value_that_does_not_fit_its_field_is_refused(scratch):
    desc = base()
    desc["config"]["maps"]["backends"][0]["value"]["dst_mac"] = "02:00:00:00:02"
    refused(scratch, desc, r"backends\[0\]\.value\.dst_mac: '02:00:00:00:02' .*a MAC address")
    desc = base()
    desc["config"]["globals"]["use_devmap"] = 256
    refused(scratch, desc, r"globals\.use_devmap: 256 .*0 \.\. 255 \(__u8\)")


def test_a_verifier_rejection_is_refused_with_its_last_lines(scratch):
    desc = base()
    desc["program"]["defines"]["MYNF_BAD"] = 2000
    msg = refused(scratch, desc, r"program\.name: 'xdp_mynf' .*verifier accepts; it said: ")
    assert "invalid access to packet" in msg or "R" in msg.split("it said:")[1]


def test_a_failing_build_is_refused_with_its_command_and_output(scratch):
    desc = base()
    desc["program"]["build"] = desc["program"]["build"].replace("mynf.bpf.c", "missing.bpf.c")
    refused(scratch, desc, r"program\.build: 'clang .*missing\.bpf\.c.*failed with exit status 1: .*missing\.bpf\.c")


def test_a_bad_description_exits_2_in_one_line(scratch, perfkit_module):
    desc = base()
    desc["traffic"]["verdict"] = "XDP_FORWARD"
    path = write(scratch, desc, "verdict")
    r = perfkit_module.run(["trial", "--dataplane", str(path), "--rate", "1kpps", "--duration", "0.1"])
    assert r.returncode == 2
    assert "traffic.verdict: 'XDP_FORWARD' is not allowed; allowed: XDP_REDIRECT, XDP_TX, XDP_PASS, XDP_DROP" in r.stderr


@pytest.mark.slow   # a testbed and a trial, the exporter's start: 4.5 to 7 s
def test_perfkit_exporter_serves_the_counters_of_a_descriptions_trial(scratch):
    """A trial on the testbed, then ``perfkit exporter`` on the loaded description (as a lab host's
    agent starts it) scraped over HTTP: the BTF enum's names, the DUT's own counts."""
    from perfkit.generators import create
    from perfkit.scenario import Scenario
    path = write(scratch, base())
    with create("xdp", Scenario(dataplane=str(path), frame_size=64)) as gen:
        r = gen.measure(5000, 0.3)
        counts = gen.dut.counters()
        proc = subprocess.Popen([sys.executable, "-m", "perfkit.cli.exporter", "--dut", str(gen.export.path), "--json"],
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            url = json.loads(proc.stdout.readline())["url"]
            text = requests.get(url, timeout=5).text
        except BaseException:
            proc.kill()
            raise
    assert proc.wait(30) == 0, proc.stderr.read()   # the dataplane unloaded: the exporter stopped by itself
    served = {(m.group(1), m.group(2)): float(m.group(3)) for m in re.finditer(
        r'^perfkit_mynf_(packets|bytes)_total{dataplane="mynf",outcome="(\w+)",testbed="\w+"} (\S+)$', text, re.M)}
    assert {o for _, o in served} == {"fwd", "no_flow", "not_ip", "denied"}, text   # enum mynf_stat's names
    assert r.tx_packets > 0 and served[("packets", "fwd")] == counts["fwd"] >= r.rx_packets > 0
    assert served[("bytes", "fwd")] == 60 * counts["fwd"]                           # 64 B less the FCS
    assert all(served[(u, o)] == 0 for u in ("packets", "bytes") for o in ("no_flow", "not_ip", "denied"))


# -- prog-bench ---------------------------------------------------------------------------------------
def test_prog_bench_runs_the_descriptions_program_on_its_profiles_frame(scratch):
    from perfkit.progbench import prog_bench
    path = write(scratch, base(), "bench")
    before = loaded()
    d = prog_bench(str(path), 64, rounds=3, repeat=2000).to_dict()   # what ``prog-bench --json`` prints
    # the configured flow's path, counted by the program's own BTF-enum-named counter, every run
    assert d["path_verified"] and d["path_counter"] == "fwd" and d["path_packets"] == 3 * 2000
    assert d["params"] == {"backend": 1, "mynf_max_backends": 16, "dport": 5001, "profile": "udp.py"}
    assert d["ns_per_packet"] > d["baseline_ns_per_packet"] > 0 and d["wire_frame_size"] == 64
    assert loaded() == before                                      # nothing left loaded


def test_prog_bench_refuses_a_frame_off_the_forwarding_path_and_a_description_without_counters(scratch):
    from perfkit.progbench import prog_bench
    desc = base()
    desc["config"]["maps"]["flows"][0]["key"]["dport"] = 5002   # the profile's frame has no flow
    before = loaded()
    with pytest.raises(ConfigError, match=r"traffic.profile: 'udp.py' .* as forwarded \(fwd\); it got XDP_DROP "
                                          r"and raised no_flow"):
        prog_bench(str(write(scratch, desc, "noflow")), 64, rounds=3, repeat=1000)
    assert loaded() == before                                      # the refused program was unloaded
    desc = base()
    desc.pop("counters")
    with pytest.raises(NotProvided, match="dataplane nocount: no prog-bench support: no counters to prove the path"):
        prog_bench(str(write(scratch, desc, "nocount")))            # a ConfigError: one line, exit 2


# -- attached by the NF's own loader ----------------------------------------------------------------
@pytest.fixture(scope="module")
def testbed():
    with Testbed() as tb:
        yield tb


def by_setup(scratch: Path, setup: str) -> dict:
    desc = base()
    desc["config"].pop("globals")
    desc["config"].pop("python")
    desc["attach"] = {"setup": setup, "teardown": "ip link set dev {dev_a} xdpdrv off"}
    return desc


def test_setup_attaches_and_perfkit_finds_configures_and_tears_down(scratch, testbed):
    desc = by_setup(scratch, "ip link set dev {dev_a} xdpdrv obj {object} program xdp_mynf")
    dp = load(write(scratch, desc, "setup"))
    traffic = dp.traffic(64, 1, dp.validate({}))
    dut = dp.load(traffic, testbed.a.ifindex, testbed.b.ifindex)  # finds this process's testbed
    try:
        assert dut.attached_by_nf and dut.program.name == PROGRAM
        assert attached_program(testbed.dut_ns, testbed.a.ifindex) == dut.program.info().id
        before = dut.counters()["fwd"]
        assert dut.program.test_run(traffic.packet(0)).verdict == "XDP_REDIRECT"  # configured through its maps
        assert dut.counters()["fwd"] == before + 1
    finally:
        dut.close()
    assert attached_program(testbed.dut_ns, testbed.a.ifindex) == 0  # the teardown ran


def test_a_setup_that_attaches_nothing_is_refused(scratch, testbed):
    desc = by_setup(scratch, "true")
    dp = load(write(scratch, desc, "nothing"))
    with pytest.raises(ConfigError, match=r"attach\.setup: 'true' .*attaches an XDP program to d\w+a .*it attached nothing"):
        dp.load(dp.traffic(64, 1, dp.validate({})), testbed.a.ifindex, testbed.b.ifindex)
    assert attached_program(testbed.dut_ns, testbed.a.ifindex) == 0


#: xdp-filter described for perfkit, as a user would (attached and configured by its own CLI).
XDP_FILTER = HERE.parent.parent / "examples" / "xdp-filter.dataplane.yaml"


@pytest.mark.skipif(shutil.which("xdp-filter") is None, reason="xdp-tools' xdp-filter is not installed")
def test_xdp_filter_attached_by_its_own_cli_counts_as_its_status_does(scratch, testbed):
    """A program perfkit did not build or load: xdp-filter denies UDP port 5001; perfkit finds the
    program on the DUT port and reads xdp-filter's own counters, which equal ``xdp-filter status``."""
    dp = load(XDP_FILTER)
    traffic = dp.traffic(64, 1, dp.validate({}))
    dut = dp.load(traffic, testbed.a.ifindex, testbed.b.ifindex)
    try:
        assert dut.attached_by_nf and dut.program.name == "xdpfilt_alw_all"
        for _ in range(3):
            assert dut.program.test_run(traffic.packet(0)).verdict == "XDP_DROP"
        assert dut.program.test_run(udp(dport=5002)).verdict == "XDP_PASS"
        status = subprocess.run(["nsenter", f"--net=/run/netns/{testbed.dut_ns}", "xdp-filter", "status"],
                                capture_output=True, text=True, check=True).stdout
        own = {line.split()[0]: int(line.split()[1]) for line in status.splitlines()
               if line.strip().startswith("XDP_") and "pkts" in line}
        counts = dut.counters()
        assert counts["drop"] == own["XDP_DROP"] == 3   # the port's own frames (its peer's) may pass too
        assert counts["pass"] == own["XDP_PASS"] >= 1
        assert dp.forward_counters == {"drop"} and traffic.verdict == "XDP_DROP" and not dp.has_model
    finally:
        dut.close()
    assert attached_program(testbed.dut_ns, testbed.a.ifindex) == 0


# -- everywhere a dataplane is taken ----------------------------------------------------------------
def test_dataplanes_get_takes_the_path(scratch):
    path = write(scratch, base(), "get")
    dp = dataplanes.get(str(path))
    assert dp.name == "get" and dataplanes.get(str(path)) is dp
    from perfkit.scenario import Scenario
    s = Scenario(dataplane=str(path), frame_size=64)
    assert s.key.startswith("get-64B-1flow-1core")


def test_a_campaigns_dataplane_is_relative_to_the_campaign_file(scratch):
    from perfkit.campaign.schema import load_campaign
    write(scratch, base(), "camp")
    sub = scratch / "campaigns"
    sub.mkdir(exist_ok=True)
    (sub / "c.yaml").write_text("dataplane: ../camp.dataplane.yaml\nparams: {backend: [1, 2]}\nframe_sizes: [64]\n"
                                "methods: [{method: maxrate, params: {duration: 1}}]\n")
    c = load_campaign(sub / "c.yaml")
    assert c.dataplane == str((scratch / "camp.dataplane.yaml").resolve())


def test_a_real_trial_of_the_description(scratch, perfkit_module):
    path = write(scratch, base(), "trial")
    r = perfkit_module.run(["trial", "--dataplane", str(path), "--backend", "1", "--rate", "20kpps",
                            "--duration", "0.3", "--json"])
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    lost = d["dut_drops"].get("rx_ring_full", 0) + d["tester_drops"].get("rx_ring_full", 0)
    assert d["tx_packets"] > 0 and d["rx_packets"] + lost == d["tx_packets"]
    assert set(d["dut_drops"]) <= {"rx_ring_full"} and d["mismatched_packets"] == 0
    assert d["params"] == {"backend": 1, "mynf_max_backends": 16, "dport": 5001}
    assert not any("output not checked" in n for n in d["notes"])


@pytest.mark.slow
def test_a_trial_without_a_model_counts_and_says_output_is_not_checked(scratch):
    from perfkit.generators import create
    from perfkit.scenario import Scenario
    desc = base()
    desc.pop("model")
    path = write(scratch, desc, "nomodel")
    assert not dataplanes.get(str(path)).has_model
    with create("xdp", Scenario(dataplane=str(path), frame_size=128)) as gen:
        r = gen.measure(10_000, 0.3)
        counts = gen.dut.counters()
    assert any(n.startswith("output not checked: no model") for n in r.notes)
    lost = r.dut_drops.get("rx_ring_full", 0) + r.tester_drops.get("rx_ring_full", 0)  # the host's, not the NF's
    assert r.tx_packets > 0 and r.rx_packets + lost == r.tx_packets, (r.dut_drops, r.tester_drops, r.notes)
    assert counts["fwd"] >= r.rx_packets and r.wire_frame_size == 128
