/* Header parsing for XDP: a cursor walks the packet, each step bounds-checks and returns the next
 * protocol (or -1 when the header is not all there). In the style of xdp-tools' parsing_helpers.h.
 */
#ifndef PERFKIT_PARSING_H
#define PERFKIT_PARSING_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef ETH_P_8021Q
#define ETH_P_8021Q 0x8100
#endif
#define VLAN_VID_MASK 0x0fff

/* IPv4 frag_off bits (host order; perfkit/layouts.py mirrors them for the reference models). */
#define IP_DF 0x4000		/* don't fragment */
#define IP_MF 0x2000		/* more fragments */
#define IP_OFFSET 0x1fff	/* fragment offset, in 8-byte units */

struct hdr_cursor {
	void *pos;
};

struct vlan_hdr {
	__be16 h_vlan_TCI;
	__be16 h_vlan_encapsulated_proto;
};

/* Ethernet plus at most one 802.1Q tag. Returns the inner ethertype (network order) or -1;
 * *vlan_id gets the tag's VLAN id, 0 when untagged. */
static __always_inline int parse_ethhdr_vlan(struct hdr_cursor *nh, void *data_end,
					     struct ethhdr **ethhdr, __u16 *vlan_id)
{
	struct ethhdr *eth = nh->pos;
	__be16 proto;

	if ((void *)(eth + 1) > data_end)
		return -1;
	nh->pos = eth + 1;
	*ethhdr = eth;
	*vlan_id = 0;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q)) {
		struct vlan_hdr *vh = nh->pos;

		if ((void *)(vh + 1) > data_end)
			return -1;
		nh->pos = vh + 1;
		*vlan_id = bpf_ntohs(vh->h_vlan_TCI) & VLAN_VID_MASK;
		proto = vh->h_vlan_encapsulated_proto;
	}
	return proto;
}

/* IPv4 header with its options. Returns the L4 protocol or -1 if the header is truncated or not
 * IPv4 with a sane IHL. */
static __always_inline int parse_iphdr(struct hdr_cursor *nh, void *data_end, struct iphdr **iphdr)
{
	struct iphdr *iph = nh->pos;
	int hdrsize;

	if ((void *)(iph + 1) > data_end)
		return -1;
	if (iph->version != 4 || iph->ihl < 5)
		return -1;
	hdrsize = iph->ihl * 4;
	if (nh->pos + hdrsize > data_end)
		return -1;
	nh->pos += hdrsize;
	*iphdr = iph;
	return iph->protocol;
}

/* UDP header. Returns the UDP length field (host order) or -1. */
static __always_inline int parse_udphdr(struct hdr_cursor *nh, void *data_end, struct udphdr **udphdr)
{
	struct udphdr *h = nh->pos;

	if ((void *)(h + 1) > data_end)
		return -1;
	nh->pos = h + 1;
	*udphdr = h;
	return bpf_ntohs(h->len);
}

#endif /* PERFKIT_PARSING_H */
