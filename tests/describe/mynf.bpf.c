/* A small NF of the shape real ones have, written outside perfkit (tests/test_describe.py builds it
 * in a scratch directory): a struct-keyed hash map of flows, an array of backends, a per-CPU array of
 * counters indexed by an enum, an LPM trie of allowed sources, .rodata configuration, and output to
 * the other port by a devmap or bpf_redirect (ifindex from the backend). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef MYNF_MAX_BACKENDS
#define MYNF_MAX_BACKENDS 16
#endif

enum mynf_stat { MYNF_FWD = 0, MYNF_NO_FLOW, MYNF_NOT_IP, MYNF_DENIED, MYNF_STATS };

struct flow_key { __be32 daddr; __be16 dport; __u8 proto; __u8 pad; };
struct flow_val { __u32 backend; __u32 flags; };
struct backend { unsigned char dst_mac[6]; unsigned char src_mac[6]; __u32 port; };
struct counter { __u64 packets; __u64 bytes; };
struct src_prefix { __u32 prefixlen; __u8 addr[4]; };

struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 1024);
         __type(key, struct flow_key); __type(value, struct flow_val); } flows SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, MYNF_MAX_BACKENDS);
         __type(key, __u32); __type(value, struct backend); } backends SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); __uint(max_entries, MYNF_STATS);
         __type(key, __u32); __type(value, struct counter); } stats SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_LPM_TRIE); __uint(max_entries, 64); __uint(map_flags, BPF_F_NO_PREALLOC);
         __type(key, struct src_prefix); __type(value, __u32); } allowed SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_DEVMAP); __uint(max_entries, 8);
         __type(key, __u32); __type(value, __u32); } ports SEC(".maps");

const volatile __u32 default_backend = 0;
const volatile __u8 use_devmap = 1;
volatile __u32 seen_ttl = 0;
enum mynf_stat last_stat;

static __always_inline int count(enum mynf_stat s, __u64 len, int verdict)
{
    __u32 k = s;
    last_stat = s;
    struct counter *c = bpf_map_lookup_elem(&stats, &k);
    if (c) { c->packets++; c->bytes += len; }
    return verdict;
}

SEC("xdp")
int xdp_mynf(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u64 len = end - data;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
        return count(MYNF_NOT_IP, len, XDP_DROP);
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->ihl != 5 || ip->protocol != IPPROTO_UDP)
        return count(MYNF_NOT_IP, len, XDP_DROP);
    struct udphdr *udp = (void *)(ip + 1);
    if ((void *)(udp + 1) > end)
        return count(MYNF_NOT_IP, len, XDP_DROP);
    seen_ttl = ip->ttl;
    struct src_prefix sp = { .prefixlen = 32 };
    __builtin_memcpy(sp.addr, &ip->saddr, 4);
    if (!bpf_map_lookup_elem(&allowed, &sp))
        return count(MYNF_DENIED, len, XDP_DROP);
#ifdef MYNF_BAD
    if (*(__u8 *)(data + MYNF_BAD))  /* unchecked: the verifier refuses it */
        return XDP_PASS;
#endif
    struct flow_key key = { .daddr = ip->daddr, .dport = udp->dest, .proto = ip->protocol };
    struct flow_val *fv = bpf_map_lookup_elem(&flows, &key);
    __u32 b = fv ? fv->backend : default_backend;
    if (!fv && default_backend == 0xffffffff)
        return count(MYNF_NO_FLOW, len, XDP_DROP);
    if (b >= MYNF_MAX_BACKENDS)
        return count(MYNF_NO_FLOW, len, XDP_DROP);
    struct backend *be = bpf_map_lookup_elem(&backends, &b);
    if (!be || !be->port)
        return count(MYNF_NO_FLOW, len, XDP_DROP);
    __builtin_memcpy(eth->h_dest, be->dst_mac, 6);
    __builtin_memcpy(eth->h_source, be->src_mac, 6);
    count(MYNF_FWD, len, 0);
    if (use_devmap)
        return bpf_redirect_map(&ports, be->port, 0);
    return bpf_redirect(be->port, 0);
}

char LICENSE[] SEC("license") = "GPL";
