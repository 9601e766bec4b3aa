/* Walking through declared tunnels (encap_kern_user.h) in XDP; perfkit/encap.py walks the same way
 * in Python. */
#ifndef PERFKIT_ENCAP_H
#define PERFKIT_ENCAP_H

#include <linux/types.h>
#include <bpf/bpf_helpers.h>

#include "encap_kern_user.h"

/* The tunnel of t that a packet of IPv4 protocol proto (and UDP destination port dport, network
 * order) carries, or NULL. */
static __always_inline const volatile struct encap *encap_find(const volatile struct encap_table *t, int proto,
							     __be16 dport)
{
	for (int i = 0; i < ENCAP_MAX; i++) {
		const volatile struct encap *e = &t->encaps[i];

		if (i >= t->n)
			break;
		if (e->ip_proto == proto && (e->udp_dport == 0 || e->udp_dport == dport))
			return e;
	}
	return NULL;
}

/* Skip the header of tunnel e at pos: where its inner packet begins, or NULL when the header runs
 * past data_end or its extension chain is broken (a length of 0, more than ENCAP_MAX_EXT). */
static __always_inline void *encap_skip(const volatile struct encap *e, void *pos, void *data_end)
{
	__u8 *flags = pos + e->flags_off;
	__u8 next = 0;

	if (pos + e->hdr_len > data_end)
		return NULL;
	if (!e->opt_mask)
		return pos + e->hdr_len;
	if ((void *)(flags + 1) > data_end)
		return NULL;
	if (!(*flags & e->opt_mask))
		return pos + e->hdr_len;
	if (*flags & e->ext_mask) {
		__u8 *type = pos + e->ext_type_off;

		if ((void *)(type + 1) > data_end)
			return NULL;
		next = *type;
	}
	pos += e->hdr_len + e->opt_len;
	if (pos > data_end)
		return NULL;
	for (int i = 0; i < ENCAP_MAX_EXT; i++) {
		__u8 *len = pos, *last;

		if (!next)
			return pos;
		if ((void *)(len + 1) > data_end || *len == 0)
			return NULL;
		last = pos + *len * e->ext_unit - 1;
		if ((void *)(last + 1) > data_end)
			return NULL;
		next = *last;
		pos = last + 1;
	}
	return next ? NULL : pos;
}

#endif /* PERFKIT_ENCAP_H */
