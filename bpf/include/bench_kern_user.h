/* Types the prog-bench harness (bench.bpf.c) shares with userspace; mirrored in perfkit/layouts.py. */
#ifndef BENCH_KERN_USER_H
#define BENCH_KERN_USER_H

#include <linux/types.h>

/* Bytes restored from the template before every run: everything a dataplane may rewrite. */
#define BENCH_RESTORE_MAX 128

struct bench_config {
	__u32 frame_len;	/* length of the template frame */
	__u32 restore_len;	/* bytes copied back before each run, <= BENCH_RESTORE_MAX, multiple of 8 */
	__u32 nkeys;		/* entries of bench_keys in use; 0 = leave the template as it is */
	__u16 teid_off;		/* where bench_key.teid goes, 0 = nowhere */
	__u16 ue_off;		/* where bench_key.ue_addr goes, 0 = nowhere */
	__u16 vlan_off;		/* where bench_key.vlan goes (the TCI), 0 = nowhere */
	__u16 pad;
};

/* One session the harness addresses: fields written into the frame. */
struct bench_key {
	__be32 teid;
	__be32 ue_addr;
	__be16 vlan;		/* TCI, network order */
	__u16 pad;
};

struct bench_template {
	__u8 bytes[BENCH_RESTORE_MAX];
};

#endif /* BENCH_KERN_USER_H */
