/* GTPv1-U (3GPP TS 29.281): header layout and constants. */
#ifndef PERFKIT_GTPU_H
#define PERFKIT_GTPU_H

#include <linux/types.h>

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

#endif /* PERFKIT_GTPU_H */
