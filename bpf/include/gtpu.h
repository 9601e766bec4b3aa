/* GTPv1-U (3GPP TS 29.281): header layout and constants. */
#ifndef PERFKIT_GTPU_H
#define PERFKIT_GTPU_H

#include <linux/types.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>

#define GTPU_PORT 2152
#define GTPU_VERSION 1
#define GTPU_TYPE_ECHO_REQ 1
#define GTPU_TYPE_ECHO_RESP 2
#define GTPU_TYPE_ERROR_IND 26
#define GTPU_TYPE_END_MARKER 254
#define GTPU_TYPE_GPDU 255

/* flags byte: version(3) PT(1) reserved(1) E(1) S(1) PN(1) */
#define GTPU_F_PT 0x10
#define GTPU_F_E 0x04
#define GTPU_F_S 0x02
#define GTPU_F_PN 0x01
/* version 1, PT=1 (GTP, not GTP'), no optional fields */
#define GTPU_FLAGS_PLAIN 0x30

/* Extension headers walked before giving up on a packet. */
#ifndef GTPU_MAX_EXT
#define GTPU_MAX_EXT 4
#endif

struct gtpu_hdr {
	__u8 flags;
	__u8 type;
	__be16 length;	/* bytes after this 8-byte header: optional fields, extensions, T-PDU */
	__be32 teid;
};

/* Present when any of E, S, PN is set. */
struct gtpu_opt {
	__be16 seq;
	__u8 npdu;
	__u8 next_ext;	/* type of the first extension header, 0 = none */
};

/* Bytes of the outer headers a DL encapsulation adds in front of the inner IPv4 packet. */
#define GTPU_ENCAP_LEN (sizeof(struct iphdr) + sizeof(struct udphdr) + sizeof(struct gtpu_hdr))

#define GTPU_ERR_TRUNCATED 1	/* the optional fields or an extension header run past the frame */
#define GTPU_ERR_EXT 2		/* an extension header of length 0, or more than GTPU_MAX_EXT */

/* Skip the optional fields and walk the extension-header chain of a GTP-U header whose 8 fixed
 * bytes are known to be in the frame. Returns the T-PDU start, or NULL with *err set. */
static __always_inline void *gtpu_payload(struct gtpu_hdr *gh, void *data_end, int *err)
{
	void *pos = gh + 1;
	struct gtpu_opt *opt;
	__u8 next;

	if (!(gh->flags & (GTPU_F_E | GTPU_F_S | GTPU_F_PN)))
		return pos;
	opt = pos;
	if ((void *)(opt + 1) > data_end) {
		*err = GTPU_ERR_TRUNCATED;
		return 0;
	}
	pos = opt + 1;
	next = (gh->flags & GTPU_F_E) ? opt->next_ext : 0;
	for (int i = 0; i < GTPU_MAX_EXT; i++) {
		__u8 *len, *last;

		if (!next)
			return pos;
		len = pos;
		if ((void *)(len + 1) > data_end) {
			*err = GTPU_ERR_TRUNCATED;
			return 0;
		}
		/* the length is in 4-octet units and covers the length and next-type octets */
		if (*len == 0) {
			*err = GTPU_ERR_EXT;
			return 0;
		}
		last = pos + (*len * 4) - 1;
		if ((void *)(last + 1) > data_end) {
			*err = GTPU_ERR_TRUNCATED;
			return 0;
		}
		next = *last;
		pos = last + 1;
	}
	if (next) {
		*err = GTPU_ERR_EXT;
		return 0;
	}
	return pos;
}

#endif /* PERFKIT_GTPU_H */
