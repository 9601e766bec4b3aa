// SPDX-License-Identifier: GPL-2.0
/* perfkit's sink, attached to the receiving tester port: counts what comes back per stream,
 * checks sequence numbers (loss, reordering, duplicates), histograms one-way latency and IPDV
 * (RFC 5481) from the generator's signature, captures the first frames, then drops everything.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "parsing.h"
#include "encap.h"
#include "trafficgen_kern_user.h"
#include "hist.h"

_Static_assert(HIST_BUCKETS == SINK_HIST_BUCKETS, "the sink's histograms use hist.h buckets");

#define FCS_LEN 4
/* Tunnels one frame may nest (perfkit/encap.py's MAX_TUNNELS). */
#define SINK_MAX_TUNNELS 2

/* The tunnels the dataplanes' frames carry (perfkit.dataplanes.encapsulations()), set before load. */
const volatile struct encap_table sink_encaps = { .n = 0 };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_config);
} sink_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SINK_MAX_STREAMS);
	__type(key, __u32);
	__type(value, struct sink_stream);
} sink_streams SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_totals);
} sink_totals SEC(".maps");

/* One-way latency [ns] and |IPDV| [ns], log-linear buckets (see hist_bucket). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SINK_HIST_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} latency_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SINK_HIST_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} ipdv_hist SEC(".maps");

/* The first capture_max frames, for the content check and --capture. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} capture SEC(".maps");

static __always_inline void hist_add(void *map, __u32 value)
{
	__u32 key = hist_bucket(value);
	__u64 *cnt = bpf_map_lookup_elem(map, &key);

	if (cnt)
		(*cnt)++;
}

/* Find the signature: through an optional VLAN tag, IPv4, and up to SINK_MAX_TUNNELS of the
 * declared tunnels, to the innermost UDP or TCP payload. */
static __always_inline struct signature *find_signature(void *data, void *data_end)
{
	struct hdr_cursor nh = { .pos = data };
	const volatile struct encap *e;
	struct ethhdr *eth;
	struct iphdr *iph;
	struct udphdr *udp;
	__u16 vlan;
	int proto;

	if (parse_ethhdr_vlan(&nh, data_end, &eth, &vlan) != bpf_htons(ETH_P_IP))
		return NULL;
	proto = parse_iphdr(&nh, data_end, &iph);
	for (int depth = 0; depth <= SINK_MAX_TUNNELS; depth++) {
		__be16 dport = 0;

		if (proto == IPPROTO_UDP) {
			if (parse_udphdr(&nh, data_end, &udp) < 0)
				return NULL;
			dport = udp->dest;
		}
		e = depth < SINK_MAX_TUNNELS ? encap_find(&sink_encaps, proto, dport) : NULL;
		if (!e)
			break;
		nh.pos = encap_skip(e, nh.pos, data_end);
		if (!nh.pos)
			return NULL;
		if (e->inner == ENCAP_INNER_ETHER &&
		    parse_ethhdr_vlan(&nh, data_end, &eth, &vlan) != bpf_htons(ETH_P_IP))
			return NULL;
		proto = parse_iphdr(&nh, data_end, &iph);
	}
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = nh.pos;

		if ((void *)(tcp + 1) > data_end || tcp->doff < 5)
			return NULL;
		nh.pos += tcp->doff * 4;
	} else if (proto != IPPROTO_UDP) {
		return NULL;
	}
	if (nh.pos + sizeof(struct signature) > data_end)
		return NULL;
	return nh.pos;
}

static __always_inline void window_mark(struct sink_stream *s, __u32 seq)
{
	s->window[(seq / 64) % SINK_WINDOW_WORDS] |= 1ULL << (seq % 64);
}

/* Sequence bookkeeping (RFC 4737 style): a higher number advances the window (clearing the
 * words it enters), a lower one inside the window is a duplicate if already seen, else reordered. */
static __always_inline void track_seq(struct sink_stream *s, __u32 seq, __u32 delay)
{
	if (!s->started) {
		s->started = 1;
		s->max_seq = seq;
		s->last_delay = delay;
		window_mark(s, seq);
		return;
	}
	if ((__s32)(seq - s->max_seq) > 0) {
		__u32 old_word = s->max_seq / 64, new_word = seq / 64;

		if (new_word - old_word >= SINK_WINDOW_WORDS) {
#pragma unroll
			for (int i = 0; i < SINK_WINDOW_WORDS; i++)
				s->window[i] = 0;
		} else {
#pragma unroll
			for (int i = 1; i < SINK_WINDOW_WORDS; i++) {
				if (old_word + i > new_word)
					break;
				s->window[(old_word + i) % SINK_WINDOW_WORDS] = 0;
			}
		}
		if (seq == s->max_seq + 1)
			hist_add(&ipdv_hist, delay > s->last_delay ? delay - s->last_delay : s->last_delay - delay);
		s->max_seq = seq;
		s->last_delay = delay;
		window_mark(s, seq);
		return;
	}
	/* the window holds whole words: older words share slots with the newest ones */
	if (((s->max_seq - (seq & ~63U)) >> 6) >= SINK_WINDOW_WORDS) {
		s->late++;
		return;
	}
	if (s->window[(seq / 64) % SINK_WINDOW_WORDS] & (1ULL << (seq % 64))) {
		s->duplicates++;
		return;
	}
	s->reordered++;
	window_mark(s, seq);
}

static __always_inline void capture_frame(struct xdp_md *ctx, struct sink_totals *tot, __u32 len, __u64 now)
{
	__u32 zero = 0, caplen = len;
	struct sink_config *cfg = bpf_map_lookup_elem(&sink_config, &zero);
	struct sink_capture *rec;

	if (!cfg || tot->captured >= cfg->capture_max)
		return;
	rec = bpf_ringbuf_reserve(&capture, sizeof(*rec), 0);
	if (!rec)
		return;
	if (caplen > SINK_SNAPLEN)
		caplen = SINK_SNAPLEN;
	if (caplen < 1 || bpf_xdp_load_bytes(ctx, 0, rec->data, caplen)) {
		bpf_ringbuf_discard(rec, 0);
		return;
	}
	rec->len = len;
	rec->caplen = caplen;
	rec->ts_ns = now;
	bpf_ringbuf_submit(rec, 0);
	tot->captured++;
}

SEC("xdp")
int xdp_sink(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = (data_end - data) & 0xffff, zero = 0, delay, key;
	__u64 now = bpf_ktime_get_ns();
	struct sink_totals *tot = bpf_map_lookup_elem(&sink_totals, &zero);
	struct signature *sig;
	struct sink_stream *s;

	if (!tot)
		return XDP_DROP;
	tot->packets++;
	tot->bytes += len + FCS_LEN;
	if (tot->last_ns && now - tot->last_ns > tot->max_gap_ns)
		tot->max_gap_ns = now - tot->last_ns;
	tot->last_ns = now;
	capture_frame(ctx, tot, len, now);

	sig = find_signature(data, data_end);
	if (!sig || sig->magic != SIGNATURE_MAGIC || sig->stream >= SINK_MAX_STREAMS) {
		tot->unsigned_packets++;
		return XDP_DROP;
	}
	key = sig->stream;
	s = bpf_map_lookup_elem(&sink_streams, &key);
	if (!s)
		return XDP_DROP;
	s->bytes += len + FCS_LEN;
	delay = (__u32)now - sig->tx_ns;
	if ((__s32)delay < 0) /* clocks are the same; this would be corruption */
		delay = 0;
	hist_add(&latency_hist, delay);
	if (!s->packets++ || delay < s->lat_min)
		s->lat_min = delay;
	if (delay > s->lat_max)
		s->lat_max = delay;
	track_seq(s, sig->seq, delay);
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
