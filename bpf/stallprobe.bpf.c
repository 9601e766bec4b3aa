// SPDX-License-Identifier: GPL-2.0
/* Stall probe: a pinned BPF timer ticks every period on each probed CPU and measures how late it
 * runs. A vCPU that the host takes away (or a CPU that does not serve interrupts) ticks late; the
 * gap is the stall. The hypervisor's steal clock (KVM's per-CPU steal_time, updated by the host on
 * every VM entry, so exact to the nanosecond) tells whether the host took the time: /proc/stat's
 * steal is only accounted in whole scheduler ticks, too coarse for millisecond stalls.
 *
 * A timer tick runs in softirq context, so a real-time thread hogging the CPU does not delay it;
 * the DUT's packet threads (threaded NAPI, cpumap kthreads) do wait behind such a thread. So the
 * probe also watches chosen threads (the `watched` map, by tid) from the scheduler's tracepoints:
 * the time from wake-up (or preemption) to running is how long packets could not be processed.
 * Only what could take a core from a real-time packet thread counts: another real-time task (or
 * interrupts on its time), and the host (the steal clock). Several SCHED_FIFO packet threads on one
 * core that wait for each other are the DUT's own cost, and so is the kernel's throttling of
 * real-time threads that would run more than 95 % of a second (the DUT at full load): while it
 * throttles, ordinary tasks or nothing run. `watched_run` keeps each CPU's run time of other
 * real-time tasks; a wait's stall is how much that and the steal clock grew while it waited.
 *
 * A vCPU can also run slowly without stopping: the host shares its physical core with other guests
 * (SMT siblings, frequency), and a CPU-bound DUT then forwards less. So each tick also times a fixed
 * piece of work (the speed probe, the same kind of step as the calibrated DUT's): its time per probe
 * is the CPU's speed at that moment, measured where the DUT runs.
 *
 * Armed per CPU by running `stall_arm` with BPF_PROG_TEST_RUN from a thread pinned to that CPU;
 * the timers stop when the maps are freed (the object closed, or its process gone).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "stallprobe_kern_user.h"

#define CLOCK_MONOTONIC 1
#define SPEED_WARMUP_STEPS 64

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stall_config);
} probe_config SEC(".maps");


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

/* tid -> when it became runnable (0: running or sleeping); filled by userspace with zeros. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct stall_watch);
} watched SEC(".maps");

/* Per CPU (indexed by CPU number, so that a wake-up can read the wakee's CPU): how long watched
 * threads have run on it, and what runs now. */
struct watched_run {
	__u64 ns;		/* watched threads' run time on this CPU, up to `since` */
	__u64 rt_ns;		/* other real-time tasks' run time on this CPU, up to `since` */
	__u64 since;		/* the last switch on this CPU */
	__u32 running;		/* what runs since then: RUN_WATCHED, RUN_RT or 0 */
	__u32 pad;
	__u64 at_tick;		/* watched threads' run time at this CPU's last tick */
};

#define RUN_WATCHED 1
#define RUN_RT 2
#define MAX_RT_PRIO 100

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STALL_MAX_CPUS);
	__type(key, __u32);
	__type(value, struct watched_run);
} watched_run SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} stall_events SEC(".maps");

/* cpu -> the hypervisor's steal clock as the scheduler last read it [ns] (0: not a KVM guest). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STALL_MAX_CPUS);
	__type(key, __u32);
	__type(value, __u64);
} steal_seen SEC(".maps");

static __always_inline __u64 steal_now(__u32 cpu)
{
	__u64 *v = bpf_map_lookup_elem(&steal_seen, &cpu);

	return v ? *v : 0;
}

/* KVM's steal clock is a per-CPU variable kallsyms does not list (no KALLSYMS_ALL), and neither
 * is the run queue; kvm_steal_clock() cannot be traced. The run queue keeps what the scheduler last
 * read of it, in ns, refreshed by every clock update: each switch, and each scheduler tick, in the
 * local timer interrupt. Both are recorded: a CPU busy with one real-time thread hardly switches,
 * and after a stall the interrupt (hard) runs before this probe's timer (soft), so a late tick
 * sees the steal of its own gap. */
static __always_inline void see_steal(struct task_struct *p)
{
	__u32 cpu = bpf_get_smp_processor_id();
	__u64 steal = p->se.cfs_rq->rq->prev_steal_time_rq;

	bpf_map_update_elem(&steal_seen, &cpu, &steal, BPF_ANY);
}

SEC("tp_btf/local_timer_exit")
int BPF_PROG(stall_irq, int vector)
{
	see_steal(bpf_get_current_task_btf());
	return 0;
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

static __always_inline void send(__u64 now, __u64 gap, __u64 steal, __u32 cpu, __u32 kind, __u64 own,
				 struct stall_cpu *s)
{
	struct stall_event *e = bpf_ringbuf_reserve(&stall_events, sizeof(*e), 0);

	if (!e) {
		s->lost_events++;
		return;
	}
	e->end_ns = now;
	e->gap_ns = gap;
	e->steal_ns = steal;
	e->cpu = cpu;
	e->kind = kind;
	e->own_ns = own;
	bpf_ringbuf_submit(e, 0);
}

struct speed_state {
	__u64 x;
};

static long speed_step(__u64 index, void *ctx)
{
	struct speed_state *s = ctx;

	s->x = (s->x ^ (s->x >> 31)) * 0x9e3779b97f4a7c15ULL + index;
	return 0;
}

/* Time speed_steps steps every speed_every ticks, once a few steps have run untimed: after the CPU
 * idled, or after a DUT with large tables went through the caches, a cold first run measures the
 * caches, not the CPU. A long probe now and then, rather than a short one every tick: what is left
 * cold after the warm-up (measured: 64 steps read 13.0 ns/step where 1024 read 11.4) is spread over
 * more steps, so the probe tracks the calibrated DUT's program within 0.8 % instead of 2.1 % (CV of
 * their ratio over 15 trials). A probe longer than report_ns was interrupted (a stall), not slow. */
static __always_inline void speed_probe(struct stall_cpu *s, struct stall_config *c)
{
	struct speed_state st = { .x = s->ticks };
	__u64 t0, dt;

	if (!c->speed_steps || (c->speed_every > 1 && s->ticks % c->speed_every))
		return;
	if (bpf_loop(SPEED_WARMUP_STEPS, speed_step, &st, 0) < 0)
		return;
	t0 = bpf_ktime_get_ns();
	if (bpf_loop(c->speed_steps, speed_step, &st, 0) < 0)
		return;
	dt = bpf_ktime_get_ns() - t0 + (st.x & 0);	/* keeps the loop's result live */
	if (dt > c->report_ns)
		return;
	s->speed_ns += dt;
	s->speed_probes++;
}

/* The watched threads' run time on `cpu` until `now`, the one running now included. */
static __always_inline __u64 watched_ns(__u32 cpu, __u64 now)
{
	struct watched_run *r = bpf_map_lookup_elem(&watched_run, &cpu);

	if (!r)
		return 0;
	return r->ns + (r->running == RUN_WATCHED && now > r->since ? now - r->since : 0);
}

/* Other real-time tasks' run time on `cpu` until `now`, the one running now included. */
static __always_inline __u64 rt_ns(__u32 cpu, __u64 now)
{
	struct watched_run *r = bpf_map_lookup_elem(&watched_run, &cpu);

	if (!r)
		return 0;
	return r->rt_ns + (r->running == RUN_RT && now > r->since ? now - r->since : 0);
}

/* A watched thread starts waiting on `cpu`: what could stall it so far. */
static __always_inline void stamp(struct stall_watch *w, __u32 cpu, __u64 now)
{
	w->since_ns = now;
	w->rt_ns = rt_ns(cpu, now);
	w->steal_ns = steal_now(cpu);
}

static int tick(void *map, __u32 *key, struct probe_timer *t)
{
	__u32 zero = 0, cpu = bpf_get_smp_processor_id();
	struct stall_cpu *s = bpf_map_lookup_elem(&stall_cpu, &zero);
	struct stall_config *c = bpf_map_lookup_elem(&probe_config, &zero);
	__u64 now = bpf_ktime_get_ns(), steal = steal_now(cpu), own = 0;
	struct watched_run *run = bpf_map_lookup_elem(&watched_run, &cpu);

	if (!c)
		return 0;
	/* How long watched threads ran since the last tick: a tick that is late while they ran was
	 * delayed behind them (at full load a real-time packet thread can keep the timer's softirq
	 * from running for tens of ms), and they processed packets all along: no stall for them. */
	if (run) {
		__u64 ran = watched_ns(cpu, now);

		own = ran - run->at_tick;
		run->at_tick = ran;
	}
	if (s) {
		__u64 period_ns = c->period_ns, report_ns = c->report_ns;

		if (s->last_ns && now > s->last_ns) {
			__u64 gap = now - s->last_ns;

			s->ticks++;
			if (gap > s->max_gap_ns)
				s->max_gap_ns = gap;
			if (gap > period_ns + report_ns) {
				__u32 b = log2_us(gap - period_ns);

				s->stalls++;
				s->stalled_ns += gap - period_ns;
				if (b < STALL_HIST_BUCKETS)
					s->hist[b]++;
				send(now, gap, steal - s->last_steal_ns, cpu, STALL_TICK, own, s);
			}
		}
		s->last_ns = now;
		s->last_steal_ns = steal;
		speed_probe(s, c);
	}
	bpf_timer_start(&t->timer, c->period_ns, BPF_F_TIMER_CPU_PIN);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(stall_wakeup, struct task_struct *p)
{
	__u32 tid = p->pid;
	struct stall_watch *w = bpf_map_lookup_elem(&watched, &tid);
	__u64 now;

	if (w && !w->since_ns) {
		now = bpf_ktime_get_ns();
		stamp(w, p->wake_cpu, now);	/* the CPU it will run on */
	}
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(stall_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 zero = 0, tid = prev->pid, cpu = bpf_get_smp_processor_id();
	__u64 now = bpf_ktime_get_ns(), own = 0;
	struct stall_watch *w = bpf_map_lookup_elem(&watched, &tid);
	struct watched_run *run = bpf_map_lookup_elem(&watched_run, &cpu);
	struct stall_config *c;
	struct stall_cpu *s;

	see_steal(prev);
	/* What ran since the last switch on this CPU: a watched thread's run is the DUT's own; another
	 * real-time task's could delay a packet thread. */
	if (run) {
		if (run->since && now > run->since) {
			if (run->running == RUN_WATCHED)
				run->ns += now - run->since;
			else if (run->running == RUN_RT)
				run->rt_ns += now - run->since;
		}
		run->since = now;
	}
	/* Preempted while runnable: it waits from now. A thread that blocks waits for a wake-up, not
	 * for the CPU: forget any stamp, since a wake-up that finds it still running (it had only
	 * announced that it would sleep, as NAPI and cpumap kthreads do before checking their queue)
	 * stamps it too, and that stamp would otherwise count its whole sleep as a wait. */
	if (w) {
		if (prev->__state == 0)
			stamp(w, cpu, now);
		else
			w->since_ns = 0;
	}
	tid = next->pid;
	w = bpf_map_lookup_elem(&watched, &tid);
	if (run)
		run->running = w ? RUN_WATCHED : next->prio < MAX_RT_PRIO && next->pid ? RUN_RT : 0;
	if (!w || !w->since_ns)
		return 0;
	s = bpf_map_lookup_elem(&stall_cpu, &zero);
	c = bpf_map_lookup_elem(&probe_config, &zero);
	if (s && c && now > w->since_ns) {
		__u64 wait = now - w->since_ns;

		/* only other real-time tasks and the host could keep it from running (see the top) */
		__u64 steal = steal_now(cpu) - w->steal_ns;
		__u64 stalled = (run ? run->rt_ns - w->rt_ns : 0) + steal;

		if (stalled > wait)
			stalled = wait;
		if (steal > stalled)
			steal = stalled;
		own = wait - stalled;
		wait = stalled;
		if (wait > s->max_wait_ns)
			s->max_wait_ns = wait;
		if (wait > c->report_ns) {
			s->waits++;
			/* the host's part (steal) apart from other real-time tasks' */
			send(now, wait, steal, cpu, STALL_WAIT, own, s);
		}
	}
	w->since_ns = 0;
	return 0;
}

SEC("xdp")
int stall_arm(struct xdp_md *ctx)
{
	__u32 zero = 0, cpu = bpf_get_smp_processor_id();
	struct probe_timer *t = bpf_map_lookup_elem(&timers, &cpu);
	struct stall_config *c = bpf_map_lookup_elem(&probe_config, &zero);

	if (!t || !c || !c->period_ns)
		return XDP_ABORTED;
	bpf_timer_init(&t->timer, &timers, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&t->timer, tick);
	if (bpf_timer_start(&t->timer, c->period_ns, BPF_F_TIMER_CPU_PIN))
		return XDP_ABORTED;
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
