// SPDX-License-Identifier: GPL-2.0
/*
 * mrc-testbed: a host port's SRv6 decapsulation (tc clsact ingress, direct action), for
 * kernels built without seg6local (CONFIG_IPV6_SEG6_LWTUNNEL unset), where the End.DT6 SID
 * route of testbed/fabric/host_plumbing.py cannot be installed. docs/host-decap.md has the
 * whole story.
 *
 * It does what that route does (Linux net/ipv6/seg6_local.c input_action_end_dt6() ->
 * decap_and_validate()), and nothing more:
 *   - a frame is ours when its outer IPv6 header carries IPv6 (next header 41), directly
 *     (the endpoints' raw IPv6-in-IPv6 sockets, kernel seg6 mode encap.red) or behind one
 *     Segment Routing Header (RFC 8754, routing type 4) whose segments are all visited
 *     (segments left 0; End.DT6 drops the others and so do we), and its destination is a
 *     spent uSID carrier: the 32-bit block and this port's 16-bit uSID, then zeros. Every
 *     switch on the path shifted its own uSID out (README.md, "How it works"), so a carrier that
 *     reaches a host port with more uSIDs in it was misrouted: it is left alone, as the
 *     kernel leaves a packet no SID route matches;
 *   - the outer header (and SRH) is removed; the inner packet goes on up the stack, which
 *     delivers it to the local socket its destination names.
 * Like End.DT6 it copies no ECN from the outer header inwards: the switch ports mark both
 * headers (switch_port.c, point 2), so what the receiver reads is the same either way.
 *
 * Anything else passes untouched (TC_ACT_OK). A frame whose decapsulation the kernel
 * refuses is dropped (TC_ACT_SHOT), as End.DT6 drops one it cannot decapsulate.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* IPv6 (RFC 8200) and SRH (RFC 8754) facts. */
#define IPV6_HLEN 40
#define IPV6_NEXTHDR_OFF 6
#define IPV6_DST_OFF 24
#define NEXTHDR_IPV6 41
#define NEXTHDR_ROUTING 43
#define SRH_ROUTING_TYPE 4
#define SRH_FIXED_LEN 8
/* A spent carrier: block (32 bits) and the host's uSID (16), then 80 bits of zeros. */
#define CARRIER_SPENT_FROM 6

struct srh_fixed {
	__u8 nexthdr;
	__u8 hdrlen; /* in 8-byte units, not counting the first 8 bytes */
	__u8 type;
	__u8 segments_left;
	__u8 last_entry;
	__u8 flags;
	__u16 tag;
};

/* Bytes before the inner IPv6 header if the frame is ours to decapsulate, else 0. */
static __always_inline __u32 outer_len(struct __sk_buff *skb)
{
	__u8 nexthdr, dst[16];
	__u32 len = IPV6_HLEN;
	struct srh_fixed srh;

	if (skb->protocol != bpf_htons(ETH_P_IPV6))
		return 0;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + IPV6_NEXTHDR_OFF, &nexthdr, 1) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + IPV6_DST_OFF, dst, sizeof(dst)))
		return 0;
#pragma unroll
	for (int i = CARRIER_SPENT_FROM; i < 16; i++)
		if (dst[i])
			return 0;
	if (nexthdr == NEXTHDR_ROUTING) {
		if (bpf_skb_load_bytes(skb, ETH_HLEN + IPV6_HLEN, &srh, sizeof(srh)))
			return 0;
		if (srh.type != SRH_ROUTING_TYPE || srh.segments_left)
			return 0;
		nexthdr = srh.nexthdr;
		len += SRH_FIXED_LEN + srh.hdrlen * 8;
	}
	return nexthdr == NEXTHDR_IPV6 ? len : 0;
}

SEC("tc")
int mrc_host_decap(struct __sk_buff *skb)
{
	__u32 len = outer_len(skb);

	if (!len)
		return TC_ACT_OK;
	/* BPF_ADJ_ROOM_MAC: the room right after the Ethernet header, i.e. the outer header
	 * and SRH, goes; the inner IPv6 header becomes the network header (net/core/filter.c
	 * bpf_skb_net_shrink()). */
	if (bpf_skb_adjust_room(skb, -(__s32)len, BPF_ADJ_ROOM_MAC, 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
