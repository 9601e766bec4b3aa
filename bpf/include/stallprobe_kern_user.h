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
	__u64 waits;		/* times a watched thread was kept from running longer than report_ns */
	__u64 max_wait_ns;	/* longest time a watched thread, runnable, was kept from running by
				 * another real-time task or the host (see stall_event) */
	__u64 hist[STALL_HIST_BUCKETS];
	__u64 speed_ns;		/* time the speed probe took, summed over the probes counted */
	__u64 speed_probes;	/* probes counted (a probe a stall interrupted is not) */
};

enum stall_kind {
	STALL_TICK = 0,		/* the CPU did not run its timer: the vCPU was away or interrupts were off */
	STALL_WAIT = 1,		/* a watched thread (a DUT packet thread) was runnable but did not run */
};

/* The value of the watched map, per thread id: when it became runnable, and what could keep it
 * from running had grown to by then on its CPU: other real-time tasks' run time and the host's
 * steal clock (a wait's stall is how much they grow until it runs). */
struct stall_watch {
	__u64 since_ns;		/* bpf_ktime_get_ns() when it became runnable; 0: running or sleeping */
	__u64 rt_ns;		/* the CPU's run time of real-time tasks not watched, at since_ns */
	__u64 steal_ns;		/* the CPU's steal clock at since_ns */
};

/* One stall of gap_ns ending at end_ns (bpf_ktime_get_ns()); for STALL_TICK the period included.
 * For STALL_WAIT, gap_ns is the part of the wait in which other real-time tasks ran or the host
 * took the CPU: other packet threads, ordinary tasks and idle while the kernel throttled the
 * real-time ones (the DUT at full load) are the DUT's own cost, not a stall; own_ns is that part.
 * For STALL_TICK, own_ns is how long watched threads ran during the gap (the time the hypervisor
 * took while one was current included): userspace leaves out what of it the steal clock does not
 * account for. */
struct stall_event {
	__u64 end_ns;
	__u64 gap_ns;
	__u64 steal_ns;		/* what the hypervisor's steal clock advanced during the gap */
	__u32 cpu;
	__u32 kind;		/* enum stall_kind */
	__u64 own_ns;		/* of the wait, the part that did not count; of a late tick, the time
				 * watched threads ran */
};

#endif /* STALLPROBE_KERN_USER_H */
