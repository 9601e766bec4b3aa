// A program perfkit did not write, of the shape of a reflector: it swaps the Ethernet addresses
// and sends every frame back out of the port it came in on (XDP_TX), counting them per CPU.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tx_count SEC(".maps");

SEC("xdp")
int xdp_reflect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char tmp[ETH_ALEN];
	__u32 key = 0;
	__u64 *n;

	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	__builtin_memcpy(tmp, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, tmp, ETH_ALEN);
	n = bpf_map_lookup_elem(&tx_count, &key);
	if (n)
		*n += 1;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
