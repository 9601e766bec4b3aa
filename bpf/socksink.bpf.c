// SPDX-License-Identifier: GPL-2.0
/* The socket sink: a filter on the UDP socket that the DUT's kernel delivers traffic to, when the
 * dataplane passes it to the stack (XDP_PASS). It counts each datagram -- a GRO packet as the
 * segments it carries -- and then drops it, so that the figure is the kernel's receive path up to
 * the socket, and not how fast a reader could empty the socket's queue.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "trafficgen_kern_user.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct socksink_totals);
} socksink_totals SEC(".maps");

SEC("socket")
int socksink(struct __sk_buff *skb)
{
	struct socksink_totals *t;
	__u32 zero = 0;

	t = bpf_map_lookup_elem(&socksink_totals, &zero);
	if (t) {
		/* a packet GRO did not aggregate has no segment count */
		t->datagrams += skb->gso_segs ? skb->gso_segs : 1;
		t->skbs += 1;
		t->bytes += skb->len;
	}
	return 0;
}

char _license[] SEC("license") = "GPL";
