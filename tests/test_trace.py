"""perfkit trace: the path of perfkit's packets through the DUT's kernel, traced by bpftrace."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from perfkit.trace import TracedPacket, gso_names, parse, script, summarize
from tests.conftest import ROOT

#: What bpftrace prints for three packets with GRO on: 1 held (then into the stack with 3 segments), 2 and 3
#: merged into it; and one packet with GRO off, dropped by the socket's filter. Ids, time [ns], CPU, event,
#: gso_type, gso_segs, len, detail. Lines of untraced skbs (id 0) and noise are left out.
GRO_ON = """\
P 1 1000000 1 gro_entry 0 0 50
P 2 1009000 1 gro_entry 0 0 50
P 1 1001500 1 gro_exit 0 0 50 2
P 2 1017000 1 gro_exit 0 0 50 1
P 3 1020000 1 gro_entry 0 0 50
P 3 1028000 1 gro_exit 0 0 50 0
P 0 1028100 1 gro_exit 0 0 50 3
Attaching 9 probes...
P 1 1100000 1 stack 131072 3 110
P 1 1150000 1 kfree_skb 131072 3 110 udp_queue_rcv_one_skb 5
"""
GRO_OFF = """\
P 1 5000 0 gro_entry 0 0 50
P 1 12000 0 gro_exit 0 0 50 3
P 1 82000 0 stack 0 1 50
P 1 131000 0 kfree_skb 0 1 50 udp_queue_rcv_one_skb 5
"""


def test_the_paths_and_the_summary_of_a_trace_with_gro_on():
    packets = parse(GRO_ON.splitlines())
    assert [p.id for p in packets] == [1, 2, 3]
    head = packets[0]
    assert [s.function for s in head.steps] == ["napi_gro_receive", "napi_gro_receive", "__netif_receive_skb_core",
                                               "kfree_skb"]
    assert [s.dt_us for s in head.steps] == [0.0, 1.5, 98.5, 50.0]
    assert head.gro_result == "GRO_HELD" and not head.merged and head.delivered_segs == 3
    assert head.steps[2].gso_type == "UDP_L4" and head.steps[2].gso_segs == 3
    assert head.steps[3].detail == "from udp_queue_rcv_one_skb, drop reason SOCKET_FILTER"
    assert packets[1].merged and packets[1].gro_result == "GRO_MERGED_FREE" and packets[1].delivered_segs is None
    assert packets[2].gro_result == "GRO_MERGED" and "skb_gro_receive" in packets[2].steps[-1].detail
    s = summarize(packets)
    assert (s.packets, s.merged, s.delivered, s.delivered_aggregated, s.segments_delivered, s.max_segs) == \
        (3, 2, 1, 1, 3, 3)
    assert s.gro_results == {"GRO_HELD": 1, "GRO_MERGED_FREE": 1, "GRO_MERGED": 1} and s.gro_merged


def test_a_trace_with_gro_off_shows_no_merge():
    packets = parse(GRO_OFF.splitlines())
    s = summarize(packets)
    assert packets[0].gro_result == "GRO_NORMAL" and packets[0].delivered_segs == 1
    assert (s.merged, s.delivered_aggregated, s.gro_merged) == (0, 0, False)
    assert summarize([TracedPacket(1)]).gro_merged is False


def test_gso_type_flags_by_name_and_the_script_matches_the_namespace_port_and_signature():
    assert gso_names(0) == "-" and gso_names(1 << 17 | 1 << 18) == "UDP_L4|FRAGLIST" and gso_names(1 << 8) == "IPXIP4"
    bt = script(4026532000, 9, 5, 3)
    assert "ns.inum == 4026532000" in bt and "== 2304" in bt and "== 19280" in bt   # port 9, magic 0x4B50
    assert "@n < 5" in bt and "@t >= 30" in bt


def _bpftrace_programs() -> set[int]:
    """Programs that a bpftrace process attached, as ``bpftool perf`` lists them."""
    pids = {int(p) for p in subprocess.run(["pgrep", "-x", "bpftrace"], capture_output=True, text=True).stdout.split()}
    out = json.loads(subprocess.run(["bpftool", "perf", "show", "-j"], capture_output=True, text=True).stdout or "[]")
    return {a["prog_id"] for a in out if a.get("pid") in pids}


@pytest.mark.slow
def test_the_trace_shows_gro_merging_with_gro_on_and_not_with_gro_off_and_leaves_nothing_attached():
    """One command each, on the real testbed: PGW-U direction=host traffic at full speed, 32 packets traced."""
    summary = {}
    for gro in ("on", "off"):
        proc = subprocess.run([sys.executable, "-m", "perfkit", "trace", "--direction", "host", "--knob", f"gro={gro}",
                               "--packets", "32", "--seconds", "20", "--json"], cwd=ROOT, capture_output=True,
                              text=True, timeout=150)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["knobs"] == {"gro": gro} and len(out["packets"]) == 32
        assert out["attached"] == 8 and out["attached_after"] == 0 and out["lost_events"] == 0
        assert out["stopped_by"] == "packets"
        summary[gro] = out["summary"]
    on, off = summary["on"], summary["off"]
    assert on["gro_merged"] and on["merged"] > 0 and on["max_segs"] > 1
    assert not off["gro_merged"] and off["merged"] == 0 and off["gro_results"] == {"GRO_NORMAL": 32}
    assert off["max_segs"] == 1
    assert not _bpftrace_programs()


@pytest.mark.slow
def test_sigterm_while_tracing_stops_the_tracer_and_leaves_nothing_attached():
    proc = subprocess.Popen([sys.executable, "-m", "perfkit", "trace", "--direction", "host", "--rate", "1kpps",
                             "--packets", "10000", "--seconds", "60", "--duration", "60"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not _bpftrace_programs() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        attached = _bpftrace_programs()
        assert attached, "the tracer never attached"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err, err
    listed = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True).stdout)
    assert not attached & {p["id"] for p in listed}
    assert subprocess.run(["pgrep", "-x", "bpftrace"], capture_output=True).returncode == 1


def test_the_python_api_refuses_what_the_command_line_refuses_before_any_testbed():
    from perfkit.cli import trace as cli
    from perfkit.errors import ConfigError
    from perfkit.scenario import Scenario
    from perfkit import trace as api

    assert (api.PACKETS_MAX, api.SECONDS_MAX) == (cli.PACKETS_MAX, cli.SECONDS_MAX)
    for kwargs, name in (({"packets": 0}, "--packets"), ({"seconds": 121}, "--seconds")):
        with pytest.raises(ConfigError) as err:
            api.trace(Scenario(params={"direction": "host"}), **kwargs)
        assert err.value.field == name
    with pytest.raises(ConfigError) as err:
        api.trace(Scenario(params={"direction": "ul"}))
    assert err.value.field == "traffic" and "passes to the DUT's kernel" in str(err.value)


def test_a_tracer_that_cannot_attach_says_why_in_one_line_and_leaves_no_process():
    from perfkit.errors import PerfkitError
    from perfkit.trace import Tracer

    with pytest.raises(PerfkitError) as err:
        Tracer("tracepoint:net:no_such_tracepoint { exit(); }")
    assert "did not attach" in str(err.value) and "\n" not in str(err.value)
    assert subprocess.run(["pgrep", "-x", "bpftrace"], capture_output=True).returncode == 1
