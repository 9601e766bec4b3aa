// SPDX-License-Identifier: GPL-2.0
/* prog-bench harness. BPF_PROG_TEST_RUN's repeat mode runs a program again and again on the same
 * buffer, so a program that moves or rewrites headers would see its own output on the next run
 * (a decap would measure the drop path of a decapsulated packet). This harness first undoes
 * whatever the previous run did -- head moved back, template bytes restored, the next flow's key
 * fields (the dataplane says which: PGW-U TEID and UE address, LB client address and port) written
 * in -- then tail-calls the program under test. The baseline is the
 * same harness tail-calling a program that only returns XDP_DROP, so the harness cancels out.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "bench_kern_user.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_config);
} bench_config SEC(".maps");

/* The frame's first BENCH_RESTORE_MAX bytes as userspace built it. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bench_template);
} bench_template SEC(".maps");

/* Keys (flows, sessions) to address, in the (shuffled) order userspace wants them hit. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1 << 20);
	__type(key, __u32);
	__type(value, struct bench_key);
} bench_keys SEC(".maps");

/* Position in bench_keys, per CPU so the harness itself stays cheap. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_pos SEC(".maps");

/* Slot 0: the program under test (or the XDP_DROP baseline). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} bench_target SEC(".maps");

SEC("xdp")
int xdp_bench(struct xdp_md *ctx)
{
	__u32 zero = 0, *pos;
	struct bench_config *cfg = bpf_map_lookup_elem(&bench_config, &zero);
	struct bench_template *tmpl = bpf_map_lookup_elem(&bench_template, &zero);
	void *data, *data_end;
	int delta;

	if (!cfg || !tmpl)
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	/* the programs under test only move the head (and trim padding, which bench frames lack) */
	delta = (int)((data_end - data) & 0xffff) - (int)cfg->frame_len;
	if (delta && bpf_xdp_adjust_head(ctx, delta))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;

#pragma unroll
	for (int i = 0; i < BENCH_RESTORE_MAX / 8; i++) {
		__u64 *dst = data + i * 8;

		if (i * 8 >= cfg->restore_len)
			break;
		if ((void *)(dst + 1) > data_end)
			return XDP_ABORTED;
		*dst = *(__u64 *)&tmpl->bytes[i * 8];
	}

	pos = bpf_map_lookup_elem(&bench_pos, &zero);
	if (cfg->nkeys && pos) {
		struct bench_key *key;
		__u32 idx = *pos;

		*pos = idx + 1 >= cfg->nkeys ? 0 : idx + 1;
		key = bpf_map_lookup_elem(&bench_keys, &idx);
		if (!key)
			return XDP_ABORTED;
#pragma unroll
		for (int i = 0; i < BENCH_MAX_FIELDS; i++) {
			struct bench_field *f = &cfg->fields[i];
			void *p;

			if (i >= cfg->nfields)
				break;
			p = data + (f->offset & 0x7f);
			if (f->size == 4) {
				if (p + 4 > data_end)
					return XDP_ABORTED;
				*(__u32 *)p = *(__u32 *)&key->bytes[f->key_off & (BENCH_KEY_MAX - 4)];
			} else {
				if (p + 2 > data_end)
					return XDP_ABORTED;
				*(__u16 *)p = *(__u16 *)&key->bytes[f->key_off & (BENCH_KEY_MAX - 2)];
			}
		}
	}
	bpf_tail_call(ctx, &bench_target, 0);
	return XDP_ABORTED; /* no target installed */
}

char _license[] SEC("license") = "GPL";
