/* Types the traffic generator (gen.bpf.c) and the sink (sink.bpf.c) share with userspace;
 * mirrored in perfkit/layouts.py. The field engine follows TRex's: flow variables (STLVmFlowVar)
 * computed once per packet, and writes (STLVmWrFlowVar) of a variable plus a constant into the
 * frame, with the checksums they touch fixed up incrementally (RFC 1624).
 */
#ifndef TRAFFICGEN_KERN_USER_H
#define TRAFFICGEN_KERN_USER_H

#include <linux/types.h>

#define GEN_TEMPLATE_MAX 128	/* header bytes restored from the template for every packet */
#define GEN_MAX_VARS 2
#define GEN_MAX_WRITES 4
#define GEN_MAX_CSUMS 3
#define SIGNATURE_MAGIC 0x4b50	/* "PK" */

enum gen_op {
	GEN_OP_INC = 0,
	GEN_OP_DEC,
	GEN_OP_RANDOM,
};

/* A flow variable: a value in [min, max] computed once per packet. */
struct gen_var {
	__u32 min;
	__u32 max;		/* inclusive */
	__u32 step;		/* inc/dec step */
	__u8 op;		/* enum gen_op */
	__u8 pad[3];
};

/* Write var + add, as a big-endian integer of size bytes, at offset. Checksums covering it are
 * updated with RFC 1624's HC' = ~(~HC + ~m + m'): userspace precomputes the ~m part. */
struct gen_write {
	__u16 offset;		/* even: whole 16-bit words of the checksums it touches */
	__u8 size;		/* 2 or 4 */
	__u8 var;		/* index into vars */
	__u32 add;
	__u32 csum_old;		/* sum of ~w over the template's 16-bit words it replaces (as loaded) */
	__u8 csum_mask;		/* bit i: the checksum at csum_off[i] covers these bytes */
	__u8 pad[3];
};

/* TRex's field engine (a TRex STL profile's VM, perfkit/stl/profile.py), with TRex's semantics: the
 * operations run in the profile's order (a variable's update, then the writes that follow it), so
 * a write placed before its variable's update writes the previous value, as in TRex. Built-in
 * profiles leave it empty: compiled in, every part of it folds away. */
#define GEN_VM_MAX_VARS 8
#define GEN_VM_MAX_OPS 16
#define GEN_VM_MAX_CSUMS 4
#define GEN_VM_CSUM_RANGES 6

enum gen_vm_var_op {
	GEN_VM_INC = 0,		/* TRex inc_mod(): past max, min + the rest of the step */
	GEN_VM_DEC,		/* TRex dec_mod() */
	GEN_VM_RANDOM,
	GEN_VM_TUPLE,		/* tuple_flow_var: the IP moves fastest, the port on its wrap */
};

/* A flow variable (STLVmFlowVar) or tuple variable (STLVmTupleGen: IP in val, port aside). */
struct gen_vm_var {
	__u64 min;
	__u64 max;		/* inclusive */
	__u64 step;		/* TRex keeps step % (max - min + 1) */
	__u64 prev;		/* the value before the first packet's update (TRex peek_prev()) */
	__u32 limit;		/* tuple: flows before the walk restarts at (min, port_min); 0 = none */
	__u16 port_min;		/* tuple */
	__u16 port_max;		/* tuple */
	__u16 prev_port;	/* tuple: the port before the first packet's update */
	__u8 op;		/* enum gen_vm_var_op */
	__u8 size;		/* 1, 2, 4 or 8 bytes: values wrap at this width */
	__u32 pad;
};

enum gen_vm_op_kind {
	GEN_VM_OP_UPDATE = 1,	/* next value of vars[var] */
	GEN_VM_OP_WRITE,	/* STLVmWrFlowVar */
	GEN_VM_OP_WRITE_MASK,	/* STLVmWrMaskFlowVar */
};

#define GEN_VM_BIG_ENDIAN 1	/* op flags: write big-endian */
#define GEN_VM_PORT 2		/* op flags: the source is the tuple variable's port */

/* One operation. WRITE: (value + add) as size bytes at offset. WRITE_MASK (TRex's RMW): v =
 * (u32)value + add, shifted left by shift (right if negative); the size bytes at offset become
 * (old & ~mask) | (v & mask). */
struct gen_vm_op {
	__u64 add;
	__u32 mask;
	__u16 offset;
	__u8 kind;		/* enum gen_vm_op_kind */
	__u8 var;		/* index into vm_vars */
	__u8 size;		/* bytes written (1, 2, 4, 8); mask: bytes read and written */
	__u8 flags;		/* GEN_VM_BIG_ENDIAN, GEN_VM_PORT */
	__s8 shift;
	__u8 pad[5];
};

#define GEN_VM_CSUM_UDP 1	/* a computed 0 goes out as 0xffff (RFC 768) */

/* A checksum the profile asks for (fix_checksum_ipv4, fix_checksum_hw, fix_checksum_icmpv6),
 * kept right incrementally (RFC 1624): the template carries it right for the template, and the
 * 16-bit words a write or the signature may change ([lo, hi), even) are summed against
 * old = sum of ~w over those words in the template. */
struct gen_vm_csum {
	__u32 old;
	__u16 off;		/* the checksum field */
	__u8 flags;		/* GEN_VM_CSUM_UDP */
	__u8 nranges;
	__u16 lo[GEN_VM_CSUM_RANGES];
	__u16 hi[GEN_VM_CSUM_RANGES];
};

/* A TRex profile's several continuous streams: one gen_config each (streams 1-3 compiled in as
 * GEN_CONFIG1_INIT ..), frames picked by smooth weighted round robin at the streams' relative rates. */
#define GEN_MIX_MAX_STREAMS 4

struct gen_mix {
	__u32 nstreams;
	__u32 base_len;		/* length of the frame handed to the kernel: the longest stream's */
	__s32 weight[GEN_MIX_MAX_STREAMS];	/* frames of each stream per total */
	__s32 total;
	__u32 timed;		/* a stream has a start delay (TRex's ISG) or bursts with a gap */
	__u32 burst[GEN_MIX_MAX_STREAMS];	/* packets per burst, before a gap; 0: one burst */
	__u64 start_ns[GEN_MIX_MAX_STREAMS];	/* start delay (ISG) [ns] */
	__u64 gap_ns[GEN_MIX_MAX_STREAMS];	/* gap after each burst (IBG) [ns] */
};

/* The generator's configuration for one traffic profile: compiled into the program as constants
 * (see gen.bpf.c). The port it sends on is set separately, at load. */
struct gen_config {
	__u64 tmpl[GEN_TEMPLATE_MAX / 8];	/* the frame's first bytes as built by userspace */
	__u32 frame_len;	/* frame length without FCS */
	__u32 pad0;
	__u16 restore_len;	/* template bytes rewritten per packet, multiple of 8 */
	__u16 sig_off;		/* where the signature goes, 0 = no signature */
	__u8 sig_csum_mask;	/* checksums covering the signature */
	__u8 nvars;
	__u8 nwrites;
	__u8 pad;
	__u32 sig_csum_old;	/* sum of ~w over the template's signature words */
	__u16 csum_off[GEN_MAX_CSUMS];	/* offsets of 16-bit checksum fields, 0 = unused */
	__u16 pad2;
	struct gen_var vars[GEN_MAX_VARS];
	struct gen_write writes[GEN_MAX_WRITES];
	__u8 vm_nvars;
	__u8 vm_nops;
	__u8 vm_ncsums;		/* applied in order: a checksum covering another comes after it */
	__u8 vm_pad[5];
	struct gen_vm_var vm_vars[GEN_VM_MAX_VARS];
	struct gen_vm_op vm_ops[GEN_VM_MAX_OPS];
	struct gen_vm_csum vm_csums[GEN_VM_MAX_CSUMS];
};

/* Streams: each generator thread owns 2^k consecutive stream ids (sequence spaces) and puts flow
 * f into stream base + (f mod 2^k), so that sequence numbers are per flow while flows are few:
 * a multi-core DUT keeps each flow in order but interleaves flows. */
#define GEN_MAX_STREAMS 64

/* Unpaced, the transmit time is read once per GEN_TS_EVERY frames of a call (and at its first
 * frame): frames of a call are built back to back (~100 ns apart) and leave together when the
 * kernel flushes a batch of 64, so this costs at most a few hundred ns of accuracy while saving
 * most of the clock reads, which cost ~30 ns each in a VM. Paced, every frame reads the clock. */
#define GEN_TS_EVERY 16
/* Paced: after the thread lost the CPU, at most this many overdue frames go back to back and the
 * schedule of the rest shifts, so a preemption never becomes a burst that overflows the DUT's
 * receive ring; the trial then ends a little late (userspace allows for it). */
#define GEN_MAX_BURST 32

/* Per CPU: one generator thread runs on each CPU, so this is per thread. Userspace arms it before
 * a trial: interval (pacing), stop_after (duration) and quota (packet count). */
struct gen_state {
	__u64 tx_packets;
	__u64 tx_bytes;		/* FCS included */
	__u64 rng;		/* xorshift64 state for random variables (seeded by userspace) */
	__u64 epoch;		/* ingress ifindex of the call that built the last frame */
	__u64 start_ns;		/* clock at the trial's first run, 0 before */
	__u64 due;		/* when the next frame is due: ns after start_ns, 16.16 fixed point */
	__u64 interval;		/* ns between frames, 16.16 fixed point; 0 = as fast as possible */
	__u64 stop_after;	/* ns after start_ns when sending stops; 0 = no limit */
	__u64 quota;		/* frames to send; 0 = no limit */
	__u64 last_ns;		/* paced: clock when the last frame was sent */
	__u32 last_ts;		/* the transmit time stamped into signatures */
	__u32 ts_count;		/* frames since the clock was last read */
	__u16 stream_base;	/* first stream id of this thread */
	__u16 stream_mask;	/* 2^k - 1: flow number bits that select the stream */
	__u32 var_pos[GEN_MAX_VARS];	/* inc/dec position of each variable */
	__u32 seq[GEN_MAX_STREAMS];	/* next sequence number per stream of this thread */
	__u64 vm_val[GEN_VM_MAX_VARS];	/* TRex VM: each variable's value (tuple: its IP) */
	__u32 vm_flow[GEN_VM_MAX_VARS];	/* tuple: flows since the walk (re)started */
	__u16 vm_port[GEN_VM_MAX_VARS];	/* tuple: its port */
	__u32 vm_ready;		/* bit per stream: its values are set (from vm_vars[].prev) */
	__s32 mix_cur[GEN_MIX_MAX_STREAMS];	/* smooth weighted round robin: each stream's credit */
	__u32 mix_clock;	/* honour gen_mix's start delays and gaps (0: frames in order, for show) */
	__u64 mix_limit[GEN_MIX_MAX_STREAMS];	/* frames of each stream this thread sends, + 1; 0: no limit */
	__u64 mix_sent[GEN_MIX_MAX_STREAMS];	/* frames of each stream sent */
	__u64 mix_at[GEN_MIX_MAX_STREAMS];	/* ns after start_ns before which a stream waits (a gap) */
};

/* 12 bytes opening the innermost L4 payload, little-endian. */
struct signature {
	__u16 magic;
	__u16 stream;
	__u32 seq;
	__u32 tx_ns;		/* bpf_ktime_get_ns(), low 32 bits */
};

/* --- sink ------------------------------------------------------------------------------------ */
#define SINK_MAX_STREAMS 64
#define SINK_WINDOW_WORDS 16	/* sequence window: 16 words of 64 (960 to 1023 packets back) */
#define SINK_HIST_BUCKETS 1024	/* log-linear: exact below 64 ns, then 32 per power of two */
#define SINK_SNAPLEN 4096	/* captured bytes per frame */

struct sink_config {
	__u32 capture_max;	/* frames to capture into the ring buffer */
	__u32 pad;
};

/* Per stream; the sink port has one receive queue, so one CPU writes it. */
struct sink_stream {
	__u64 packets;
	__u64 bytes;		/* FCS included */
	__u64 reordered;	/* arrived after a higher sequence number (not duplicates) */
	__u64 duplicates;
	__u64 late;		/* older than the window: reordered or duplicate, cannot tell */
	__u32 max_seq;
	__u32 started;
	__u32 last_delay;	/* ns, of the packet with sequence max_seq (for IPDV) */
	__u32 lat_min;		/* ns */
	__u32 lat_max;		/* ns */
	__u32 pad;
	__u64 window[SINK_WINDOW_WORDS];	/* bit per sequence number seen, mod 1024 */
};

/* Per CPU totals. */
struct sink_totals {
	__u64 packets;		/* every frame seen */
	__u64 bytes;
	__u64 unsigned_packets;	/* no valid signature: not ours, or corrupted */
	__u64 captured;
	__u64 last_ns;		/* arrival of the last frame (bpf_ktime_get_ns()) */
	__u64 max_gap_ns;	/* longest time between two arrivals on this CPU */
};

/* The socket sink's counters (socksink.bpf.c), one per CPU: what the kernel delivered to a socket. */
struct socksink_totals {
	__u64 datagrams;	/* a GRO packet counts as its segments */
	__u64 skbs;		/* what reached the socket: fewer than datagrams when GRO aggregated */
	__u64 bytes;		/* UDP bytes, headers included */
};

struct sink_capture {
	__u32 len;		/* frame length */
	__u32 caplen;		/* bytes in data */
	__u64 ts_ns;		/* bpf_ktime_get_ns() at arrival */
	__u8 data[SINK_SNAPLEN];
};

#endif /* TRAFFICGEN_KERN_USER_H */
