// SPDX-License-Identifier: GPL-2.0
/* The do-nothing baseline: every benchmark measures it the same way, in the same run, and
 * subtracts it, so that what remains is the cost of the program under test. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
