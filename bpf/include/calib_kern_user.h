/* Types and constants the calibrated DUT (bpf/calib.bpf.c) shares with userspace.
 * perfkit/dataplanes/calib/layouts.py mirrors every struct and enum here; tests/test_layouts.py
 * checks it against the BTF of build/bpf/calib.o, so change both together.
 */
#ifndef CALIB_KERN_USER_H
#define CALIB_KERN_USER_H

#include <linux/types.h>

/* Most work iterations per packet: some 10 ms per packet (about 10 ns per iteration measured on
 * a 2-vCPU EPYC VM), far beyond any useful DUT; the kernel's bpf_loop limit (BPF_MAX_LOOPS, 8M)
 * is above it. */
#define CALIB_MAX_WORK (1U << 20)

/* Run-time configuration: the single entry of the calib_config array map. */
struct calib_config {
	__u32 egress_ifindex;	/* every forwarded frame leaves here (bpf_redirect); 0 = not set */
	__u32 work;		/* work iterations per forwarded packet (bpf_loop), <= CALIB_MAX_WORK */
	__u8 src_mac[6];	/* egress port's MAC */
	__u8 dst_mac[6];	/* next hop (the tester's receiving port) */
	__u32 drop_every;	/* drop every Nth worked-on packet of a CPU (XDP_DROP); 0 = never */
};

/* Index of the per-CPU calib_stats array: what happened to a packet. */
enum calib_stat {
	CALIB_FWD = 0,			/* worked on and forwarded */
	CALIB_PASS,			/* not IPv4 (ARP ...): the host's */
	CALIB_DROP_TRUNCATED,		/* IPv4 header cut short */
	CALIB_DROP_NO_EGRESS,		/* egress_ifindex not configured */
	CALIB_DROP_INTERNAL,		/* no configuration */
	CALIB_DROP_EVERY,		/* worked on, then dropped: the Nth of its CPU (drop_every) */
	CALIB_STAT_MAX,
};

struct calib_stat_rec {
	__u64 packets;
	__u64 bytes;		/* frame bytes as received */
	__u64 iterations;	/* work iterations done (CALIB_FWD only): packets * work when all is well */
	__u64 digest;		/* XOR of every packet's work result (CALIB_FWD only): keeps the work alive */
};

#endif /* CALIB_KERN_USER_H */
