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
	__u64 waits;		/* times a watched thread waited longer than report_ns to run */
	__u64 max_wait_ns;	/* longest wait of a watched thread, runnable but not running */
	__u64 hist[STALL_HIST_BUCKETS];
	__u64 speed_ns;		/* time the speed probe took, summed over the probes counted */
	__u64 speed_probes;	/* probes counted (a probe a stall interrupted is not) */
};

enum stall_kind {
	STALL_TICK = 0,		/* the CPU did not run its timer: the vCPU was away or interrupts were off */
	STALL_WAIT = 1,		/* a watched thread (a DUT packet thread) was runnable but did not run */
};

/* One stall of gap_ns ending at end_ns (bpf_ktime_get_ns()); for STALL_TICK the period included. */
struct stall_event {
	__u64 end_ns;
	__u64 gap_ns;
	__u64 steal_ns;		/* what the hypervisor's steal clock advanced during the gap */
	__u32 cpu;
	__u32 kind;		/* enum stall_kind */
};

#endif /* STALLPROBE_KERN_USER_H */
