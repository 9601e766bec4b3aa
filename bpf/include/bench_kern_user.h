/* Types the prog-bench harness (bench.bpf.c) shares with userspace; mirrored in perfkit/layouts.py. */
#ifndef BENCH_KERN_USER_H
#define BENCH_KERN_USER_H

#include <linux/types.h>

/* Bytes restored from the template before every run: everything a dataplane may rewrite. */
#define BENCH_RESTORE_MAX 128

/* At most this many fields are rewritten per run, from a key of at most BENCH_KEY_MAX bytes. */
#define BENCH_MAX_FIELDS 4
#define BENCH_KEY_MAX 16

/* Copy key bytes [key_off, key_off + size) to frame offset `offset` (size 2 or 4). */
struct bench_field {
	__u16 offset;
	__u8 size;
	__u8 key_off;
};

struct bench_config {
	__u32 frame_len;	/* length of the template frame */
	__u32 restore_len;	/* bytes copied back before each run, <= BENCH_RESTORE_MAX, multiple of 8 */
	__u32 nkeys;		/* entries of bench_keys in use; 0 = leave the template as it is */
	__u32 nfields;		/* entries of fields in use */
	struct bench_field fields[BENCH_MAX_FIELDS];
};

/* One flow (or session) the harness addresses: the bytes its fields take, network order. */
struct bench_key {
	__u8 bytes[BENCH_KEY_MAX];
};

struct bench_template {
	__u8 bytes[BENCH_RESTORE_MAX];
};

#endif /* BENCH_KERN_USER_H */
