/* Log-linear histogram buckets for latencies in ns: exact below 64, then 32 buckets per power of
 * two (~3% wide). Plain C so tests compile it on the host too; perfkit/sink.py inverts it. */
#ifndef PERFKIT_HIST_H
#define PERFKIT_HIST_H

#include <linux/types.h>

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

#ifndef HIST_BUCKETS
#define HIST_BUCKETS 1024
#endif

static __always_inline __u32 hist_bucket(__u32 v)
{
	__u32 b = 0, x = v, idx;

	if (v < 64)
		return v;
	if (x >> 16) { b += 16; x >>= 16; }
	if (x >> 8) { b += 8; x >>= 8; }
	if (x >> 4) { b += 4; x >>= 4; }
	if (x >> 2) { b += 2; x >>= 2; }
	if (x >> 1) { b += 1; }
	idx = 64 + (b - 6) * 32 + ((v >> (b - 5)) & 31);
	return idx < HIST_BUCKETS ? idx : HIST_BUCKETS - 1;
}

#endif /* PERFKIT_HIST_H */
