"""What kind of work a function of the DUT's packet path is: the XDP program itself, a BPF helper,
the driver, GRO, the stack, the scheduler or other.

A kind is read from the function's name alone (first rule that matches, in ``KIND_RULES`` order),
so that a function has one kind wherever it appears in the stacks. BPF programs are named
``bpf_prog_<tag>_<function>`` by the kernel (``perfkit.perf.folded``); their subprograms (a
``bpf_loop`` callback, a static function not inlined) too.
"""
from __future__ import annotations

import re

from perfkit.perf.folded import bpf_program_name, strip_annotation

#: The kinds, in the order tables show them, with what each holds.
KINDS = {
    "program": "the XDP program itself and its subprograms (bpf_prog_* symbols)",
    "helper": "BPF helpers, maps and the BPF run-time the program calls (bpf_*, *_map_*_elem, ...)",
    "driver": "the network device's driver (veth_*, and the NIC drivers' own prefixes)",
    "gro": "generic receive offload (*gro*)",
    "stack": "the kernel's network stack: NAPI, XDP redirect, skb, IP, UDP, TCP, checksums",
    "scheduler": "the scheduler: context switches, wake-ups, load tracking",
    "other": "anything else: interrupts, timers, RCU, memory, user space",
}

#: (kind, pattern of the function's name) in the order they are tried; ``program`` comes first, by
#: ``bpf_program_name``.
KIND_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple((k, re.compile(p)) for k, p in (
    ("gro", r"(^|_)gro(_|$)"),
    ("helper", r"^(__)?bpf_|_map_(lookup|update|delete|push|pop|peek)_elem|^(__)?htab_|^array_map_|"
               r"^(__)?percpu_array_|^(__)?ringbuf_|^trie_|^bpf_loop$|^lookup_(nulls_)?elem_raw$|^(__)?jhash"),
    ("driver", r"^(veth|virtnet|virtqueue|vring|mlx[45]e?|ixgbe|i40e|ice|igb|igc|bnxt|ena|e1000e?|tun)_"),
    ("scheduler", r"^(__)?schedule|^(__)?sched_|^finish_task_switch|^pick_next|^(__)?(en|de)queue_(task|entity)|"
                  r"^try_to_wake_up|^(__)?wake_up|^update_(curr|load_avg|rq_clock|cfs)|_fair$|^psi_|"
                  r"^cpuacct_|^(__)?cond_resched|^context_switch|^(__)?switch_to|^ttwu_|^set_next_entity|"
                  r"^put_prev_|^yield_to|^kthread_should|^raw_spin_rq_|^check_preempt"),
    ("stack", r"^(__)?(napi|netif|net_rx|xdp|dev|skb|kfree_skb|consume_skb|build_skb|ip|ip6|ipv6|inet|inet6|udp|"
              r"udp4|udp6|tcp|icmp|eth|arp|neigh|sk|sock|nf|page_pool|cpu_map|dev_map|bq|csum|"
              r"ipt|vlan|tc|sch|qdisc|packet|rps|rx|tx|net)(_|$)|^(__)?kfree_skb|^do_xdp|"
              r"^(__)?(dev|napi)_|^csum|^ip_fast_csum|^sk_|^validate_xmit|^bpf_net"),
))


def function_kind(symbol: str) -> str:
    """The kind of a function (a frame of folded stacks, with or without inferno's annotation):
    one of ``KINDS``."""
    if bpf_program_name(symbol):
        return "program"
    name = strip_annotation(symbol)
    if name.startswith("bpf_prog_"):    # a program whose tag was zeroed or left out
        return "program"
    for kind, pattern in KIND_RULES:
        if pattern.search(name):
            return kind
    return "other"


def display_name(symbol: str) -> str:
    """How a function is named in a sentence: a BPF program by its function (``xdp_mynf`` for
    ``bpf_prog_<tag>_xdp_mynf``), the rest as they are."""
    return bpf_program_name(symbol) or strip_annotation(symbol)
