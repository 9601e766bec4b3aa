// SPDX-License-Identifier: GPL-2.0
/* The calibrated DUT: costs a configured, known amount of work per packet, then forwards it.
 *
 * The test suite runs it at several amounts of work N to prove the measurement pipeline: the
 * per-packet cost perfkit reports (prog-bench, BPF statistics of a trial, the DUT's CPU time) must
 * rise with N by the slope prog-bench calibrates. Every IPv4 frame gets N iterations of a small
 * callback (bpf_loop), its Ethernet addresses rewritten, and leaves by the configured egress port;
 * nothing else about the frame changes, so the reference model is short.
 *
 * With drop_every N, every Nth packet a CPU works on is dropped after its work (so every packet
 * costs the same): a DUT that loses 1 frame in N by its own program, whatever the rate, counted
 * as CALIB_DROP_EVERY. The searches must call that the DUT's loss (tests/test_calib.py).
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "dataplane.h"
#include "calib_kern_user.h"

DATAPLANE_CONFIG_MAP(calib_config, struct calib_config);

/* Packets worked on, per CPU: drop_every counts on it (a per-CPU count needs no atomics). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} calib_seq SEC(".maps");

DATAPLANE_STATS_MAP(calib_stats, struct calib_stat_rec, CALIB_STAT_MAX);

struct work_state {
	__u64 x;
};

/* One unit of work: a xorshift-multiply round in the style of splitmix64. Each round needs the
 * previous one's result, so rounds cannot overlap, and the cost per iteration is the same at any N:
 * what makes the cost linear in N. */
static long work_step(__u64 index, void *ctx)
{
	struct work_state *s = ctx;

	s->x = (s->x ^ (s->x >> 31)) * 0x9e3779b97f4a7c15ULL + index;
	return 0;
}

static __always_inline int count(enum calib_stat stat, int verdict, __u64 frame_len)
{
	dataplane_count(&calib_stats, stat, frame_len);
	return verdict;
}

SEC("xdp")
int xdp_calib(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u64 frame_len = (data_end - data) & 0xffff;
	struct ethhdr *eth = data;
	struct iphdr *iph = (void *)(eth + 1);
	struct calib_config *cfg;
	struct calib_stat_rec *rec;
	struct work_state st;
	__u32 zero = 0, key = CALIB_FWD, work;
	__u64 *seq;
	long done;

	cfg = bpf_map_lookup_elem(&calib_config, &zero);
	if (!cfg)
		return count(CALIB_DROP_INTERNAL, XDP_DROP, frame_len);
	if ((void *)(eth + 1) > data_end)
		return count(CALIB_DROP_TRUNCATED, XDP_DROP, frame_len);
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return count(CALIB_PASS, XDP_PASS, frame_len);
	if ((void *)(iph + 1) > data_end)
		return count(CALIB_DROP_TRUNCATED, XDP_DROP, frame_len);
	if (!cfg->egress_ifindex)
		return count(CALIB_DROP_NO_EGRESS, XDP_DROP, frame_len);

	/* The work starts from the packet's addresses, so the compiler cannot compute it once for all
	 * packets; its result goes to the counters, so it cannot be dropped either. */
	st.x = ((__u64)iph->saddr << 32) | iph->daddr;
	work = cfg->work;
	if (work > CALIB_MAX_WORK)
		work = CALIB_MAX_WORK;
	done = bpf_loop(work, work_step, &st, 0);
	if (done < 0)
		return count(CALIB_DROP_INTERNAL, XDP_DROP, frame_len);
	seq = bpf_map_lookup_elem(&calib_seq, &zero);
	if (!seq)
		return count(CALIB_DROP_INTERNAL, XDP_DROP, frame_len);
	*seq += 1;
	if (cfg->drop_every && *seq % cfg->drop_every == 0)
		return count(CALIB_DROP_EVERY, XDP_DROP, frame_len);

	__builtin_memcpy(eth->h_dest, cfg->dst_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, cfg->src_mac, ETH_ALEN);
	rec = bpf_map_lookup_elem(&calib_stats, &key);
	if (rec) {
		rec->packets++;
		rec->bytes += frame_len;
		rec->iterations += done;
		rec->digest ^= st.x;
	}
	return bpf_redirect(cfg->egress_ifindex, 0);
}

char _license[] SEC("license") = "GPL";
