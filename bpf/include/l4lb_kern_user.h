/* Types and constants the L4 load balancer (bpf/l4lb.bpf.c) shares with userspace; mirrored in
 * perfkit/dataplanes/l4lb/layouts.py, which tests/test_l4lb.py checks against the BTF of l4lb.o.
 */
#ifndef L4LB_KERN_USER_H
#define L4LB_KERN_USER_H

#include <linux/types.h>

/* Entries of each VIP's Maglev lookup table; prime (Maglev, NSDI 2016, 3.4), as Katran's default. */
#ifndef L4LB_RING_SIZE
#define L4LB_RING_SIZE 65537
#endif
/* Defaults of the map sizes; userspace may set others at load (max_entries). */
#ifndef L4LB_MAX_VIPS
#define L4LB_MAX_VIPS 64
#endif
#ifndef L4LB_MAX_REALS
#define L4LB_MAX_REALS 4096
#endif
/* Real index 0 is never a real: a table entry of 0 means "no real" (an empty VIP's table). */
#define L4LB_NO_REAL 0
/* jhash initval of the flow hash; the reference model uses the same. */
#define L4LB_HASH_SEED 0x4c344c42	/* "L4LB" */

/* l4lb_config.flags */
#define L4LB_F_XDP_TX (1U << 0)	/* bounce out of the ingress port (one-armed) instead of redirecting */

/* Run-time configuration: the single entry of the l4lb_config array map. */
struct l4lb_config {
	__be32 lb_addr;		/* outer source of the tunnels; traffic to it goes to the host */
	__u32 egress_ifindex;	/* port towards the reals (bpf_redirect) */
	__u8 src_mac[6];	/* egress port's MAC */
	__u8 dst_mac[6];	/* next hop towards the reals */
	__u16 egress_mtu;	/* largest outer IPv4 packet allowed on egress, 0 = unchecked */
	__u16 pad;
	__u32 flags;		/* L4LB_F_* */
};

/* vips key: what a client connects to. */
struct vip_key {
	__be32 addr;
	__be16 port;
	__u8 proto;		/* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
};

/* vips value. */
struct vip_meta {
	__u32 vip_num;		/* row of ch_rings and index of vip_stats, < max VIPs */
	__u32 flags;		/* reserved for per-VIP options, 0 */
};

/* reals value, by real index (what ch_rings holds). */
struct real_def {
	__be32 addr;		/* outer destination; 0 = no real */
};

/* Index of the per-CPU l4lb_stats array: what happened to a packet. */
enum l4lb_stat {
	L4LB_FWD = 0,			/* encapsulated towards a real */
	L4LB_PASS,			/* not for a VIP (or not TCP/UDP over IPv4): to the host */
	L4LB_ICMP_FRAG_NEEDED,		/* DF packet too big for the tunnel: frag-needed sent back */
	L4LB_DROP_TRUNCATED,		/* headers or IPv4 total length point past the frame */
	L4LB_DROP_BAD_HEADER,		/* IPv4 version/IHL/total length inconsistent */
	L4LB_DROP_FRAGMENT,		/* IPv4 fragment (no ports to hash on) */
	L4LB_DROP_NO_REAL,		/* the VIP has no real */
	L4LB_DROP_TOO_BIG,		/* too big for the tunnel and DF not set */
	L4LB_DROP_INTERNAL,		/* no config, or the kernel refused to resize the packet */
	L4LB_STAT_MAX,
};

/* Value of l4lb_stats, vip_stats and real_stats. */
struct l4lb_stat_rec {
	__u64 packets;
	__u64 bytes;		/* frame bytes as received */
};

#endif /* L4LB_KERN_USER_H */
