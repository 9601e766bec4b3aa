/* Types and constants the PGW-U XDP program shares with userspace.
 * perfkit/layouts.py mirrors every struct and enum here; tests/test_layouts.py checks it against
 * the BTF of build/bpf/pgwu.o, so change both together.
 */
#ifndef PGWU_KERN_USER_H
#define PGWU_KERN_USER_H

#include <linux/types.h>

/* pgwu_config.flags */
#define PGWU_F_UDP_CSUM (1U << 0)	/* compute the outer UDP checksum on encap (else 0, TS 29.281) */
#define PGWU_F_XDP_TX (1U << 1)		/* bounce out of the ingress port (one-armed) instead of redirecting */

/* The session tables' design, a build option (-DPGWU_SESSION_TABLE=...): the tables are maps
 * whose type is fixed when the program is compiled. */
#define PGWU_TABLE_HASH 0		/* HASH, not preallocated (the default) */
#define PGWU_TABLE_PERCPU_HASH 1	/* PERCPU_HASH, not preallocated (seed 001's fix) */
#define PGWU_TABLE_LRU_PERCPU_HASH 2	/* LRU_PERCPU_HASH (seed 001's first design: evicts live sessions) */
#define PGWU_TABLE_TEID_ARRAY 3		/* uplink: an ARRAY indexed by our TEID; downlink: HASH */

/* Run-time configuration: the single entry of the pgwu_config array map. */
struct pgwu_config {
	__u32 s5_ifindex;	/* SGW-side port: DL egress */
	__u32 sgi_ifindex;	/* SGi-side port: UL egress */
	__be32 gtpu_addr;	/* our GTP-U endpoint; GTP-U to it is decapsulated; 0 = any */
	__be32 sgi_addr;	/* our SGi-side address: traffic to it goes to the host */
	__u8 s5_src_mac[6];
	__u8 s5_dst_mac[6];	/* next hop towards the SGWs */
	__u8 sgi_src_mac[6];
	__u8 sgi_dst_mac[6];	/* next hop towards the Internet */
	__u16 s5_vlan;		/* 802.1Q VLAN id on the SGW side, 0 = untagged */
	__u16 s5_mtu;		/* largest outer IPv4 packet allowed on DL egress, 0 = unchecked */
	__u32 flags;		/* PGWU_F_* */
	/* PGWU_TABLE_TEID_ARRAY: our uplink TEIDs are allocated as ul_teid_base + (block << 16) + slot,
	 * slot < teid_stride; the session is ul_sessions[block * teid_stride + slot] */
	__u32 ul_teid_base;
	__u32 teid_stride;
};

/* ul_sessions value; key: the TEID we allocated (__be32, as on the wire). */
struct pgwu_ul_session {
	__be32 ue_addr;		/* inner source must be this */
	__u16 sgi_vlan;		/* tenant VLAN id on SGi egress, 0 = untagged */
	__u16 pad;
	__u64 packets;		/* counted by the program (atomic adds) */
	__u64 bytes;		/* inner IPv4 bytes */
};

/* dl_sessions key: the UE address within a tenant (the VLAN the packet came in on). */
struct pgwu_dl_key {
	__be32 ue_addr;
	__u16 vlan;		/* SGi ingress VLAN id, 0 = untagged */
	__u16 pad;
};

/* dl_sessions value. */
struct pgwu_dl_session {
	__be32 sgw_addr;	/* outer destination */
	__be32 teid;		/* the SGW's TEID for the bearer */
	__u64 packets;		/* counted by the program (atomic adds) */
	__u64 bytes;		/* inner IPv4 bytes */
};

/* Index of the per-CPU pgwu_stats array: what happened to a packet. */
enum pgwu_stat {
	PGWU_UL_FWD = 0,		/* decapsulated and forwarded */
	PGWU_DL_FWD,			/* encapsulated and forwarded */
	PGWU_PASS,			/* not for the dataplane: to the host */
	PGWU_DROP_TRUNCATED,		/* outer headers cut short: length fields point past the frame */
	PGWU_DROP_BAD_HEADER,		/* outer IPv4/UDP/GTP-U fields inconsistent (IHL, lengths) */
	PGWU_DROP_FRAGMENT,		/* fragmented outer GTP-U packet */
	PGWU_DROP_GTP_VERSION,		/* GTP version != 1 or GTP' */
	PGWU_DROP_GTP_EXT,		/* broken extension-header chain */
	PGWU_DROP_UNKNOWN_TEID,
	PGWU_DROP_UE_MISMATCH,		/* inner source is not the session's UE */
	PGWU_DROP_INNER_NOT_IPV4,
	PGWU_DROP_INNER_TRUNCATED,
	PGWU_DROP_DL_NO_SESSION,
	PGWU_DROP_TOO_BIG,		/* encapsulated packet would exceed s5_mtu */
	PGWU_DROP_INTERNAL,		/* no config, or the kernel refused to resize the packet */
	PGWU_STAT_MAX,
};

struct pgwu_stat_rec {
	__u64 packets;
	__u64 bytes;		/* frame bytes as received */
};

#endif /* PGWU_KERN_USER_H */
