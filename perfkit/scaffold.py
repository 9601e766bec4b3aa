"""``perfkit dataplane new NAME --dir DIR``: a small project of the user's own, outside perfkit.

It writes an XDP program that sends every frame back out of the port it came in by (``XDP_TX``)
with its MAC addresses swapped and counts per CPU (indexes from a BTF enum), its description file
(``NAME.dataplane.yaml``), a model (the expected output frame), a TRex STL profile, a small
campaign, a Makefile and pytest tests that check the program against the model through
``BPF_PROG_TEST_RUN``; then ``git init`` and a first commit.
"""
from __future__ import annotations

import keyword
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from perfkit.errors import ConfigError

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")

C_SOURCE = r"""/* @name@: an XDP program that sends every frame back out of the port it came in by (XDP_TX)
 * with its MAC addresses swapped, and counts what it does per CPU. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

/* The counters' indexes: perfkit names them from this enum's BTF (@NAME@_TX -> tx). */
enum @name@_stat { @NAME@_TX = 0, @NAME@_GROUP_DST, @NAME@_RUNT, @NAME@_STATS };

struct @name@_counter { __u64 packets; __u64 bytes; };

/* Per-CPU counters, one entry per member of enum @name@_stat. */
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, @NAME@_STATS);
         __type(key, __u32); __type(value, struct @name@_counter); } @name@_stats SEC(".maps");

/* The last outcome (it also puts enum @name@_stat into the object's BTF). */
enum @name@_stat @name@_last;

static __always_inline int count(enum @name@_stat s, __u64 len, int verdict)
{
    __u32 k = s;
    struct @name@_counter *c = bpf_map_lookup_elem(&@name@_stats, &k);
    @name@_last = s;
    if (c) { c->packets++; c->bytes += len; }
    return verdict;
}

SEC("xdp")
int xdp_@name@(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u64 len = end - data;
    struct ethhdr *eth = data;
    unsigned char tmp[ETH_ALEN];

    if ((void *)(eth + 1) > end)
        return count(@NAME@_RUNT, len, XDP_DROP);
    if (eth->h_dest[0] & 1)   /* a group address cannot be a source: not sent back */
        return count(@NAME@_GROUP_DST, len, XDP_DROP);
    __builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
    __builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
    return count(@NAME@_TX, len, XDP_TX);
}

char LICENSE[] SEC("license") = "GPL";
"""

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

PROFILE = '''"""A TRex STL profile: UDP from 198.18.0.1 to 198.19.0.1:5001, one source port per flow."""
import argparse

from trex_stl_lib.api import (IP, UDP, Ether, STLPktBuilder, STLProfile, STLScVmRaw, STLStream, STLTXCont,
                              STLVmFlowVar, STLVmWrFlowVar)


class Udp:
    def get_streams(self, tunables=(), **kwargs):
        p = argparse.ArgumentParser()
        p.add_argument("--size", type=int, default=64, help="frame size [bytes, FCS included]")
        p.add_argument("--flows", type=int, default=1, help="UDP source ports")
        args = p.parse_args(tunables)
        pkt = Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=10000, dport=5001, chksum=0)
        pkt = pkt / (b"\\0" * max(0, args.size - 4 - len(pkt)))
        vm = STLScVmRaw([STLVmFlowVar(name="sport", min_value=10000, max_value=10000 + args.flows - 1, size=2, op="inc"),
                         STLVmWrFlowVar(fv_name="sport", pkt_offset="UDP.sport")]) if args.flows > 1 else None
        return [STLStream(packet=STLPktBuilder(pkt=pkt, vm=vm), mode=STLTXCont(pps=1000))]


def register():
    return Udp()
'''

CAMPAIGN = """# A small campaign: two frame sizes, a max-rate trial and a short NDR search (a few minutes).
name: @name@
description: @name@ on perfkit's local testbed
dataplane: ./@name@.dataplane.yaml
frame_sizes: [64, 512]
flows: [1]
dut_cores: [1]
repeats: 1
generator:
  backend: xdp
  options: {}
  host_check_seconds: 1
methods:
  - method: maxrate
    params: {duration: 1}
  - method: ndrpdr
    params: {goals: [0.0], initial_duration: 0.25, final_duration: 0.5, relative_width: 0.1,
             max_trials: 8, latency_fractions: [1.0]}
metrics:
  enabled: false
"""

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

GITIGNORE = "*.o\n__pycache__/\n.pytest_cache/\ndata/\nreports/\n"

README = """# @name@

An XDP program measured by perfkit: `make` builds it, `make test` checks it against its model,
and `perfkit run campaign.yaml --report` measures it on perfkit's local testbed.
"""

FILES = {"@name@.bpf.c": C_SOURCE, "Makefile": MAKEFILE, "@name@.dataplane.yaml": DESCRIPTION,
         "@name@_model.py": MODEL, "udp.py": PROFILE, "campaign.yaml": CAMPAIGN,
         "tests/test_@name@.py": TEST, ".gitignore": GITIGNORE, "README.md": README}


@dataclass(frozen=True)
class Project:
    """A project written by ``new``."""

    dir: Path
    name: str
    files: tuple[str, ...]
    """Paths relative to ``dir``."""


def check(name: str, directory: Path) -> None:
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise ConfigError("NAME", name, "a lower-case identifier (a letter, then letters, digits, _; at most 32)")
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise ConfigError("--dir", str(directory), "a directory that does not exist or is empty")


def new(name: str, directory: str | Path) -> Project:
    """Write the project ``name`` into ``directory`` (created; it must not exist or be empty), and commit it."""
    d = Path(directory)
    check(name, d)
    files = []
    for rel, text in FILES.items():
        path = d / rel.replace("@name@", name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("@name@", name).replace("@NAME@", name.upper()))
        files.append(str(path.relative_to(d)))
    git = ["git", "-C", str(d), "-c", "user.name=perfkit", "-c", "user.email=perfkit@localhost"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", f"Start {name}: perfkit dataplane new"], check=True)
    return Project(d, name, tuple(files))
