/* IPv4-in-IPv4 encapsulation (RFC 2003) of the packet behind the Ethernet header, for XDP.
 */
#ifndef PERFKIT_IPIP_H
#define PERFKIT_IPIP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "csum.h"
#include "parsing.h"

#define IPIP_ENCAP_LEN ((int)sizeof(struct iphdr))
#define IPIP_TTL 64

/* Prepend an outer IPv4 header (saddr -> daddr, protocol 4, TTL 64, id 0) to the IPv4 packet of
 * inner_len bytes that follows a 14-byte Ethernet header, and write a new Ethernet header from
 * dst/src. tos and DF (RFC 2003 3.1) come from the inner header. Returns 0 or -1 when the kernel
 * refused to grow the packet. */
static __always_inline int ipip_encap(struct xdp_md *ctx, __be32 saddr, __be32 daddr, __u16 inner_len,
				      __u8 tos, __be16 df, const __u8 *dst, const __u8 *src)
{
	void *data, *data_end;
	struct ethhdr *eth;
	struct iphdr *oip;
	__u16 tot_len = inner_len + IPIP_ENCAP_LEN;
	__u64 sum;

	if (bpf_xdp_adjust_head(ctx, -IPIP_ENCAP_LEN))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	oip = (void *)(eth + 1);
	if ((void *)(oip + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);

	/* Summed from registers instead of re-reading the header: the constant words fold at
	 * compile time, so the checksum costs a handful of adds. */
	sum = bpf_htons(0x4500 | tos) + bpf_htons(tot_len) + df + bpf_htons((IPIP_TTL << 8) | IPPROTO_IPIP) +
	      (saddr & 0xffff) + (saddr >> 16) + (daddr & 0xffff) + (daddr >> 16);
	*(__be16 *)oip = bpf_htons(0x4500 | tos);
	oip->tot_len = bpf_htons(tot_len);
	oip->id = 0;
	oip->frag_off = df;
	oip->ttl = IPIP_TTL;
	oip->protocol = IPPROTO_IPIP;
	oip->check = csum_fold(sum);
	oip->saddr = saddr;
	oip->daddr = daddr;
	return 0;
}

#endif /* PERFKIT_IPIP_H */
