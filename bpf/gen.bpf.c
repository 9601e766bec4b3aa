// SPDX-License-Identifier: GPL-2.0
/* perfkit's traffic generator. Userspace runs it with BPF_PROG_TEST_RUN in live-frames mode
 * (BPF_F_TEST_XDP_LIVE_FRAMES, Linux >= 5.18): every run turns one page-pool frame into a packet
 * and redirects it out of the tester port. The kernel recycles frames through its page pool,
 * and frames come back from the DUT rewritten (decapsulated, encapsulated), so each run first
 * restores the header bytes from the template, then applies the field engine and the signature.
 *
 * perfkit compiles this file once per traffic profile (perfkit/bpfbuild.py), with the template and
 * field engine given as a C initializer in GEN_CONFIG_FILE, as Cilium compiles its programs per
 * endpoint: the compiler then folds every configuration test, and the restore becomes stores of
 * immediates. Read from .rodata at run time instead (the verifier knows frozen values but keeps
 * the branches), the program took about twice as long: +20-32 ns per frame over a bare redirect
 * against +8-15 ns compiled in (bench/generator_program.py). Without GEN_CONFIG_FILE (the plain
 * build) the configuration is a .rodata global set at load.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "trafficgen_kern_user.h"

#define FCS_LEN 4

#ifdef GEN_CONFIG_FILE
#include GEN_CONFIG_FILE	/* defines GEN_CONFIG_INIT */
#define GEN_CFG const
#define GEN_COMPILED_IN 1
static const struct gen_config gen_cfg = GEN_CONFIG_INIT;
#ifdef GEN_MIX_INIT	/* a TRex profile's streams 1-3 (perfkit/testbed/stlgen.py) */
static const struct gen_mix gen_mix = GEN_MIX_INIT;
static const struct gen_config gen_cfg1 = GEN_CONFIG1_INIT;
static const struct gen_config gen_cfg2 = GEN_CONFIG2_INIT;
static const struct gen_config gen_cfg3 = GEN_CONFIG3_INIT;
#endif
#else
#define GEN_CFG const volatile
#define GEN_COMPILED_IN 0
const volatile struct gen_config gen_cfg = {};
#endif
#ifdef GEN_MIX_INIT
#define MIX_TIMED gen_mix.timed
#else
#define MIX_TIMED 0
#endif

/* Compiled in, every offset is a constant below gen_end(), which the first bounds check covers,
 * so the verifier needs no other; each would cost a few instructions per frame. */
#define OUT_OF_BOUNDS(end) (!GEN_COMPILED_IN && (void *)(end) > data_end)

/* Set at load: the tester port is another ifindex in every testbed, and compiled objects are
 * reused across testbeds. */
const volatile __u32 gen_tx_ifindex SEC(".rodata.port") = 0;

/* Per generator thread (one per CPU): counters, sequence number, stream id, variable positions. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_state);
} gen_state SEC(".maps");

/* xorshift64 (Marsaglia): a helper call per packet costs more than the whole field engine. */
static __always_inline __u32 rng_next(__u64 *x)
{
	__u64 v = *x;

	if (!v) /* unseeded: xorshift would stay at 0 */
		v = ((__u64)bpf_get_prandom_u32() << 32) | bpf_get_prandom_u32() | 1;
	v ^= v << 13;
	v ^= v >> 7;
	v ^= v << 17;
	*x = v;
	return v >> 32;
}

/* Next value of a flow variable. Multiply-shift instead of a modulo keeps random values cheap. */
static __always_inline __u32 var_next(GEN_CFG struct gen_var *v, __u32 *pos, __u64 *rng)
{
	__u32 range = v->max - v->min + 1; /* 0 means the full 32-bit range */
	__u32 off;

	if (v->op == GEN_OP_RANDOM) {
		off = rng_next(rng);
		if (range)
			off = ((__u64)off * range) >> 32;
	} else {
		off = *pos;
		*pos = off + v->step;
		if (range && *pos >= range)
			*pos -= range;
	}
	return v->op == GEN_OP_DEC ? v->max - off : v->min + off;
}

/* Add delta to the accumulators of the checksums in mask. */
#define CSUM_ADD(mask, delta)			\
	do {					\
		if ((mask) & 1)			\
			acc0 += (delta);	\
		if ((mask) & 2)			\
			acc1 += (delta);	\
		if ((mask) & 4)			\
			acc2 += (delta);	\
	} while (0)

/* RFC 1624 eqn. 3 on the 16-bit checksum at off: HC' = ~(~HC + sum of (~m + m')) */
static __always_inline int csum_apply(void *data, void *data_end, __u16 off, __u32 acc)
{
	__u16 *p = data + (off & (GEN_TEMPLATE_MAX - 2));
	__u32 sum;

	if (OUT_OF_BOUNDS(p + 1))
		return -1;
	sum = (__u16)~*p + acc;
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	*p = (__u16)~sum;
	return 0;
}

/* --- TRex's field engine (gen_config.vm_*), with TRex's semantics: src/stx/stl/trex_stl_stream_vm.h
 * in trex-core (inc_mod/dec_mod, StreamDPOpClientsLimit, StreamDPOpPktWrMask). Compiled in, the
 * sizes, offsets and operations are constants: each operation becomes a few instructions. */

/* A size-byte integer at p, big- or little-endian. */
static __always_inline __u64 vm_load(__u8 *p, __u8 size, int big)
{
	__u64 v = 0;

#pragma unroll
	for (int i = 0; i < 8; i++)
		if (i < size)
			v |= (__u64)p[i] << (8 * (big ? size - 1 - i : i));
	return v;
}

static __always_inline void vm_store(__u8 *p, __u8 size, int big, __u64 v)
{
#pragma unroll
	for (int i = 0; i < 8; i++)
		if (i < size)
			p[i] = v >> (8 * (big ? size - 1 - i : i));
}

/* TRex's inc_mod(): past max, the rest of the step counts from min ("restart consumes also 1") */
static __always_inline __u64 vm_inc(__u64 min, __u64 max, __u64 cur, __u64 step, int *wrapped)
{
	__u64 left = max - cur;

	*wrapped = step > left;
	return step <= left ? cur + step : min + (step - left - 1);
}

/* TRex's dec_mod() */
static __always_inline __u64 vm_dec(__u64 min, __u64 max, __u64 cur, __u64 step)
{
	__u64 left = cur - min;

	return step <= left ? cur - step : max - (step - left - 1);
}

/* The next value of variable i, kept at the variable's width as TRex keeps it in its size. */
static __always_inline void vm_update(GEN_CFG struct gen_vm_var *v, struct gen_state *st, int i)
{
	__u64 width = v->size >= 8 ? ~0ULL : (1ULL << (8 * v->size)) - 1;
	__u64 val = st->vm_val[i];
	int wrapped = 0;

	if (v->op == GEN_VM_INC) {
		val = vm_inc(v->min, v->max, val, v->step, &wrapped);
	} else if (v->op == GEN_VM_DEC) {
		val = vm_dec(v->min, v->max, val, v->step);
	} else if (v->op == GEN_VM_RANDOM) {
		__u64 range = v->max - v->min + 1; /* 0: the full 64-bit range */
		__u64 r = ((__u64)rng_next(&st->rng) << 32) | rng_next(&st->rng);

		val = range ? v->min + r % range : r;
	} else { /* GEN_VM_TUPLE: StreamDPOpClientsLimit::run() on one core (IP step 1, port step 0) */
		__u16 port = st->vm_port[i];

		val = vm_inc(v->min, v->max, val, 1, &wrapped);
		if (wrapped)
			port = vm_inc(v->port_min, v->port_max, port, 1, &wrapped);
		if (v->limit && ++st->vm_flow[i] > v->limit) {
			st->vm_flow[i] = 1;
			val = v->min;
			port = v->port_min;
		}
		st->vm_port[i] = port;
	}
	st->vm_val[i] = val & width;
}

/* Run the operations in the profile's order; -1 if the frame is too short (plain build only). */
static __always_inline int vm_run(GEN_CFG struct gen_config *cfg, void *data, void *data_end, struct gen_state *st,
				  int stream)
{
	/* a stream's variables have indexes of their own (several streams share vm_val) */
	if (!(st->vm_ready & (1U << stream))) {
#pragma unroll
		for (int i = 0; i < GEN_VM_MAX_VARS; i++) {
			if (i >= cfg->vm_nvars)
				break;
			if (!cfg->vm_vars[i].size)
				continue;
			st->vm_val[i] = cfg->vm_vars[i].prev;
			st->vm_port[i] = cfg->vm_vars[i].prev_port;
			st->vm_flow[i] = 0;
		}
		st->vm_ready |= 1U << stream;
	}
#pragma unroll
	for (int k = 0; k < GEN_VM_MAX_OPS; k++) {
		GEN_CFG struct gen_vm_op *op = &cfg->vm_ops[k];
		int i = op->var & (GEN_VM_MAX_VARS - 1);
		int big = op->flags & GEN_VM_BIG_ENDIAN;
		__u8 *p = data + (op->offset & (GEN_TEMPLATE_MAX - 1));
		__u64 v;

		if (k >= cfg->vm_nops)
			break;
		if (op->kind == GEN_VM_OP_UPDATE) {
			vm_update(&cfg->vm_vars[i], st, i);
			continue;
		}
		if (OUT_OF_BOUNDS(p + 8))
			return -1;
		v = op->flags & GEN_VM_PORT ? st->vm_port[i] : st->vm_val[i];
		if (op->kind == GEN_VM_OP_WRITE) {
			vm_store(p, op->size, big, v + op->add);
		} else { /* StreamDPOpPktWrMask::wr(): 32-bit arithmetic */
			__u32 val = (__u32)v + (__u32)op->add;
			__u32 old = vm_load(p, op->size, big);

			if (op->shift > 0)
				val <<= op->shift & 31;
			else if (op->shift < 0)
				val >>= (-op->shift) & 31;
			vm_store(p, op->size, big, (old & ~op->mask) | (val & op->mask));
		}
	}
	return 0;
}

/* The profile's checksums, RFC 1624 over the words that may have changed (after the signature). */
static __always_inline int vm_csums(GEN_CFG struct gen_config *cfg, void *data, void *data_end)
{
#pragma unroll
	for (int c = 0; c < GEN_VM_MAX_CSUMS; c++) {
		GEN_CFG struct gen_vm_csum *cs = &cfg->vm_csums[c];
		__u32 acc = cs->old;
		__u16 *f;

		if (c >= cfg->vm_ncsums)
			break;
#pragma unroll
		for (int r = 0; r < GEN_VM_CSUM_RANGES; r++) {
			if (r >= cs->nranges)
				break;
#pragma unroll
			for (int w = 0; w < GEN_TEMPLATE_MAX; w += 2) {
				__u16 *q = data + ((cs->lo[r] + w) & (GEN_TEMPLATE_MAX - 2));

				if (cs->lo[r] + w >= cs->hi[r])
					break;
				if (OUT_OF_BOUNDS(q + 1))
					return -1;
				acc += *q;
			}
		}
		f = data + (cs->off & (GEN_TEMPLATE_MAX - 2));
		if (csum_apply(data, data_end, cs->off, acc))
			return -1;
		if ((cs->flags & GEN_VM_CSUM_UDP) && !*f)
			*f = 0xffff;
	}
	return 0;
}

/* Bytes of the frame the program touches (compiled in, a constant: clang folds the loops). */
static __always_inline __u32 gen_end(GEN_CFG struct gen_config *cfg)
{
	__u32 end = cfg->restore_len;

	if (cfg->sig_off && cfg->sig_off + sizeof(struct signature) > end)
		end = cfg->sig_off + sizeof(struct signature);
	for (int w = 0; w < GEN_MAX_WRITES; w++)
		if (w < cfg->nwrites && cfg->writes[w].offset + 4U > end)
			end = cfg->writes[w].offset + 4U;
	for (int c = 0; c < GEN_MAX_CSUMS; c++)
		if (cfg->csum_off[c] + 2U > end)
			end = cfg->csum_off[c] + 2U;
	for (int k = 0; k < GEN_VM_MAX_OPS; k++)
		if (GEN_COMPILED_IN && k < cfg->vm_nops && cfg->vm_ops[k].kind != GEN_VM_OP_UPDATE &&
		    cfg->vm_ops[k].offset + cfg->vm_ops[k].size > end)
			end = cfg->vm_ops[k].offset + cfg->vm_ops[k].size;
	for (int c = 0; c < GEN_VM_MAX_CSUMS; c++) {
		if (!GEN_COMPILED_IN || c >= cfg->vm_ncsums)
			continue;
		if (cfg->vm_csums[c].off + 2U > end)
			end = cfg->vm_csums[c].off + 2U;
		for (int r = 0; r < GEN_VM_CSUM_RANGES; r++)
			if (r < cfg->vm_csums[c].nranges && cfg->vm_csums[c].hi[r] > end)
				end = cfg->vm_csums[c].hi[r];
	}
	return end;
}

/* Build one frame of the stream cfg describes and send it. */
static __always_inline int gen_build(struct xdp_md *ctx, GEN_CFG struct gen_config *cfg, struct gen_state *st,
				     int stamped, int stream)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 acc0 = 0, acc1 = 0, acc2 = 0; /* GEN_MAX_CSUMS checksums being fixed up */
	__u32 var0 = 0, var1 = 0; /* GEN_MAX_VARS; scalars, since a variable index into the stack is refused */
	__u8 nwrites = cfg->nwrites;
	__u32 words;

	/* restore_len is a constant to the verifier (a frozen .rodata value): one bounds check
	 * covers every word, and the unrolled steps past it are dead code */
	words = cfg->restore_len / 8;
	if (data + (GEN_COMPILED_IN ? gen_end(cfg) : words * 8) > data_end)
		return XDP_ABORTED;
#define RESTORE(i) \
	if (words > (i)) \
		((__u64 *)data)[i] = cfg->tmpl[i];
	RESTORE(0) RESTORE(1) RESTORE(2) RESTORE(3) RESTORE(4) RESTORE(5) RESTORE(6) RESTORE(7)
	RESTORE(8) RESTORE(9) RESTORE(10) RESTORE(11) RESTORE(12) RESTORE(13) RESTORE(14) RESTORE(15)
#undef RESTORE

	if (cfg->nvars > 0)
		var0 = var_next(&cfg->vars[0], &st->var_pos[0], &st->rng);
	if (cfg->nvars > 1)
		var1 = var_next(&cfg->vars[1], &st->var_pos[1], &st->rng);

	/* the VM only compiled in: in the plain build its unrolled loops would stay, as branches */
	if (GEN_COMPILED_IN && cfg->vm_nops && vm_run(cfg, data, data_end, st, stream))
		return XDP_ABORTED;

#pragma unroll
	for (int w = 0; w < GEN_MAX_WRITES; w++) {
		GEN_CFG struct gen_write *wr = &cfg->writes[w];
		__u16 *p = data + (wr->offset & (GEN_TEMPLATE_MAX - 2));
		__u32 val, new;
		__u8 mask;

		if (w >= nwrites)
			break;
		if (OUT_OF_BOUNDS(p + 2))
			return XDP_ABORTED;
		val = (wr->var ? var1 : var0) + wr->add;
		if (wr->size == 4) {
			*(__be32 *)p = bpf_htonl(val);
			new = (__u32)p[0] + p[1];
		} else {
			*(__be16 *)p = bpf_htons(val);
			new = p[0];
		}
		mask = wr->csum_mask;
		CSUM_ADD(mask, new + wr->csum_old);
	}

	if (cfg->sig_off) {
		__u16 off = cfg->sig_off & (GEN_TEMPLATE_MAX - 1);
		struct signature *sig = data + off;
		__u32 slot;

		if (OUT_OF_BOUNDS(sig + 1))
			return XDP_ABORTED;
		slot = (var0 + stream) & st->stream_mask & (GEN_MAX_STREAMS - 1);

		if (!stamped) {
			/* userspace alternates the ingress port of consecutive calls (the kernel ignores
			 * the queue in live-frames mode): a change means the first frame of a new call,
			 * whose stamp must not come from the previous call */
			__u32 call = ctx->ingress_ifindex;

			if (call != st->epoch || st->ts_count >= GEN_TS_EVERY) {
				st->last_ts = bpf_ktime_get_ns();
				st->ts_count = 0;
				st->epoch = call;
			}
			st->ts_count++;
		}
		sig->magic = SIGNATURE_MAGIC;
		sig->stream = st->stream_base + slot;
		sig->seq = st->seq[slot]++;
		sig->tx_ns = st->last_ts;
		if (cfg->sig_csum_mask) {
			__u16 *w = (__u16 *)sig;
			__u8 mask = cfg->sig_csum_mask;
			__u32 new = (__u32)w[0] + w[1] + w[2] + w[3] + w[4] + w[5];

			CSUM_ADD(mask, new + cfg->sig_csum_old);
		}
	}

	if (acc0 && cfg->csum_off[0] && csum_apply(data, data_end, cfg->csum_off[0], acc0))
		return XDP_ABORTED;
	if (acc1 && cfg->csum_off[1] && csum_apply(data, data_end, cfg->csum_off[1], acc1))
		return XDP_ABORTED;
	if (acc2 && cfg->csum_off[2] && csum_apply(data, data_end, cfg->csum_off[2], acc2))
		return XDP_ABORTED;
	if (GEN_COMPILED_IN && cfg->vm_ncsums && vm_csums(cfg, data, data_end))
		return XDP_ABORTED;

	st->tx_packets++;
	st->tx_bytes += cfg->frame_len + FCS_LEN;
	return bpf_redirect(gen_tx_ifindex, 0);
}

#ifdef GEN_MIX_INIT
/* Smooth weighted round robin (nginx's): every stream gains its weight, the richest is sent and
 * pays the total, so stream i gets weight[i] of every total frames, evenly spread. A stream that
 * has sent its frames (mix_limit), or waits for its start (ISG) or the end of a gap between
 * bursts (IBG), leaves its turn idle (-1): the other streams keep their own rates. */
static __always_inline int mix_next(struct gen_state *st, __u64 rel)
{
	int best = 0, i;

#pragma unroll
	for (int i = 0; i < GEN_MIX_MAX_STREAMS; i++) {
		if (i >= gen_mix.nstreams)
			break;
		st->mix_cur[i] += gen_mix.weight[i];
		if (st->mix_cur[i] > st->mix_cur[best])
			best = i;
	}
	i = best & (GEN_MIX_MAX_STREAMS - 1);
	st->mix_cur[i] -= gen_mix.total;
	if (st->mix_limit[i] && st->mix_sent[i] + 1 >= st->mix_limit[i])
		return -1;
	if (gen_mix.timed && st->mix_clock) {
		if (rel < gen_mix.start_ns[i] || rel < st->mix_at[i])
			return -1;
		if (gen_mix.burst[i] && (st->mix_sent[i] + 1) % gen_mix.burst[i] == 0)
			st->mix_at[i] = rel + gen_mix.gap_ns[i];
	}
	st->mix_sent[i]++;
	return best;
}

/* The stream's frame length: the frame handed to the kernel is the longest stream's. */
static __always_inline int mix_trim(struct xdp_md *ctx, GEN_CFG struct gen_config *cfg)
{
	int delta = (int)cfg->frame_len - (int)gen_mix.base_len;

	return delta ? bpf_xdp_adjust_tail(ctx, delta) : 0;
}
#endif

SEC("xdp")
int xdp_gen(struct xdp_md *ctx)
{
	int stamped = 0, stream __attribute__((unused)) = 0;
	struct gen_state *st;
	__u32 zero = 0;
	__u64 rel = 0;

	st = bpf_map_lookup_elem(&gen_state, &zero);
	if (!st)
		return XDP_ABORTED;

	/* a run that sends nothing returns XDP_DROP: the kernel recycles the frame untouched */
	if (st->quota && st->tx_packets >= st->quota)
		return XDP_DROP;
	if (st->interval || st->stop_after || (MIX_TIMED && st->mix_clock)) {
		__u64 now = bpf_ktime_get_ns();

		if (!st->start_ns)
			st->start_ns = now;
		rel = now - st->start_ns;
		if (st->stop_after && rel >= st->stop_after)
			return XDP_DROP;
		if (st->interval) {
			__u64 rel_fp = rel << 16;

			if (rel_fp < st->due)
				return XDP_DROP; /* not yet time: spin */
			if (rel_fp - st->due > GEN_MAX_BURST * st->interval)
				st->due = rel_fp - GEN_MAX_BURST * st->interval;
			st->due += st->interval;
		}
#ifdef GEN_MIX_INIT
		stream = mix_next(st, rel);
		if (stream < 0)
			return XDP_DROP; /* this turn's stream is waiting or done */
#endif
		st->last_ns = now;
		st->last_ts = now; /* this frame's own transmit time */
		st->ts_count = 0;
		stamped = 1;
	}
#ifdef GEN_MIX_INIT
	else {
		stream = mix_next(st, 0);
		if (stream < 0)
			return XDP_DROP;
	}

	/* a TRex profile's several streams: one compiled-in configuration each */
	switch (stream) {
	case 1:
		return mix_trim(ctx, &gen_cfg1) ? XDP_ABORTED : gen_build(ctx, &gen_cfg1, st, stamped, 1);
	case 2:
		return mix_trim(ctx, &gen_cfg2) ? XDP_ABORTED : gen_build(ctx, &gen_cfg2, st, stamped, 2);
	case 3:
		return mix_trim(ctx, &gen_cfg3) ? XDP_ABORTED : gen_build(ctx, &gen_cfg3, st, stamped, 3);
	}
	if (mix_trim(ctx, &gen_cfg))
		return XDP_ABORTED;
#endif
	return gen_build(ctx, &gen_cfg, st, stamped, 0);
}

char _license[] SEC("license") = "GPL";
