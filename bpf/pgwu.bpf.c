// SPDX-License-Identifier: GPL-2.0
/* PGW-U user plane in XDP (seed 001): uplink GTP-U decapsulation towards SGi, downlink GTP-U
 * encapsulation towards the SGWs. Everything else goes to the host or is dropped and counted.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "parsing.h"
#include "csum.h"
#include "gtpu.h"
#include "dataplane.h"
#include "pgwu_kern_user.h"

#ifndef PGWU_MAX_SESSIONS
#define PGWU_MAX_SESSIONS (1 << 20)
#endif

DATAPLANE_CONFIG_MAP(pgwu_config, struct pgwu_config);

#ifndef PGWU_SESSION_TABLE
#define PGWU_SESSION_TABLE PGWU_TABLE_HASH
#endif

/* Uplink sessions by our TEID. The default is a HASH without preallocation: memory follows the
 * session count, and the elements come from kmalloc'd memory, which the kernel maps with huge pages
 * (fewer TLB misses than a preallocated table's vmalloc area). Not per-CPU: a PERCPU_HASH without
 * preallocation inserted only ~70k sessions/s here (per-CPU allocator, transient ENOMEM), and
 * per-CPU counters in a side array cost two more cache misses per packet (measured: 652 vs 401 ns
 * at 200k sessions). The counters are atomic adds on the element the lookup just fetched; a
 * session's packets stay on one core, so they rarely contend.
 * The other designs exist to be measured against it (the session_table knob): seed 001's
 * LRU_PERCPU_HASH, which silently evicted 30-70% of 1M live sessions; its fix, PERCPU_HASH without
 * preallocation; and an ARRAY indexed by the TEID, which a UPF can do because it allocates its
 * uplink TEIDs itself: no hash, one cache line per packet. */
#if PGWU_SESSION_TABLE == PGWU_TABLE_TEID_ARRAY
#define UL_TABLE_TYPE BPF_MAP_TYPE_ARRAY
#define UL_TABLE_FLAGS 0
#define UL_TABLE_KEY __u32
#elif PGWU_SESSION_TABLE == PGWU_TABLE_PERCPU_HASH
#define UL_TABLE_TYPE BPF_MAP_TYPE_PERCPU_HASH
#define UL_TABLE_FLAGS BPF_F_NO_PREALLOC
#define UL_TABLE_KEY __be32
#elif PGWU_SESSION_TABLE == PGWU_TABLE_LRU_PERCPU_HASH
#define UL_TABLE_TYPE BPF_MAP_TYPE_LRU_PERCPU_HASH
#define UL_TABLE_FLAGS 0	/* an LRU map is always preallocated */
#define UL_TABLE_KEY __be32
#else
#define UL_TABLE_TYPE BPF_MAP_TYPE_HASH
#define UL_TABLE_FLAGS BPF_F_NO_PREALLOC
#define UL_TABLE_KEY __be32
#endif

/* Downlink: keyed by (UE address, VLAN), which the SGi side chooses, so never an array. */
#if PGWU_SESSION_TABLE == PGWU_TABLE_TEID_ARRAY
#define DL_TABLE_TYPE BPF_MAP_TYPE_HASH
#define DL_TABLE_FLAGS BPF_F_NO_PREALLOC
#else
#define DL_TABLE_TYPE UL_TABLE_TYPE
#define DL_TABLE_FLAGS UL_TABLE_FLAGS
#endif

struct {
	__uint(type, UL_TABLE_TYPE);
	__uint(map_flags, UL_TABLE_FLAGS);
	__uint(max_entries, PGWU_MAX_SESSIONS);
	__type(key, UL_TABLE_KEY);
	__type(value, struct pgwu_ul_session);
} ul_sessions SEC(".maps");

struct {
	__uint(type, DL_TABLE_TYPE);
	__uint(map_flags, DL_TABLE_FLAGS);
	__uint(max_entries, PGWU_MAX_SESSIONS);
	__type(key, struct pgwu_dl_key);
	__type(value, struct pgwu_dl_session);
} dl_sessions SEC(".maps");

/* The uplink session of our TEID, or NULL. */
static __always_inline struct pgwu_ul_session *ul_session(struct pgwu_config *cfg, __be32 *teid)
{
#if PGWU_SESSION_TABLE == PGWU_TABLE_TEID_ARRAY
	struct pgwu_ul_session *sess;
	__u32 rel = bpf_ntohl(*teid) - cfg->ul_teid_base;
	__u32 slot = rel & 0xffff, idx;

	if (slot >= cfg->teid_stride)
		return NULL;
	idx = (rel >> 16) * cfg->teid_stride + slot;
	sess = bpf_map_lookup_elem(&ul_sessions, &idx);
	/* a slot never allocated is all zeros; the array bounds the index */
	return sess && sess->ue_addr ? sess : NULL;
#else
	return bpf_map_lookup_elem(&ul_sessions, teid);
#endif
}

DATAPLANE_STATS_MAP(pgwu_stats, struct pgwu_stat_rec, PGWU_STAT_MAX);

static __always_inline int count(enum pgwu_stat stat, int verdict, __u64 frame_len)
{
	dataplane_count(&pgwu_stats, stat, frame_len);
	return verdict;
}

static __always_inline int egress(struct xdp_md *ctx, struct pgwu_config *cfg, __u32 ifindex)
{
	if (cfg->flags & PGWU_F_XDP_TX)
		return XDP_TX;
	return bpf_redirect(ifindex, 0);
}

/* Write an Ethernet header (and a tag when vlan != 0) at the start of the packet.
 * Returns the L2 length or -1 if the packet is too short. */
static __always_inline int write_l2(void *data, void *data_end, const __u8 *dst, const __u8 *src,
				    __u16 vlan)
{
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	if (vlan) {
		struct vlan_hdr *vh = (void *)(eth + 1);

		if ((void *)(vh + 1) > data_end)
			return -1;
		eth->h_proto = bpf_htons(ETH_P_8021Q);
		vh->h_vlan_TCI = bpf_htons(vlan & VLAN_VID_MASK);
		vh->h_vlan_encapsulated_proto = bpf_htons(ETH_P_IP);
		return sizeof(*eth) + sizeof(*vh);
	}
	eth->h_proto = bpf_htons(ETH_P_IP);
	return sizeof(*eth);
}

/* Uplink: GTP-U G-PDU to us -> strip outer Ethernet/IPv4/UDP/GTP-U, forward the inner packet. */
static __always_inline int handle_ul(struct xdp_md *ctx, struct pgwu_config *cfg, struct gtpu_hdr *gh,
				     __u32 udp_payload, __u64 frame_len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pgwu_ul_session *sess;
	struct iphdr *inner;
	__u32 gtp_len, hdr_extra, inner_len, avail, outer_len, l2_len;
	int ret, err = 0;

	if ((void *)(gh + 1) > data_end)
		return count(PGWU_DROP_TRUNCATED, XDP_DROP, frame_len);
	if ((gh->flags >> 5) != GTPU_VERSION || !(gh->flags & GTPU_F_PT))
		return count(PGWU_DROP_GTP_VERSION, XDP_DROP, frame_len);
	if (gh->type != GTPU_TYPE_GPDU) /* echo, error indication, end marker: the control plane's */
		return count(PGWU_PASS, XDP_PASS, frame_len);
	gtp_len = bpf_ntohs(gh->length);
	if (gtp_len + sizeof(*gh) > udp_payload)
		return count(PGWU_DROP_BAD_HEADER, XDP_DROP, frame_len);

	inner = gtpu_payload(gh, data_end, &err);
	if (!inner)
		return count(err == GTPU_ERR_EXT ? PGWU_DROP_GTP_EXT : PGWU_DROP_TRUNCATED, XDP_DROP, frame_len);
	hdr_extra = (void *)inner - (void *)(gh + 1);
	if (hdr_extra > gtp_len)
		return count(PGWU_DROP_BAD_HEADER, XDP_DROP, frame_len);
	if ((void *)inner + 1 > data_end)
		return count(PGWU_DROP_INNER_TRUNCATED, XDP_DROP, frame_len);
	if ((*(__u8 *)inner >> 4) != 4)
		return count(PGWU_DROP_INNER_NOT_IPV4, XDP_DROP, frame_len);
	if ((void *)(inner + 1) > data_end)
		return count(PGWU_DROP_INNER_TRUNCATED, XDP_DROP, frame_len);
	inner_len = bpf_ntohs(inner->tot_len);
	avail = (data_end - (void *)inner) & 0xffff;
	if (inner->ihl < 5 || inner_len < inner->ihl * 4 || inner_len > gtp_len - hdr_extra ||
	    inner_len > avail)
		return count(PGWU_DROP_INNER_TRUNCATED, XDP_DROP, frame_len);

	sess = ul_session(cfg, &gh->teid);
	if (!sess)
		return count(PGWU_DROP_UNKNOWN_TEID, XDP_DROP, frame_len);
	if (inner->saddr != sess->ue_addr)
		return count(PGWU_DROP_UE_MISMATCH, XDP_DROP, frame_len);
	__sync_fetch_and_add(&sess->packets, 1);
	__sync_fetch_and_add(&sess->bytes, inner_len);

	outer_len = ((void *)inner - data) & 0xffff;
	l2_len = sess->sgi_vlan ? sizeof(struct ethhdr) + sizeof(struct vlan_hdr) : sizeof(struct ethhdr);
	/* Ethernet padding after the inner packet must not leave with it */
	if (avail > inner_len && bpf_xdp_adjust_tail(ctx, -(int)(avail - inner_len)))
		return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);
	if (bpf_xdp_adjust_head(ctx, (int)outer_len - (int)l2_len))
		return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ret = write_l2(data, data_end, cfg->sgi_dst_mac, cfg->sgi_src_mac, sess->sgi_vlan);
	if (ret < 0)
		return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);
	return count(PGWU_UL_FWD, egress(ctx, cfg, cfg->sgi_ifindex), frame_len);
}

/* Downlink: IPv4 to a UE -> push outer IPv4/UDP/GTP-U with the session's TEID and SGW. */
static __always_inline int handle_dl(struct xdp_md *ctx, struct pgwu_config *cfg, struct iphdr *iph,
				     __u16 vlan, __u32 tot_len, __u64 frame_len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct pgwu_dl_key key = { .ue_addr = iph->daddr, .vlan = vlan };
	struct pgwu_dl_session *sess;
	struct iphdr *oip;
	struct udphdr *udp;
	struct gtpu_hdr *gh;
	__u32 l2_in, l2_out, avail;
	__be32 sgw_addr, teid;
	__u8 tos = iph->tos;
	int ret;

	sess = bpf_map_lookup_elem(&dl_sessions, &key);
	if (!sess)
		return count(PGWU_DROP_DL_NO_SESSION, XDP_DROP, frame_len);
	if (cfg->s5_mtu && tot_len + GTPU_ENCAP_LEN > cfg->s5_mtu)
		return count(PGWU_DROP_TOO_BIG, XDP_DROP, frame_len);
	__sync_fetch_and_add(&sess->packets, 1);
	__sync_fetch_and_add(&sess->bytes, tot_len);
	sgw_addr = sess->sgw_addr;
	teid = sess->teid;

	l2_in = ((void *)iph - data) & 0xff;
	avail = (data_end - (void *)iph) & 0xffff;
	l2_out = cfg->s5_vlan ? sizeof(struct ethhdr) + sizeof(struct vlan_hdr) : sizeof(struct ethhdr);
	if (avail > tot_len && bpf_xdp_adjust_tail(ctx, -(int)(avail - tot_len)))
		return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);
	if (bpf_xdp_adjust_head(ctx, (int)l2_in - (int)(l2_out + GTPU_ENCAP_LEN)))
		return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	ret = write_l2(data, data_end, cfg->s5_dst_mac, cfg->s5_src_mac, cfg->s5_vlan);
	if (ret < 0)
		return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);

	oip = data + (ret & 0xff);
	udp = (void *)(oip + 1);
	gh = (void *)(udp + 1);
	if ((void *)(gh + 1) > data_end)
		return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);
	oip->version = 4;
	oip->ihl = 5;
	oip->tos = tos; /* RFC 2983: the tunnel keeps the inner DSCP visible */
	oip->tot_len = bpf_htons(tot_len + GTPU_ENCAP_LEN);
	oip->id = 0;
	oip->frag_off = 0;
	oip->ttl = 64;
	oip->protocol = IPPROTO_UDP;
	oip->check = 0;
	oip->saddr = cfg->gtpu_addr;
	oip->daddr = sgw_addr;
	oip->check = ipv4_csum(oip);
	udp->source = bpf_htons(GTPU_PORT);
	udp->dest = bpf_htons(GTPU_PORT);
	udp->len = bpf_htons(tot_len + sizeof(*udp) + sizeof(*gh));
	udp->check = 0;
	gh->flags = GTPU_FLAGS_PLAIN;
	gh->type = GTPU_TYPE_GPDU;
	gh->length = bpf_htons(tot_len);
	gh->teid = teid;

	if (cfg->flags & PGWU_F_UDP_CSUM) {
		__u64 sum = (oip->saddr & 0xffff) + (oip->saddr >> 16) + (oip->daddr & 0xffff) +
			    (oip->daddr >> 16) + bpf_htons(IPPROTO_UDP) + udp->len;
		__u32 off = ((void *)udp - data) & 0xff;
		int ok;
		__u16 check;

		sum += csum_packet(data, data_end, off, tot_len + sizeof(*udp) + sizeof(*gh), &ok);
		if (!ok)
			return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);
		check = csum_fold(sum);
		/* RFC 768: a computed 0 is sent as all ones; 0 means "no checksum" */
		udp = data + off;
		if ((void *)(udp + 1) > data_end)
			return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);
		udp->check = check ? check : 0xffff;
	}
	return count(PGWU_DL_FWD, egress(ctx, cfg, cfg->s5_ifindex), frame_len);
}

SEC("xdp")
int xdp_pgwu(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 frame_len = (data_end - data) & 0xffff;
	struct hdr_cursor nh = { .pos = data };
	struct pgwu_config *cfg;
	struct ethhdr *eth;
	struct iphdr *iph;
	struct udphdr *udp;
	__u32 zero = 0, ihl, tot_len, udp_len;
	__u16 vlan;
	int proto;

	cfg = bpf_map_lookup_elem(&pgwu_config, &zero);
	if (!cfg)
		return count(PGWU_DROP_INTERNAL, XDP_DROP, frame_len);

	proto = parse_ethhdr_vlan(&nh, data_end, &eth, &vlan);
	if (proto < 0)
		return count(PGWU_DROP_TRUNCATED, XDP_DROP, frame_len);
	if (proto != bpf_htons(ETH_P_IP)) /* ARP, IPv6, LLDP ...: the host's */
		return count(PGWU_PASS, XDP_PASS, frame_len);

	iph = nh.pos;
	if ((void *)(iph + 1) > data_end)
		return count(PGWU_DROP_TRUNCATED, XDP_DROP, frame_len);
	if (iph->version != 4 || iph->ihl < 5)
		return count(PGWU_DROP_BAD_HEADER, XDP_DROP, frame_len);
	ihl = iph->ihl * 4;
	tot_len = bpf_ntohs(iph->tot_len);
	if (tot_len < ihl)
		return count(PGWU_DROP_BAD_HEADER, XDP_DROP, frame_len);
	if ((void *)iph + tot_len > data_end)
		return count(PGWU_DROP_TRUNCATED, XDP_DROP, frame_len);
	nh.pos = (void *)iph + ihl;

	if (iph->protocol == IPPROTO_UDP && (!cfg->gtpu_addr || iph->daddr == cfg->gtpu_addr)) {
		udp_len = parse_udphdr(&nh, data_end, &udp);
		if ((int)udp_len < 0)
			return count(PGWU_DROP_TRUNCATED, XDP_DROP, frame_len);
		if (udp->dest == bpf_htons(GTPU_PORT)) {
			if (iph->frag_off & bpf_htons(IP_MF | IP_OFFSET))
				return count(PGWU_DROP_FRAGMENT, XDP_DROP, frame_len);
			if (udp_len < sizeof(*udp) || udp_len > tot_len - ihl)
				return count(PGWU_DROP_BAD_HEADER, XDP_DROP, frame_len);
			return handle_ul(ctx, cfg, nh.pos, udp_len - sizeof(*udp), frame_len);
		}
	}
	if (iph->daddr == cfg->gtpu_addr || iph->daddr == cfg->sgi_addr) /* ICMP, other UDP to us */
		return count(PGWU_PASS, XDP_PASS, frame_len);
	return handle_dl(ctx, cfg, iph, vlan, tot_len, frame_len);
}

char _license[] SEC("license") = "GPL";
