"""The project of ``perfkit dataplane new NAME --dir DIR``: the program, its description file
(``NAME.dataplane.yaml``), a model (the expected output frame), a TRex STL profile, a small
campaign, a Makefile and pytest tests that check the program against the model through
``BPF_PROG_TEST_RUN``."""
from __future__ import annotations

from perfkit.scaffold.program import C_SOURCE, CAMPAIGN, GITIGNORE, PROFILE

MAKEFILE = """# make: build @name@.o; make test: the tests (perfkit's Python, as root)
CLANG ?= clang
CFLAGS = -O2 -g -target bpf -I/usr/include/$(shell uname -m)-linux-gnu -Wall
OUT ?= @name@.o
PYTHON ?= python

all: $(OUT)

$(OUT): @name@.bpf.c
\t$(CLANG) $(CFLAGS) -c $< -o $@

test: $(OUT)
\t$(PYTHON) -m pytest -q tests

clean:
\trm -f @name@.o

.PHONY: all test clean
"""

DESCRIPTION = """# @name@ described for perfkit (perfkit's docs/descriptions.md has every key).
title: @name@ (MAC swap, XDP_TX)
program:
  build: make -s --no-print-directory OUT={output}   # the Makefile's flags; perfkit caches the object
  object: @name@.o
  sources: [@name@.bpf.c, Makefile]
  name: xdp_@name@
counters:
  map: @name@_stats
  names: enum @name@_stat
  packets: packets
  bytes: bytes
  forward: [tx]
  drop: [group_dst, runt]
traffic:
  profile: udp.py
  frame_size: size
  flows: flows
  tunables: {size: 64, flows: 1}
  verdict: XDP_TX
model: @name@_model:expected
"""

MODEL = '''"""The model of @name@.bpf.c: the frame it sends back for a frame it gets."""


def expected(frame: bytes, traffic=None) -> bytes | str:
    """The output frame (MAC addresses swapped), or the verdict of a frame it drops."""
    if len(frame) < 14 or frame[0] & 1:
        return "XDP_DROP"
    return frame[6:12] + frame[0:6] + frame[12:]
'''

TEST = '''"""@name@.bpf.c against its model, through BPF_PROG_TEST_RUN (perfkit's Python API; as root)."""
from pathlib import Path

import pytest

from perfkit.describe import load

HERE = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def nf():
    dp = load(HERE / "@name@.dataplane.yaml")
    traffic = dp.traffic(64, 4, dp.validate({}))
    dut = dp.load(traffic, 1, 1)
    yield dp, traffic, dut
    dut.close()


def test_frames_go_back_with_their_macs_swapped(nf):
    dp, traffic, dut = nf
    before = dut.counters()
    frame = traffic.packet(0)
    res = dut.program.test_run(frame)
    assert res.verdict == "XDP_TX"
    assert res.data_out == dp.emit(traffic, frame).out
    assert dp.check_output(traffic, res.data_out) is None
    assert dut.counters()["tx"] == before["tx"] + 1


def test_a_group_address_is_dropped_and_counted(nf):
    dp, traffic, dut = nf
    before = dut.counters()
    frame = b"\\xff" * 6 + traffic.packet(0)[6:]
    assert dut.program.test_run(frame).verdict == "XDP_DROP" == dp.emit(traffic, frame).verdict
    assert dut.counters()["group_dst"] == before["group_dst"] + 1
'''


README = """# @name@

An XDP program measured by perfkit: `make` builds it, `make test` checks it against its model,
and `perfkit run campaign.yaml --report` measures it on perfkit's local testbed.
"""

FILES = {"@name@.bpf.c": C_SOURCE, "Makefile": MAKEFILE, "@name@.dataplane.yaml": DESCRIPTION,
         "@name@_model.py": MODEL, "udp.py": PROFILE,
         "campaign.yaml": CAMPAIGN.replace("@dataplane@", "./@name@.dataplane.yaml"),
         "tests/test_@name@.py": TEST, ".gitignore": GITIGNORE, "README.md": README}
