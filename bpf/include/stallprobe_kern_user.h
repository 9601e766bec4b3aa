/* Types the stall probe (stallprobe.bpf.c) shares with userspace; mirrored in perfkit/layouts.py. */
#ifndef STALLPROBE_KERN_USER_H
#define STALLPROBE_KERN_USER_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define STALL_MAX_CPUS 64
/* Gap histogram: bucket i counts gaps of [2^i, 2^(i+1)) microseconds beyond the period. */
#define STALL_HIST_BUCKETS 16

/* Set by userspace before arming. */
struct stall_config {
	__u64 period_ns;	/* timer period */
	__u64 report_ns;	/* ticks later than the period by more than this, and waits longer, are stalls */
	__u64 speed_steps;	/* steps of the speed probe (0: no probe) */
	__u64 speed_every;	/* ticks from one speed probe to the next (0, 1: every tick) */
};

/* Per CPU, cumulative since the probe was armed (userspace takes differences). */
struct stall_cpu {
	__u64 last_ns;		/* bpf_ktime_get_ns() of the last tick */
	__u64 last_steal_ns;	/* the hypervisor's steal clock at the last tick (0: none) */
	__u64 ticks;
	__u64 stalls;		/* gaps longer than the period by more than report_ns */
	__u64 stalled_ns;	/* sum of those gaps minus the period */
	__u64 max_gap_ns;	/* longest gap since armed */
	__u64 lost_events;	/* stall events the ring buffer had no room for */
	__u64 waits;		/* times a watched thread waited longer than report_ns for other work */
	__u64 max_wait_ns;	/* longest wait of a watched thread, runnable but not running, for other
				 * work: what other watched threads ran meanwhile is left out */
	__u64 hist[STALL_HIST_BUCKETS];
	__u64 speed_ns;		/* time the speed probe took, summed over the probes counted */
	__u64 speed_probes;	/* probes counted (a probe a stall interrupted is not) */
};

enum stall_kind {
	STALL_TICK = 0,		/* the CPU did not run its timer: the vCPU was away or interrupts were off */
	STALL_WAIT = 1,		/* a watched thread (a DUT packet thread) was runnable but did not run */
};

/* The value of the watched map, per thread id: when it became runnable and how long the watched
 * threads had run on its CPU by then (a wait's own part is what they ran until it runs). */
struct stall_watch {
	__u64 since_ns;		/* bpf_ktime_get_ns() when it became runnable; 0: running or sleeping */
	__u64 own_ns;		/* the CPU's watched-thread run time at since_ns */
};

/* One stall of gap_ns ending at end_ns (bpf_ktime_get_ns()); for STALL_TICK the period included.
 * For STALL_WAIT, gap_ns is the part of the wait in which no watched thread ran (something else
 * did, or the CPU idled or was away): several packet threads on one core that wait for each other
 * are the DUT's own cost, not a stall; own_ns is that part. */
struct stall_event {
	__u64 end_ns;
	__u64 gap_ns;
	__u64 steal_ns;		/* what the hypervisor's steal clock advanced during the gap */
	__u32 cpu;
	__u32 kind;		/* enum stall_kind */
	__u64 own_ns;		/* STALL_WAIT: of the wait, the time other watched threads ran */
};

#endif /* STALLPROBE_KERN_USER_H */
