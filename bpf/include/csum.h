/* Internet checksum helpers (RFC 1071 / RFC 1624) for XDP programs.
 * Partial sums are kept as the kernel does: 16-bit words summed in memory (network) order.
 */
#ifndef PERFKIT_CSUM_H
#define PERFKIT_CSUM_H

#include <linux/bpf.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>

/* Chunk handed to bpf_csum_diff; it must be a multiple of 4 and at most 512 bytes. */
#define CSUM_CHUNK 256
/* Enough chunks for a 9000-byte MTU. */
#define CSUM_MAX_CHUNKS 36

static __always_inline __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* A checksum after one 16-bit word it covers changed from old to new (RFC 1624, eqn. 3); all three
 * in host order of their network-order words. */
static __always_inline __u16 csum_replace_word(__u16 check, __u16 old, __u16 new)
{
	__u32 sum = (__u16)~check + (__u16)~old + (__u32)new;

	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Header checksum of an option-less IPv4 header (the checksum field must be 0). */
static __always_inline __u16 ipv4_csum(struct iphdr *iph)
{
	__u16 *w = (__u16 *)iph;
	__u64 sum = 0;

#pragma unroll
	for (int i = 0; i < (int)(sizeof(*iph) >> 1); i++)
		sum += w[i];
	return csum_fold(sum);
}

/* One bpf_csum_diff over n bytes at off + *done if at least n bytes remain; 0 if out of bounds. */
#define CSUM_STEP(n)								\
	if (len - done >= (n)) {						\
		void *p = data + ((off + done) & 0x3fff);			\
		if (p + (n) > data_end)						\
			return 0;						\
		sum += (__u32)bpf_csum_diff(0, 0, p, (n), 0);			\
		done += (n);							\
	}

/* Sum (unfolded) of len bytes of the packet starting at off, len <= CSUM_CHUNK * CSUM_MAX_CHUNKS.
 * *ok is 0 if the range is not inside the packet. Whole chunks, then at most one each of 128, 64,
 * ... 4 bytes go through bpf_csum_diff (the kernel's csum_partial): at most ~12 helper calls for
 * a 1500-byte packet instead of a loop over words. Every piece starts at an even distance from
 * off, so the 16-bit word order is kept. */
static __always_inline __u64 csum_packet(void *data, void *data_end, __u32 off, __u32 len, int *ok)
{
	__u64 sum = 0;
	__u32 done = 0;

	*ok = 0;
	for (int i = 0; i < CSUM_MAX_CHUNKS; i++) {
		void *p;

		if (done + CSUM_CHUNK > len)
			break;
		p = data + ((off + done) & 0x3fff);
		if (p + CSUM_CHUNK > data_end)
			return 0;
		sum += (__u32)bpf_csum_diff(0, 0, p, CSUM_CHUNK, 0);
		done += CSUM_CHUNK;
	}
	CSUM_STEP(128)
	CSUM_STEP(64)
	CSUM_STEP(32)
	CSUM_STEP(16)
	CSUM_STEP(8)
	CSUM_STEP(4)
	if (len - done >= 2) {
		__u16 *p = data + ((off + done) & 0x3fff);

		if ((void *)(p + 1) > data_end)
			return 0;
		sum += *p;
		done += 2;
	}
	if (done < len) {
		__u8 *p = data + ((off + done) & 0x3fff);

		if ((void *)(p + 1) > data_end)
			return 0;
		/* an odd last byte is the high byte of a zero-padded word in network order */
		sum += bpf_ntohs((__u16)*p << 8);
	}
	*ok = 1;
	return sum;
}

#endif /* PERFKIT_CSUM_H */
