// SPDX-License-Identifier: GPL-2.0
/*
 * mrc-testbed: kernel TCP and MPTCP into uSID carriers (tc clsact egress of a host port,
 * direct action), for kernels built without seg6 encap routes (CONFIG_IPV6_SEG6_LWTUNNEL
 * unset). testbed/kernel/seg6_encap.py loads it; docs/host-decap.md has the story.
 *
 * Where the kernel has them, each kernel flow leaves through a seg6 encap route chosen by a
 * policy rule on its addresses and ports (testbed/kernel/routes.py). Here the same rule
 * still picks the port (its route is a plain one through the plane's gateway), and this
 * program puts the carrier on: it looks the packet's addresses and ports up in `flows`,
 * keyed as routes.py's rule selectors are, an absent field being zero, tried in the order
 * exact, no source address (a TCP flow's way out), no source port (an MPTCP subflow's
 * way out: the kernel picks its port), no destination port (an MPTCP subflow's way back).
 * A packet found gets what seg6 encap gives it (Linux net/ipv6/seg6_iptunnel.c
 * seg6_do_srh_encap()): an outer IPv6 header to the carrier, with the inner traffic class
 * and flow label and a hop limit of 64, then, in mode `encap`, a Segment Routing Header
 * (RFC 8754) whose one segment is the carrier, all visited. Mode `encap.red` has no SRH.
 * The outer source is the inner one (seg6 takes the port's address: the switches and the
 * receiver's decapsulation never read it).
 *
 * The route's MTU leaves room for these bytes (routes.py), as seg6's headroom does, so a
 * segment fits the link after it; a GSO packet keeps its segment size
 * (BPF_F_ADJ_ROOM_FIXED_GSO) for the same reason. Anything else passes untouched.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define IPV6_HLEN 40
#define IPV6_PLEN_OFF 4
#define IPV6_NEXTHDR_OFF 6
#define IPV6_SADDR_OFF 8
#define NEXTHDR_IPV6 41
#define NEXTHDR_ROUTING 43
#define SRH_ROUTING_TYPE 4
#define SRH_LEN 24     /* 8 fixed bytes and one 16-byte segment */
#define HOP_LIMIT 64   /* seg6 encap's, the default hop limit */
#define ADDR_LEN 16

struct flow_key {
	__u8 saddr[ADDR_LEN]; /* all zero: any */
	__u8 daddr[ADDR_LEN];
	__be16 sport;         /* 0: any */
	__be16 dport;         /* 0: any */
};

struct flow_path {
	__u8 carrier[ADDR_LEN];
	__u32 with_srh; /* 1: mode encap (outer IPv6 + SRH); 0: encap.red */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct flow_key);
	__type(value, struct flow_path);
} flows SEC(".maps");

struct outer {
	__be32 vtc_flow; /* version, traffic class, flow label */
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
	__u8 saddr[ADDR_LEN];
	__u8 daddr[ADDR_LEN];
	/* the SRH, when there is one */
	__u8 srh_nexthdr;
	__u8 srh_hdrlen;
	__u8 srh_type;
	__u8 srh_segments_left;
	__u8 srh_last_entry;
	__u8 srh_flags;
	__be16 srh_tag;
	__u8 segment[ADDR_LEN];
};

static __always_inline struct flow_path *find(const struct flow_key *packet)
{
	struct flow_key key = *packet;
	struct flow_path *path;

	path = bpf_map_lookup_elem(&flows, &key);
	if (path)
		return path;
	__builtin_memset(key.saddr, 0, ADDR_LEN);
	path = bpf_map_lookup_elem(&flows, &key);
	if (path)
		return path;
	__builtin_memcpy(key.saddr, packet->saddr, ADDR_LEN);
	key.sport = 0;
	path = bpf_map_lookup_elem(&flows, &key);
	if (path)
		return path;
	key.sport = packet->sport;
	key.dport = 0;
	return bpf_map_lookup_elem(&flows, &key);
}

SEC("tc")
int mrc_seg6_encap(struct __sk_buff *skb)
{
	struct flow_key key = {};
	struct flow_path *path;
	struct outer hdr = {};
	__be32 vtc_flow;
	__be16 inner_plen;
	__u8 nexthdr;
	__u32 len;

	if (skb->protocol != bpf_htons(ETH_P_IPV6))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + IPV6_NEXTHDR_OFF, &nexthdr, 1) ||
	    nexthdr != IPPROTO_TCP)
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, ETH_HLEN + IPV6_SADDR_OFF, key.saddr, 2 * ADDR_LEN) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + IPV6_HLEN, &key.sport, 4) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN, &vtc_flow, 4) ||
	    bpf_skb_load_bytes(skb, ETH_HLEN + IPV6_PLEN_OFF, &inner_plen, 2))
		return TC_ACT_OK;
	path = find(&key);
	if (!path)
		return TC_ACT_OK;

	len = path->with_srh ? sizeof(hdr) : IPV6_HLEN;
	hdr.vtc_flow = vtc_flow; /* version 6, the inner traffic class and flow label */
	/* the inner packet, then the SRH if any */
	hdr.payload_len = bpf_htons(bpf_ntohs(inner_plen) + IPV6_HLEN + (len - IPV6_HLEN));
	hdr.nexthdr = path->with_srh ? NEXTHDR_ROUTING : NEXTHDR_IPV6;
	hdr.hop_limit = HOP_LIMIT;
	__builtin_memcpy(hdr.saddr, key.saddr, ADDR_LEN);
	__builtin_memcpy(hdr.daddr, path->carrier, ADDR_LEN);
	hdr.srh_nexthdr = NEXTHDR_IPV6;
	hdr.srh_hdrlen = (SRH_LEN - 8) / 8;
	hdr.srh_type = SRH_ROUTING_TYPE;
	__builtin_memcpy(hdr.segment, path->carrier, ADDR_LEN);

	if (bpf_skb_adjust_room(skb, len, BPF_ADJ_ROOM_MAC,
				BPF_F_ADJ_ROOM_ENCAP_L3_IPV6 | BPF_F_ADJ_ROOM_FIXED_GSO))
		return TC_ACT_SHOT;
	if (bpf_skb_store_bytes(skb, ETH_HLEN, &hdr, len, 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
