/* What every dataplane program (bpf/<name>.bpf.c) declares alike, under the names
 * perfkit.dataplane.BpfControl looks for: its run-time configuration <name>_config and its
 * counters <name>_stats, and the counting of a packet. */
#ifndef PERFKIT_DATAPLANE_H
#define PERFKIT_DATAPLANE_H

#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>

/* The run-time configuration: the one entry (a config_type) of an array map, which userspace may
 * change while traffic flows. */
#define DATAPLANE_CONFIG_MAP(map_name, config_type)	\
	struct {					\
		__uint(type, BPF_MAP_TYPE_ARRAY);	\
		__uint(max_entries, 1);			\
		__type(key, __u32);			\
		__type(value, config_type);		\
	} map_name SEC(".maps")

/* What happened to each packet, per CPU: one rec_type per counter, indexed by the program's
 * stat enum (n: its last member, the count); rec_type begins as struct dataplane_stat_head. */
#define DATAPLANE_STATS_MAP(map_name, rec_type, n)	\
	_Static_assert(__builtin_offsetof(rec_type, packets) == 0 &&			\
		       __builtin_offsetof(rec_type, bytes) == sizeof(__u64),		\
		       #rec_type " begins with packets and bytes (dataplane_count)");	\
	struct {					\
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);\
		__uint(max_entries, n);			\
		__type(key, __u32);			\
		__type(value, rec_type);		\
	} map_name SEC(".maps")

/* How every counter record (struct <name>_stat_rec) begins. */
struct dataplane_stat_head {
	__u64 packets;
	__u64 bytes;		/* frame bytes as received */
};

/* Count a packet of frame_len bytes in entry key of a per-CPU counter map (any map whose records
 * begin as struct dataplane_stat_head). */
static __always_inline void dataplane_count(void *map, __u32 key, __u64 frame_len)
{
	struct dataplane_stat_head *rec = bpf_map_lookup_elem(map, &key);

	if (rec) {
		rec->packets++;
		rec->bytes += frame_len;
	}
}

#endif /* PERFKIT_DATAPLANE_H */
