// SPDX-License-Identifier: GPL-2.0
/* L4 load balancer in XDP (seeds 000 and 004), Katran-like: TCP/UDP to a VIP is hashed on its
 * 5-tuple into the VIP's Maglev table, IPIP-encapsulated to the chosen real and sent on (L3 DSR:
 * replies go from the real to the client directly). DF packets too big for the tunnel get an ICMP
 * frag-needed back. Everything else goes to the host or is dropped and counted.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "parsing.h"
#include "csum.h"
#include "jhash.h"
#include "ipip.h"
#include "icmp.h"
#include "dataplane.h"
#include "l4lb_kern_user.h"

DATAPLANE_CONFIG_MAP(l4lb_config, struct l4lb_config);

/* Set by userspace before loading; the verifier takes them as constants. */
const volatile struct l4lb_consts l4lb_consts = { .vip_mask = L4LB_VIP_SLOTS - 1 };

/* VIPs by (address, port, protocol): a table with open addressing in an array map, so that a lookup
 * is a few array accesses the verifier inlines. A hash map's lookup is a call into the kernel that
 * calls on (hash, bucket walk, memcmp); prog-bench measured it at ~25 ns a packet on an AMD EPYC VM,
 * where every return pays the SRSO mitigation (Safe RET), and this table at ~7 ns.
 * max_entries = vip_mask + 1, set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, L4LB_VIP_SLOTS);
	__type(key, __u32);
	__type(value, struct vip_slot);
} vips SEC(".maps");

/* Every VIP's Maglev table (Katran's ch_rings), by vip_num: slot hash % L4LB_RING_SIZE holds a
 * real index. An array map, so the lookup is inlined by the verifier (no map-in-map indirection);
 * max_entries = max VIPs, set at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, L4LB_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct ch_ring);
} ch_rings SEC(".maps");

/* Reals by real index; index 0 stays empty (L4LB_NO_REAL). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, L4LB_MAX_REALS);
	__type(key, __u32);
	__type(value, struct real_def);
} reals SEC(".maps");

DATAPLANE_STATS_MAP(l4lb_stats, struct l4lb_stat_rec, L4LB_STAT_MAX);

/* Forwarded packets per VIP (by vip_num), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, L4LB_MAX_VIPS);
	__type(key, __u32);
	__type(value, struct l4lb_stat_rec);
} vip_stats SEC(".maps");

/* Forwarded packets per real (by real index), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, L4LB_MAX_REALS);
	__type(key, __u32);
	__type(value, struct l4lb_stat_rec);
} real_stats SEC(".maps");

static __always_inline int count(enum l4lb_stat stat, int verdict, __u64 frame_len)
{
	dataplane_count(&l4lb_stats, stat, frame_len);
	return verdict;
}

/* The flow's slot in a table of L4LB_RING_SIZE entries. jhash over the whole 5-tuple in host
 * order (the protocol seeds it), so the Python model computes the same on any host. */
static __always_inline __u32 flow_slot(struct iphdr *iph, __be32 ports)
{
	__u32 h = jhash_3words(bpf_ntohl(iph->saddr), bpf_ntohl(iph->daddr), bpf_ntohl(ports),
			       L4LB_HASH_SEED + iph->protocol);

#if L4LB_RING_SIZE == 65537
	/* 2^16 = -1 (mod 2^16 + 1): h mod 65537 without a division (~25 cycles on x86) */
	__s32 r = (__s32)(h & 0xffff) - (__s32)(h >> 16);

	return r < 0 ? r + L4LB_RING_SIZE : r;
#else
	return h % L4LB_RING_SIZE;
#endif
}

/* The VIP of a key (pad 0), or NULL: linear probing from its home slot, up to L4LB_VIP_PROBES
 * slots; an empty slot ends the search (userspace never leaves one between a VIP and its home). */
static __always_inline struct vip_meta *vip_lookup(const struct vip_key *vk)
{
	__u32 mask = l4lb_consts.vip_mask;
	__u32 home = l4lb_vip_home(bpf_ntohl(vk->addr), bpf_ntohs(vk->port), vk->proto);
	__u64 want = *(const __u64 *)vk;

#pragma unroll
	for (__u32 i = 0; i < L4LB_VIP_PROBES; i++) {
		__u32 idx = (home + i) & mask;
		struct vip_slot *slot = bpf_map_lookup_elem(&vips, &idx);

		if (!slot)
			return NULL;
		if (*(__u64 *)&slot->key == want)
			return &slot->meta;
		if (slot->key.proto == L4LB_VIP_EMPTY)
			return NULL;
	}
	return NULL;
}

static __always_inline int egress(struct l4lb_config *cfg)
{
	if (cfg->flags & L4LB_F_XDP_TX)
		return XDP_TX;
	return bpf_redirect(cfg->egress_ifindex, 0);
}

#define TCPOPT_EOL 0
#define TCPOPT_NOP 1
#define TCPOPT_MSS 2
/* Options walked before the MSS must have been found. Every stack puts MSS first in its SYNs; 10
 * allows 9 before it. Each option (NOP or not) doubles the paths the verifier walks: 40 (every byte
 * a NOP) exhausts it. */
#define TCP_OPTIONS_WALK 10

/* Seed 004: TCP through the tunnel relied on MSS clamping. Lower the MSS option of a TCP SYN to
 * what fits the tunnel, mtu - IPIP - IPv4 - TCP headers, so that the real's segments back never need
 * fragmenting; the checksum is updated, not recomputed. A malformed option list is left as it is.
 * A global function: the verifier checks it once, on its own, instead of walking its option loop
 * again on every path of the program that reaches it. Returns 1 if the MSS was lowered. */
__attribute__((noinline)) int l4lb_clamp_mss(struct xdp_md *ctx, __u32 ihl, __u32 tot_len, __u32 mtu)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tcphdr *tcp = data + sizeof(struct ethhdr) + (ihl & 0x3c);
	__u16 clamp = mtu - IPIP_ENCAP_LEN - sizeof(struct iphdr) - sizeof(struct tcphdr);
	__u32 optlen, off = 0;

	if ((void *)(tcp + 1) > data_end || !tcp->syn || ihl + tcp->doff * 4 > tot_len)
		return 0;
	optlen = tcp->doff * 4 > sizeof(*tcp) ? tcp->doff * 4 - sizeof(*tcp) : 0;
#pragma clang loop unroll(disable)
	for (int i = 0; i < TCP_OPTIONS_WALK; i++) {
		__u8 *opt = (__u8 *)(tcp + 1) + (off & 0x3f);
		__u16 old, word_old, word_new;
		__u8 len;

		if (off >= optlen || (void *)(opt + 1) > data_end || opt[0] == TCPOPT_EOL)
			return 0;
		if (opt[0] == TCPOPT_NOP) {
			off++;
			continue;
		}
		if ((void *)(opt + 2) > data_end)
			return 0;
		len = opt[1];
		if (len < 2 || off + len > optlen)
			return 0;
		if (opt[0] != TCPOPT_MSS) {
			off += len;
			continue;
		}
		if (len != 4 || (void *)(opt + 4) > data_end)
			return 0;
		old = (__u16)opt[2] << 8 | opt[3];
		if (old <= clamp)
			return 0;
		/* the value at an odd offset from the header straddles two checksummed words */
		word_old = off & 1 ? __builtin_bswap16(old) : old;
		word_new = off & 1 ? __builtin_bswap16(clamp) : clamp;
		opt[2] = clamp >> 8;
		opt[3] = clamp & 0xff;
		tcp->check = bpf_htons(csum_replace_word(bpf_ntohs(tcp->check), word_old, word_new));
		return 1;
	}
	return 0;
}

/* A TCP/UDP packet to a VIP: pick the real, encapsulate, send. */
static __always_inline int handle_vip(struct xdp_md *ctx, struct l4lb_config *cfg, struct vip_meta *vip,
				      struct iphdr *iph, __be32 ports, __u32 ihl, __u32 tot_len,
				      __u32 avail, __u64 frame_len)
{
	__be32 daddr = iph->daddr;
	__be16 df = iph->frag_off & bpf_htons(IP_DF);
	__u8 tos = iph->tos;
	struct real_def *real;
	struct ch_ring *ring;
	__u32 key, slot;

	if (cfg->egress_mtu && tot_len + IPIP_ENCAP_LEN > cfg->egress_mtu) {
		/* Without DF we could only fragment the tunnel packet, which the reals would have to
		 * reassemble: drop instead, as Katran does, and count it. */
		if (!df)
			return count(L4LB_DROP_TOO_BIG, XDP_DROP, frame_len);
		if (icmp_frag_needed(ctx, ihl, daddr, cfg->egress_mtu - IPIP_ENCAP_LEN))
			return count(L4LB_DROP_INTERNAL, XDP_DROP, frame_len);
		return count(L4LB_ICMP_FRAG_NEEDED, XDP_TX, frame_len);
	}

	if ((vip->flags & L4LB_VIP_F_MSS_CLAMP) && iph->protocol == IPPROTO_TCP)
		l4lb_clamp_mss(ctx, ihl, tot_len, cfg->egress_mtu ? cfg->egress_mtu : L4LB_DEFAULT_MTU);

	ring = bpf_map_lookup_elem(&ch_rings, &vip->vip_num);
	slot = flow_slot(iph, ports);
	if (!ring || slot >= L4LB_RING_SIZE)
		return count(L4LB_DROP_INTERNAL, XDP_DROP, frame_len);
	key = ring->reals[slot];
	real = bpf_map_lookup_elem(&reals, &key);
	if (!real || !real->addr)
		return count(L4LB_DROP_NO_REAL, XDP_DROP, frame_len);

	/* Ethernet padding after the packet must not end up inside the tunnel's frame */
	if (avail > tot_len && bpf_xdp_adjust_tail(ctx, -(int)(avail - tot_len)))
		return count(L4LB_DROP_INTERNAL, XDP_DROP, frame_len);
	if (ipip_encap(ctx, cfg->lb_addr, real->addr, tot_len, tos, df, cfg->dst_mac, cfg->src_mac))
		return count(L4LB_DROP_INTERNAL, XDP_DROP, frame_len);
	dataplane_count(&vip_stats, vip->vip_num, frame_len);
	dataplane_count(&real_stats, key, frame_len);
	return count(L4LB_FWD, egress(cfg), frame_len);
}

SEC("xdp")
int xdp_l4lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 frame_len = (data_end - data) & 0xffff;
	struct l4lb_config *cfg;
	struct vip_meta *vip;
	struct ethhdr *eth = data;
	struct iphdr *iph;
	struct vip_key vk __attribute__((aligned(8)));
	void *l4;
	__u32 zero = 0, ihl, tot_len, avail;
	__be32 ports;

	cfg = bpf_map_lookup_elem(&l4lb_config, &zero);
	if (!cfg)
		return count(L4LB_DROP_INTERNAL, XDP_DROP, frame_len);

	if ((void *)(eth + 1) > data_end)
		return count(L4LB_DROP_TRUNCATED, XDP_DROP, frame_len);
	if (eth->h_proto != bpf_htons(ETH_P_IP)) /* ARP, IPv6, tagged ...: the host's */
		return count(L4LB_PASS, XDP_PASS, frame_len);

	iph = (void *)(eth + 1);
	if ((void *)(iph + 1) > data_end)
		return count(L4LB_DROP_TRUNCATED, XDP_DROP, frame_len);
	if (iph->version != 4 || iph->ihl < 5)
		return count(L4LB_DROP_BAD_HEADER, XDP_DROP, frame_len);
	ihl = iph->ihl * 4;
	tot_len = bpf_ntohs(iph->tot_len);
	avail = (data_end - (void *)iph) & 0xffff;
	if (tot_len < ihl)
		return count(L4LB_DROP_BAD_HEADER, XDP_DROP, frame_len);
	if (tot_len > avail)
		return count(L4LB_DROP_TRUNCATED, XDP_DROP, frame_len);
	if (iph->protocol != IPPROTO_TCP && iph->protocol != IPPROTO_UDP)
		return count(L4LB_PASS, XDP_PASS, frame_len);
	if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET)) {
		/* no ports to hash on; the host's own fragments still reach it */
		if (iph->daddr == cfg->lb_addr)
			return count(L4LB_PASS, XDP_PASS, frame_len);
		return count(L4LB_DROP_FRAGMENT, XDP_DROP, frame_len);
	}

	/* the whole L4 header must be inside the IP packet: UDP 8 bytes, TCP 20 */
	l4 = (void *)iph + ihl;
	if (iph->protocol == IPPROTO_UDP) {
		if (l4 + sizeof(struct udphdr) > data_end || ihl + sizeof(struct udphdr) > tot_len)
			return count(L4LB_DROP_TRUNCATED, XDP_DROP, frame_len);
	} else {
		if (l4 + sizeof(struct tcphdr) > data_end || ihl + sizeof(struct tcphdr) > tot_len)
			return count(L4LB_DROP_TRUNCATED, XDP_DROP, frame_len);
	}
	ports = *(__be32 *)l4; /* source and destination port, both protocols */

	vk.addr = iph->daddr;
	vk.port = (__be16)(ports >> 16);
	vk.proto = iph->protocol;
	vk.pad = 0;
	vip = vip_lookup(&vk);
	if (!vip)
		return count(L4LB_PASS, XDP_PASS, frame_len);
	return handle_vip(ctx, cfg, vip, iph, ports, ihl, tot_len, avail, frame_len);
}

char _license[] SEC("license") = "GPL";
