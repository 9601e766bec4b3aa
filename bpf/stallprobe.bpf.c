// SPDX-License-Identifier: GPL-2.0
/* Stall probe: a pinned BPF timer ticks every period on each probed CPU and measures how late it
 * runs. A vCPU that the host takes away (or a CPU that does not serve interrupts) ticks late; the
 * gap is the stall. The hypervisor's steal clock (KVM's per-CPU steal_time, updated by the host on
 * every VM entry, so exact to the nanosecond) tells whether the host took the time: /proc/stat's
 * steal is only accounted at scheduler ticks, too coarse for millisecond stalls.
 *
 * Armed per CPU by running `stall_arm` with BPF_PROG_TEST_RUN from a thread pinned to that CPU;
 * the timers stop when the maps are freed (the object closed, or its process gone).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "stallprobe_kern_user.h"

#define CLOCK_MONOTONIC 1

const volatile __u64 period_ns = 100000;
/* Gaps longer than the period by more than this are stalls (counted, and sent as events). */
const volatile __u64 report_ns = 50000;

extern struct kvm_steal_time steal_time __ksym __weak;

struct probe_timer {
	struct bpf_timer timer;
};

/* One timer per CPU, indexed by CPU number. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STALL_MAX_CPUS);
	__type(key, __u32);
	__type(value, struct probe_timer);
} timers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stall_cpu);
} stall_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} stall_events SEC(".maps");

static __always_inline __u64 steal_now(__u32 cpu)
{
	struct kvm_steal_time *st;

	if (!&steal_time) /* weak: absent when the kernel is not a KVM guest */
		return 0;
	st = bpf_per_cpu_ptr(&steal_time, cpu);
	return st ? st->steal : 0;
}

static __always_inline __u32 log2_us(__u64 ns)
{
	__u64 us = ns / 1000;
	__u32 b = 0;

#pragma unroll
	for (int i = 0; i < STALL_HIST_BUCKETS - 1; i++)
		if (us >> (i + 1))
			b = i + 1;
	return b;
}

static int tick(void *map, __u32 *key, struct probe_timer *t)
{
	__u32 zero = 0, cpu = bpf_get_smp_processor_id();
	struct stall_cpu *s = bpf_map_lookup_elem(&stall_cpu, &zero);
	__u64 now = bpf_ktime_get_ns(), steal = steal_now(cpu);

	if (s) {
		if (s->last_ns && now > s->last_ns) {
			__u64 gap = now - s->last_ns;

			s->ticks++;
			if (gap > s->max_gap_ns)
				s->max_gap_ns = gap;
			if (gap > period_ns + report_ns) {
				struct stall_event *e = bpf_ringbuf_reserve(&stall_events, sizeof(*e), 0);
				__u32 b = log2_us(gap - period_ns);

				s->stalls++;
				s->stalled_ns += gap - period_ns;
				if (b < STALL_HIST_BUCKETS)
					s->hist[b]++;
				if (e) {
					e->end_ns = now;
					e->gap_ns = gap;
					e->steal_ns = steal - s->last_steal_ns;
					e->cpu = cpu;
					e->pad = 0;
					bpf_ringbuf_submit(e, 0);
				} else {
					s->lost_events++;
				}
			}
		}
		s->last_ns = now;
		s->last_steal_ns = steal;
	}
	bpf_timer_start(&t->timer, period_ns, BPF_F_TIMER_CPU_PIN);
	return 0;
}

SEC("xdp")
int stall_arm(struct xdp_md *ctx)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct probe_timer *t = bpf_map_lookup_elem(&timers, &cpu);

	if (!t)
		return XDP_ABORTED;
	bpf_timer_init(&t->timer, &timers, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&t->timer, tick);
	if (bpf_timer_start(&t->timer, period_ns, BPF_F_TIMER_CPU_PIN))
		return XDP_ABORTED;
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
