// SPDX-License-Identifier: GPL-2.0
/* Core share: which kind of task ran on each CPU, and for how long, from the scheduler's switches.
 *
 * A DUT's figures are only the DUT's when its cores ran its packet threads. /proc/stat says how
 * busy a core was, not for whom; a thread's schedstat says how long it ran, not where. Charging the
 * interval between two switches on a CPU to the task that ran in it gives both, per CPU, exactly:
 * the DUT's packet threads, perfkit's own processes (its metrics servers, notebook kernel, CLI),
 * everything else, and idle. Interrupts and softirqs are charged to the task they interrupted, as
 * the scheduler's own accounting does.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "coreshare_kern_user.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct core_share);
} core_share SEC(".maps");

/* Thread ids of the DUT's packet threads (value unused). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u8);
} packet_tids SEC(".maps");

/* Process ids (tgid) of perfkit's own processes (value unused); userspace refreshes it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} perfkit_tgids SEC(".maps");

static __always_inline __u32 class_of(struct task_struct *p)
{
	__u32 tid = p->pid, tgid = p->tgid;

	if (!tid)
		return CORE_IDLE;
	if (bpf_map_lookup_elem(&packet_tids, &tid))
		return CORE_PACKET;
	if (bpf_map_lookup_elem(&perfkit_tgids, &tgid))
		return CORE_PERFKIT;
	return CORE_OTHER;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(core_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 zero = 0, prev_class;
	__u64 now = bpf_ktime_get_ns();
	struct core_share *s = bpf_map_lookup_elem(&core_share, &zero);

	if (!s)
		return 0;
	/* Classify prev now rather than trusting `running`: a tid may have joined a map since. */
	prev_class = class_of(prev);
	if (s->since_ns && now > s->since_ns && prev_class < CORE_CLASSES)
		s->ns[prev_class] += now - s->since_ns;
	s->since_ns = now;
	s->running = class_of(next);
	return 0;
}

char _license[] SEC("license") = "GPL";
