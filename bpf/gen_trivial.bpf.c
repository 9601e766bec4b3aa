// SPDX-License-Identifier: GPL-2.0
/* The generator benchmark's baseline: a live-frames redirect with no per-packet work at all. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "trafficgen_kern_user.h"

/* The same load-time setting as the real generator's. */
const volatile __u32 gen_tx_ifindex SEC(".rodata.port") = 0;

SEC("xdp")
int xdp_gen_trivial(struct xdp_md *ctx)
{
	return bpf_redirect(gen_tx_ifindex, 0);
}

char _license[] SEC("license") = "GPL";
