/* Types the core-share accounting (coreshare.bpf.c) shares with userspace; mirrored in
 * perfkit/layouts.py. */
#ifndef CORESHARE_KERN_USER_H
#define CORESHARE_KERN_USER_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Who ran on a CPU. */
enum core_class {
	CORE_IDLE = 0,		/* the idle task */
	CORE_PACKET = 1,	/* the DUT's packet threads (the `packet_tids` map) */
	CORE_PERFKIT = 2,	/* perfkit's own processes (the `perfkit_tgids` map) */
	CORE_OTHER = 3,		/* everything else: other processes, kernel threads */
	CORE_CLASSES = 4,
};

/* Per CPU, cumulative since attached (userspace takes differences). The task running now is
 * charged up to `since_ns` only: a reader adds now - since_ns to `running` itself, since a busy
 * packet thread may run a whole trial without a switch. */
struct core_share {
	__u64 ns[CORE_CLASSES];	/* time each class ran [ns] */
	__u64 since_ns;		/* bpf_ktime_get_ns() of the last switch on this CPU (0: none yet) */
	__u32 running;		/* enum core_class of the task switched in then */
	__u32 pad;
};

#endif /* CORESHARE_KERN_USER_H */
