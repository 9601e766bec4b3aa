/* Configuration of the cpumap steering program (steer.bpf.c); mirrored in perfkit/layouts.py. */
#ifndef STEER_KERN_USER_H
#define STEER_KERN_USER_H

#include <linux/types.h>

#define STEER_MAX_CPUS 64

/* Set before load (a `const volatile` global). */
struct steer_config {
	__u32 ncpus;			/* how many entries of cpus are used */
	__u32 cpus[STEER_MAX_CPUS];	/* CPU numbers: the cpumap's keys */
};

#endif /* STEER_KERN_USER_H */
