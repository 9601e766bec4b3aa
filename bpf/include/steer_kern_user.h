/* Configuration of the cpumap steering program (steer.bpf.c); mirrored in perfkit/layouts.py. */
#ifndef STEER_KERN_USER_H
#define STEER_KERN_USER_H

#include <linux/types.h>

#define STEER_MAX_CPUS 64

/* What a packet is hashed on to pick its core; each dataplane chooses the key that keeps one of
 * its flows (or bearers) on one core. */
enum steer_key {
	STEER_KEY_DADDR = 0,		/* IPv4 destination address */
	STEER_KEY_GTPU_TEID = 1,	/* GTP-U TEID for tunnelled packets, else the destination address */
	STEER_KEY_FLOW = 2,		/* IPv4 source and destination addresses and L4 ports */
};

/* Set before load (a `const volatile` global). */
struct steer_config {
	__u32 ncpus;			/* how many entries of cpus are used */
	__u32 key;			/* enum steer_key */
	__u32 cpus[STEER_MAX_CPUS];	/* CPU numbers: the cpumap's keys */
};

#endif /* STEER_KERN_USER_H */
