// SPDX-License-Identifier: GPL-2.0
/* Software RSS (seed 001's fix for GTP-U, done in XDP): the NIC's hash sees the same 5-tuple for
 * every tunnel (UDP 2152 both ways, few SGW addresses), so all bearers land on one core. This
 * program runs first on the DUT port and spreads packets over the DUT cores through a cpumap,
 * hashing what the dataplane chose (steer_cfg.key: the TEID of GTP-U packets, a destination
 * address, or a flow's addresses and ports) so that a flow always stays on one core (no
 * reordering). The dataplane runs in the cpumap.
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
#include "gtpu.h"
#include "steer_kern_user.h"

const volatile struct steer_config steer_cfg = { .ncpus = 1 };

struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, STEER_MAX_CPUS);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} cpu_map SEC(".maps");

SEC("xdp")
int xdp_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct hdr_cursor nh = { .pos = data };
	struct ethhdr *eth;
	struct iphdr *iph;
	struct udphdr *udp;
	__u32 key, idx;
	__u16 vlan;

	if (parse_ethhdr_vlan(&nh, data_end, &eth, &vlan) != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (parse_iphdr(&nh, data_end, &iph) < 0)
		return XDP_PASS;
	key = iph->daddr;
	if (steer_cfg.key == STEER_KEY_FLOW) {
		key ^= iph->saddr * 31;
		if ((iph->protocol == IPPROTO_UDP || iph->protocol == IPPROTO_TCP) &&
		    parse_udphdr(&nh, data_end, &udp) >= 0) /* both start with the two ports */
			key ^= *(__u32 *)&udp->source;
	} else if (steer_cfg.key == STEER_KEY_GTPU_TEID && iph->protocol == IPPROTO_UDP &&
		   parse_udphdr(&nh, data_end, &udp) >= 0 && udp->dest == bpf_htons(GTPU_PORT)) {
		struct gtpu_hdr *gh = nh.pos;

		if ((void *)(gh + 1) <= data_end)
			key = gh->teid;
	}
	/* Fibonacci hashing, then a multiply-shift instead of a modulo */
	idx = ((__u64)(__u32)(key * 2654435761U) * steer_cfg.ncpus) >> 32;
	if (idx >= STEER_MAX_CPUS)
		return XDP_DROP;
	return bpf_redirect_map(&cpu_map, steer_cfg.cpus[idx], 0);
}

char _license[] SEC("license") = "GPL";
