/* Tunnels as header fields: how a dataplane declares an encapsulation its frames carry, so that the
 * generic programs (the sink, the steering program) walk through it without knowing the protocol.
 * Mirrored in perfkit/layouts.py; perfkit/encap.py fills it from a dataplane's declaration. */
#ifndef ENCAP_KERN_USER_H
#define ENCAP_KERN_USER_H

#include <linux/types.h>

#define ENCAP_MAX 4		/* tunnels one table holds */
#define ENCAP_MAX_EXT 4		/* extension headers walked before giving up on a packet */

/* What follows a tunnel's header. */
enum encap_inner {
	ENCAP_INNER_IPV4 = 0,	/* an IPv4 packet */
	ENCAP_INNER_ETHER = 1,	/* an Ethernet frame (at most one VLAN tag), then IPv4 */
};

/* One tunnel: announced by the outer IPv4 protocol (and, over UDP, the destination port); a fixed
 * header, an optional part that flag bits announce, and an optional chain of extension headers
 * (each gives its length in ext_unit-byte units in its first byte, the next one's type in its
 * last; type 0 ends the chain). */
struct encap {
	__be16 udp_dport;	/* over UDP: the destination port that announces it; else 0 */
	__u8 ip_proto;		/* the outer IPv4 protocol that announces it */
	__u8 inner;		/* enum encap_inner */
	__u8 hdr_len;		/* the fixed header after the IPv4 (or UDP) header [bytes] */
	__u8 flags_off;		/* the byte of the header whose bits announce the optional parts */
	__u8 opt_mask;		/* any of these bits set: opt_len more bytes (0: never) */
	__u8 opt_len;
	__u8 ext_mask;		/* any of these bits set: a chain of extension headers (0: never) ... */
	__u8 ext_type_off;	/* ... the first one's type is this byte of the header */
	__u8 ext_unit;
	__u8 pad;
};

/* The tunnels a program walks through. */
struct encap_table {
	__u32 n;		/* entries of encaps in use */
	struct encap encaps[ENCAP_MAX];
};

#endif /* ENCAP_KERN_USER_H */
