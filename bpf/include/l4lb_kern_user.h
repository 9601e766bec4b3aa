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
/* Real index 0 is never a real: a table entry of 0 means "no real" (an empty VIP's table). Table
 * entries are 16 bits, so at most 65536 reals (indices 1 .. 65535). */
#define L4LB_NO_REAL 0
/* jhash initval of the flow hash; the reference model uses the same. */
#define L4LB_HASH_SEED 0x4c344c42	/* "L4LB" */

/* The VIP table (vips map): open addressing with linear probing over a power-of-two number of
 * slots (default L4LB_VIP_SLOTS; userspace sets max_entries and l4lb_consts.vip_mask at load, at
 * least 4 slots per VIP). A VIP sits in its home slot (l4lb_vip_home) or one of the next
 * L4LB_VIP_PROBES - 1, with no empty slot between. */
#ifndef L4LB_VIP_SLOTS
#define L4LB_VIP_SLOTS (4 * L4LB_MAX_VIPS)
#endif
#define L4LB_VIP_PROBES 8
/* vip_key.proto of a slot that holds no VIP: never used (a lookup stops there) or a removed VIP's
 * (a lookup goes on: the VIPs placed after it must stay reachable) */
#define L4LB_VIP_EMPTY 0
#define L4LB_VIP_REMOVED 0xff
/* Multipliers of the VIP table's hash (multiplicative hashing; the second mixes the port in). */
#define L4LB_VIP_MUL1 0x9e3779b1U
#define L4LB_VIP_MUL2 0x85ebca6bU

/* l4lb_config.flags */
#define L4LB_F_XDP_TX (1U << 0)	/* bounce out of the ingress port (one-armed) instead of redirecting */

/* vip_meta.flags */
#define L4LB_VIP_F_MSS_CLAMP (1U << 0)	/* lower the MSS option of TCP SYNs to what fits the tunnel */
/* The path MTU MSS clamping assumes when l4lb_config.egress_mtu is 0 (unchecked): Ethernet's. */
#define L4LB_DEFAULT_MTU 1500

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

/* What a client connects to: the key of the VIP table. */
struct vip_key {
	__be32 addr;
	__be16 port;
	__u8 proto;		/* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
};

/* What a VIP is configured with. */
struct vip_meta {
	__u32 vip_num;		/* row of ch_rings and index of vip_stats, < max VIPs */
	__u32 flags;		/* L4LB_VIP_F_* */
};

/* vips value: one slot of the VIP table. */
struct vip_slot {
	struct vip_key key;	/* key.proto L4LB_VIP_EMPTY or L4LB_VIP_REMOVED: no VIP here */
	struct vip_meta meta;
};

/* Constants of a loaded program (its .rodata, set by userspace before loading). */
struct l4lb_consts {
	__u32 vip_mask;		/* slots of the vips map - 1 */
};

/* Home slot of a VIP (addresses and port in host order), before masking with vip_mask. */
static inline __u32 l4lb_vip_home(__u32 addr, __u16 port, __u8 proto)
{
	__u32 h = (addr * L4LB_VIP_MUL1) ^ ((__u32)port << 8 | proto);

	h *= L4LB_VIP_MUL2;
	return h ^ (h >> 16);
}

/* ch_rings value: one VIP's Maglev lookup table, the real index of every slot. 16 bits a slot
 * (Katran's ch_rings take 8 bytes, a u32 padded to the array map's 8-byte elements): a 65537-slot
 * table is 128 KiB instead of 512 KiB, so a core's L2 cache holds it and the slot a new flow hashes
 * to is rarely a miss. */
struct ch_ring {
	__u16 reals[L4LB_RING_SIZE];
};

/* reals value, by real index (what ch_rings holds). */
struct real_def {
	__be32 addr;		/* outer destination; 0 = no real */
};

/* Index of the per-CPU l4lb_stats array: what happened to a packet. */
enum l4lb_stat {
	L4LB_FWD = 0,			/* encapsulated towards a real (IPIP) and sent */
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
