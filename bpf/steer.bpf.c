// SPDX-License-Identifier: GPL-2.0
/* Software RSS (seed 001's fix for tunnels, done in XDP): the NIC's hash sees the same 5-tuple for
 * every flow of a tunnel (the same ports both ways, few tunnel endpoints), so all its flows land on
 * one core. This program runs first on the DUT port and spreads packets over the DUT cores through
 * a cpumap, hashing the words the dataplane chose (steer_cfg.words: a field of its tunnel's header,
 * a destination address, or a flow's addresses and ports) so that a flow always stays on one core
 * (no reordering). The dataplane runs in the cpumap.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "parsing.h"
#include "encap.h"
#include "steer_kern_user.h"

const volatile struct steer_config steer_cfg = { .ncpus = 1 };

struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, STEER_MAX_CPUS);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} cpu_map SEC(".maps");

/* The word w of the packet, when it has it: at the IPv4 header iph, its TCP or UDP header l4 (NULL
 * for other protocols) or the tunnel header tun (NULL outside the tunnel). */
static __always_inline int steer_word(const volatile struct steer_word *w, void *iph, void *l4, void *tun,
				      void *data_end, __u32 *word)
{
	void *base = w->at == STEER_AT_IP ? iph : w->at == STEER_AT_L4 ? l4 : tun;
	__u32 *p;

	if (!base)
		return -1;
	p = base + w->offset;
	if ((void *)(p + 1) > data_end)
		return -1;
	*word = *p * w->mul;
	return 0;
}

SEC("xdp")
int xdp_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct hdr_cursor nh = { .pos = data };
	void *l4 = NULL, *tun = NULL;
	struct ethhdr *eth;
	struct iphdr *iph;
	struct udphdr *udp;
	__u32 key = 0, tun_key = 0, word, idx;
	__be16 dport = 0;
	__u16 vlan;
	int proto;

	if (parse_ethhdr_vlan(&nh, data_end, &eth, &vlan) != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	proto = parse_iphdr(&nh, data_end, &iph);
	if (proto < 0)
		return XDP_PASS;
	if ((proto == IPPROTO_UDP || proto == IPPROTO_TCP) &&
	    parse_udphdr(&nh, data_end, &udp) >= 0) { /* both start with the two ports */
		l4 = udp;
		dport = udp->dest;
	}
	if (steer_cfg.tunnel.ip_proto == proto && (proto != IPPROTO_UDP || (l4 && dport == steer_cfg.tunnel.udp_dport)))
		tun = proto == IPPROTO_UDP ? nh.pos : (void *)iph + iph->ihl * 4;
	for (int i = 0; i < STEER_MAX_WORDS; i++) {
		const volatile struct steer_word *w = &steer_cfg.words[i];

		if (i >= steer_cfg.nwords)
			break;
		if (w->at == STEER_AT_TUNNEL) {
			if (tun && steer_word(w, iph, l4, tun, data_end, &word) == 0)
				tun_key ^= word;
			else
				tun = NULL; /* the tunnel's words are all there, or the packet is hashed as any other */
		} else if (steer_word(w, iph, l4, tun, data_end, &word) == 0) {
			key ^= word;
		}
	}
	if (tun)
		key = tun_key;
	/* Fibonacci hashing, then a multiply-shift instead of a modulo */
	idx = ((__u64)(__u32)(key * 2654435761U) * steer_cfg.ncpus) >> 32;
	if (idx >= STEER_MAX_CPUS)
		return XDP_DROP;
	return bpf_redirect_map(&cpu_map, steer_cfg.cpus[idx], 0);
}

char _license[] SEC("license") = "GPL";
