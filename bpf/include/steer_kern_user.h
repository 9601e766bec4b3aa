/* Configuration of the cpumap steering program (steer.bpf.c); mirrored in perfkit/layouts.py and
 * filled from a dataplane's declaration (perfkit.encap.Steering). */
#ifndef STEER_KERN_USER_H
#define STEER_KERN_USER_H

#include <linux/types.h>

#include "encap_kern_user.h"

#define STEER_MAX_CPUS 64
#define STEER_MAX_WORDS 4

/* Where a hashed word is. */
enum steer_at {
	STEER_AT_IP = 0,	/* the outer IPv4 header */
	STEER_AT_L4 = 1,	/* the TCP or UDP header behind it (no word for other protocols) */
	STEER_AT_TUNNEL = 2,	/* the header of steer_config.tunnel */
};

/* A 32-bit word of the packet, as loaded (network order). */
struct steer_word {
	__u8 at;		/* enum steer_at */
	__u8 offset;		/* bytes from there */
	__u16 pad;
	__u32 mul;		/* the key is the XOR of every word times its multiplier */
};

/* Set before load (a `const volatile` global). A packet that carries the tunnel is hashed on the
 * words at the tunnel alone, any other on the rest: each dataplane chooses the words that keep
 * one of its flows (or bearers) on one core. */
struct steer_config {
	__u32 ncpus;			/* how many entries of cpus are used */
	__u32 nwords;			/* how many entries of words are used */
	struct steer_word words[STEER_MAX_WORDS];
	struct encap tunnel;		/* ip_proto 0: none */
	__u32 cpus[STEER_MAX_CPUS];	/* CPU numbers: the cpumap's keys */
};

#endif /* STEER_KERN_USER_H */
