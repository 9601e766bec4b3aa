"""What both kinds of project of ``perfkit dataplane new`` hold alike: the XDP program (``XDP_TX``,
MAC addresses swapped, per-CPU counters indexed by a BTF enum), the TRex STL profile of its traffic
and the small campaign. ``@name@`` and ``@NAME@`` stand for the project's name (``perfkit.scaffold``)."""
from __future__ import annotations

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
dataplane: @dataplane@
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

GITIGNORE = "*.o\n__pycache__/\n.pytest_cache/\ndata/\nreports/\n"
