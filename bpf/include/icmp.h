/* ICMP "fragmentation needed" (type 3 code 4, RFC 792 / RFC 1191) built in place in XDP, for path
 * MTU discovery through a tunnel that adds bytes.
 */
#ifndef PERFKIT_ICMP_H
#define PERFKIT_ICMP_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "csum.h"

#define ICMP_DEST_UNREACH 3
#define ICMP_FRAG_NEEDED 4

/* ICMP destination unreachable with RFC 1191's next-hop MTU (<linux/icmp.h> drags in libc). */
struct icmp_frag_hdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be16 unused;
	__be16 mtu;
};

/* RFC 792: the error quotes the offending IP header and the first 64 bits of its payload. */
#define ICMP_QUOTE_L4 8
/* RFC 1812 4.3.2.5 / Linux: ICMP errors are sent with precedence "internetwork control". */
#define ICMP_ERR_TOS 0xc0
#define ICMP_ERR_TTL 64

/* Turn the frame (Ethernet + IPv4 header of ihl bytes + at least 8 payload bytes) into a
 * frag-needed reply to its sender, from `from` (the address it was sent to), advertising mtu.
 * Returns 0, or -1 when the kernel refused to resize the packet (the frame is then unusable). */
static __always_inline int icmp_frag_needed(struct xdp_md *ctx, __u32 ihl, __be32 from, __u16 mtu)
{
	const int room = sizeof(struct iphdr) + sizeof(struct icmp_frag_hdr);
	void *data, *data_end;
	struct ethhdr *eth, *old_eth;
	struct iphdr *iph, *old_ip;
	struct icmp_frag_hdr *icmp;
	__u32 quote = (ihl & 0x3c) + ICMP_QUOTE_L4;
	__u32 len, keep = sizeof(struct ethhdr) + room + quote;
	__u64 sum;
	int ok;

	/* The original IP header ends up right after the new ICMP header: nothing to copy. */
	if (bpf_xdp_adjust_head(ctx, -room))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	len = data_end - data;
	if (len > keep && bpf_xdp_adjust_tail(ctx, -(int)(len - keep)))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	iph = (void *)(eth + 1);
	icmp = (void *)(iph + 1);
	old_eth = (void *)eth + room;
	old_ip = (void *)(old_eth + 1);
	if ((void *)(old_ip + 1) > data_end)
		return -1;

	__builtin_memcpy(eth->h_dest, old_eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, old_eth->h_dest, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	iph->version = 4;
	iph->ihl = 5;
	iph->tos = ICMP_ERR_TOS;
	iph->tot_len = bpf_htons(room + quote);
	iph->id = 0;
	iph->frag_off = 0;
	iph->ttl = ICMP_ERR_TTL;
	iph->protocol = IPPROTO_ICMP;
	iph->check = 0;
	iph->daddr = old_ip->saddr;
	iph->saddr = from;
	iph->check = ipv4_csum(iph);
	icmp->type = ICMP_DEST_UNREACH;
	icmp->code = ICMP_FRAG_NEEDED;
	icmp->checksum = 0;
	icmp->unused = 0;
	icmp->mtu = bpf_htons(mtu);

	sum = csum_packet(data, data_end, sizeof(*eth) + sizeof(*iph), sizeof(*icmp) + quote, &ok);
	if (!ok)
		return -1;
	icmp = data + sizeof(*eth) + sizeof(*iph);
	if ((void *)(icmp + 1) > data_end)
		return -1;
	icmp->checksum = csum_fold(sum);
	return 0;
}

#endif /* PERFKIT_ICMP_H */
