"""xdp-tools' xdp-filter, a program perfkit did not write, measured on the local testbed: attached
and configured by its own CLI in the DUT's namespace (``DutProgram.attached_by_nf``), denied traffic
measured as a drop rate (XDP_DROP) and allowed traffic at the DUT's kernel (XDP_PASS)."""
from __future__ import annotations

import shutil

import pytest

from perfkit.generators.xdp import XdpGenerator
from perfkit.scenario import Scenario
from perfkit.search.binary import BinarySearch, binary_search
from tests.counting import QUIET_RATE
from tests.xdpfilter_dataplane import BPFFS_ROOT, registered

pytestmark = pytest.mark.skipif(shutil.which("xdp-filter") is None, reason="xdp-tools not installed")

PACKETS = 5_000


def _scenario(verdict: str) -> Scenario:
    return Scenario(dataplane="xdpfilter", frame_size=64, flows=4, params={"verdict": verdict})


@pytest.mark.parametrize("verdict", ["XDP_DROP", "XDP_PASS"])
def test_trial_counts_equal_xdp_filters_own(verdict: str) -> None:
    with registered():
        gen = XdpGenerator(_scenario(verdict), perf_stat=False)
        try:
            nf = gen.dut.nf
            ifname = nf.ifname
            assert nf.attached_by_nf and nf.program.name.startswith("xdpfilt_")
            # a host stall longer than the DUT's ring lasts loses frames at the kernel, not in
            # xdp-filter: such a trial is measured again (at most 3 times), as searches do
            for _ in range(3):
                before = nf.status()
                r = gen.measure(QUIET_RATE, 5.0, packets=PACKETS)
                after = nf.status()
                if r.rx_packets == PACKETS or not any("stalled" in n for n in r.notes):
                    break
        finally:
            gen.close()
    own = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
    # every packet offered got the verdict, and perfkit counted what xdp-filter counted
    assert r.tx_packets == PACKETS and r.rx_packets == PACKETS, r.notes
    assert own == {verdict: PACKETS}
    assert r.verdicts == {verdict: PACKETS} and r.verdicts_from == "program"
    assert r.dut_drops == {} and r.lost_packets == 0
    # the DUT's ns per packet: the kernel's BPF statistics of the program xdp-filter attached
    assert r.bpf_ns_per_packet is not None and 0 < r.bpf_ns_per_packet < 10_000
    assert not (BPFFS_ROOT / ifname).exists()   # torn down: unloaded, its bpffs gone


def test_teardown_on_failure_unloads() -> None:
    """A set-up that fails after xdp-filter was loaded (a generator option refused) leaves nothing."""
    with registered():
        with pytest.raises(Exception):
            XdpGenerator(_scenario("XDP_DROP"), perf_stat=False, speed_reference="bogus")
    assert not BPFFS_ROOT.exists() or not any(BPFFS_ROOT.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("verdict", ["XDP_DROP", "XDP_PASS"])
def test_ndr_search(verdict: str) -> None:
    with registered():
        with XdpGenerator(_scenario(verdict), perf_stat=False) as gen:
            res = binary_search(gen, BinarySearch(duration=1.0, max_rate=3e6, relative_width=0.05))
    good = [t for t in res.trials if t.lost_packets == 0]
    assert res.lower_bound and good
    assert all(t.verdicts.get(verdict, 0) == t.rx_packets for t in res.trials)
    print(f"{verdict}: NDR {res.lower_bound:.0f} pps (limited by {res.limited_by or '-'}), "
          f"{[round(t.bpf_ns_per_packet or 0, 1) for t in good][-1]} ns/packet (BPF stats)")
