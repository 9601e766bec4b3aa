// The demo plugin's XDP program: forward every frame out of the configured port, count it.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct demo_config {
	__u32 egress_ifindex; /* 0: drop every frame */
};

struct demo_stat_rec {
	__u64 packets;
	__u64 bytes;
};

enum demo_stat { DEMO_FWD, DEMO_DROP, DEMO_STAT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct demo_config);
} demo_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEMO_STAT_MAX);
	__type(key, __u32);
	__type(value, struct demo_stat_rec);
} demo_stats SEC(".maps");

SEC("xdp")
int xdp_demo_fwd(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct demo_config *cfg = bpf_map_lookup_elem(&demo_config, &zero);
	__u32 idx = cfg && cfg->egress_ifindex ? DEMO_FWD : DEMO_DROP;
	struct demo_stat_rec *rec = bpf_map_lookup_elem(&demo_stats, &idx);

	if (rec) {
		rec->packets++;
		rec->bytes += ctx->data_end - ctx->data;
	}
	if (idx == DEMO_DROP || !cfg)
		return XDP_DROP;
	return bpf_redirect(cfg->egress_ifindex, 0);
}

char LICENSE[] SEC("license") = "GPL";
