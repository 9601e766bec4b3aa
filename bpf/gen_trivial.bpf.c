// SPDX-License-Identifier: GPL-2.0
/* The generator benchmark's baseline: a live-frames redirect with no per-packet work at all. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "trafficgen_kern_user.h"

/* Only tx_ifindex is used: the same configuration type as the real generator. */
const volatile struct gen_config gen_cfg = {};

SEC("xdp")
int xdp_gen_trivial(struct xdp_md *ctx)
{
	return bpf_redirect(gen_cfg.tx_ifindex, 0);
}

char _license[] SEC("license") = "GPL";
