// SPDX-License-Identifier: GPL-2.0
/*
 * mrc-testbed: the congestion-signalling switch port (tc clsact egress, direct action).
 *
 * What it does to every frame a switch port sends (docs/switch-port.md has the whole story):
 *
 *  1. A virtual queue per port ("phantom queue", Alizadeh et al., "Less is More: Trading a
 *     little Bandwidth for Ultra-Low Latency in the Data Center", NSDI 2012): a byte counter
 *     drained at the port's configured rate, backlog = max(0, backlog - (now - last) * rate),
 *     then backlog += the length of what is actually sent (the trimmed length if trimmed).
 *     A packet is "over" a threshold when the backlog it finds on arrival, before its own
 *     bytes, exceeds the threshold. The real queue (HTB behind this hook) still does the
 *     rate limiting and the dropping; this counter only decides the signals, so they do not
 *     depend on qdiscs this kernel lacks (no RED, no netem here).
 *
 *  2. ECN: an IPv6 packet whose outer header is ECT(0) or ECT(1) and that is over the mark
 *     threshold leaves with CE (RFC 3168 codepoints; the ECN field is the low two bits of the
 *     traffic class, bits 5..4 of IPv6 byte 1). Not-ECT packets are never marked, only
 *     counted. Packets already CE are left as they are.
 *     The inner header of IPv6-in-IPv6 is marked too (when it is ECT): the receiving host
 *     decapsulates with seg6local End.DT6 and its sockets read the INNER traffic class, and
 *     Linux's End.DT6 does not copy outer CE inwards. Established by experiment on kernel
 *     6.18 (tests/integration/test_switch_port.py::test_end_dt6_decap_drops_outer_ce keeps
 *     checking it: outer CE + inner ECT(0) arrives as ECT(0)), and by reading the source:
 *     net/ipv6/seg6_local.c input_action_end_dt6() -> decap_and_validate() pulls the outer
 *     header and copies no ECN (net/ipv6/ip6_tunnel.c, the ip6ip6 tunnel device, does:
 *     ip6ip6_dscp_ecn_decapsulate() sets CE on the inner header; seg6 has no such step).
 *     RFC 6040 §4.2 gives that job to the decapsulator; this program does it on the
 *     decapsulator's behalf.
 *
 *  3. Trimming (NDP-style packet trimming, Handley et al., SIGCOMM 2017; MRC trims on the
 *     data class and forwards trimmed headers at high priority, per Sohan et al., "The
 *     Multipath Reliable Connection (MRC) Transport", arXiv:2606.18170 §II-C): an MRC data
 *     packet (inner UDP dport 4791, BTH opcode in the WRITE range, not already trimmed, with
 *     a payload to cut) over the trim threshold is cut to its headers:
 *        outer IPv6 | [SRH] | inner IPv6 | UDP | BTH | RETH, [ImmDt], METH, [TSETH] | ICRC
 *     exactly what testbed/nic/wire.py's trim_data_packet() produces (docs/wire-format.md
 *     §5.3): BTH.TRIMMED set (and TRIMMED_LASTHOP on a last-hop port), payload removed,
 *     ICRC = zlib's crc32 over the MRC bytes before it, recomputed; the outer and inner IPv6
 *     payload lengths and the UDP length rewritten (the receiver drops the packet otherwise),
 *     the UDP checksum set to 0 as MRC sends it (wire-format.md §1.2; UDP_NO_CHECK6_RX).
 *     DSCP is kept. The only codepoint the public record names for trimmed packets is DSCP
 *     9, and only from a third-party ns-3 model's README, unverified; the testbed's wire
 *     format defines no DSCP codepoints (wire-format.md §9, "not defined yet"), receivers
 *     recognise a trim by the BTH flags, and every switch port of the testbed runs this
 *     program, which steers trimmed packets to the control class by those flags at every
 *     hop, so a DSCP rewrite would add an unsourced number and change nothing.
 *
 *  4. Priority: trimmed packets and MRC control packets (SACK, NACK, reliability probe,
 *     EV probe and reply, CNP) get skb->priority = the port's control-class priority, on
 *     the SRv6 fabric (IPv6-in-IPv6) and on the routed one (plain IPv6, never trimmed). HTB takes
 *     skb->priority as a class id when its major number equals the qdisc's handle
 *     (net/sched/sch_htb.c htb_classify()), so with switch_port.py's priority HTB they are
 *     served before queued full-size data. 0 = leave skb->priority alone.
 *
 * The clsact egress hook runs in __dev_queue_xmit() before the root qdisc, so the program
 * sees every frame OVS sends into the port's veth (Linux net/core/dev.c sch_handle_egress()).
 *
 * Pass verdict: TC_ACT_UNSPEC, not TC_ACT_OK. For a direct-action classifier TC_ACT_OK ends
 * the filter chain, TC_ACT_UNSPEC goes on to the next filter and, at the end of the chain,
 * passes the packet (net/sched/cls_bpf.c cls_bpf_classify(); linux/pkt_cls.h). The
 * gray-loss fault's filter sits after this one on the same hook (testbed/workload/faults.py,
 * TC_GRAY_PREF), and must still see the packet: the queue comes before the lossy wire.
 *
 * Wire constants (UDP port, header lengths, opcode sets, BTH flag bits) are not written
 * here: switch_port.py passes them from testbed/nic/wire.py as -D definitions, so the
 * program and the endpoint cannot disagree silently, and tests/unit/test_switch_port_prog.py
 * runs the program on packets made by wire.py.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#if !defined(MRC_UDP_PORT) || !defined(MRC_PROTOCOL_VERSION) || !defined(MRC_BTH_LEN) || \
	!defined(MRC_METH_LEN) || !defined(MRC_TSETH_LEN) || !defined(MRC_RETH_LEN) ||    \
	!defined(MRC_IMMDT_LEN) || !defined(MRC_ICRC_LEN) || !defined(MRC_FLAG_TIMESTAMP) || \
	!defined(MRC_FLAG_TRIMMED) || !defined(MRC_FLAG_TRIMMED_LASTHOP) ||                 \
	!defined(MRC_DATA_OPCODES) || !defined(MRC_IMM_OPCODES) || !defined(MRC_CONTROL_OPCODES) || \
	!defined(MRC_CONTROL_OPCODE_BASE) || !defined(MRC_BTH_VERSION_OFFSET) ||                \
	!defined(MRC_BTH_FLAGS_OFFSET) || !defined(MRC_ROCE_CONTROL_OPCODES) ||                \
	!defined(MRC_ROCE_OPCODE_BASE)
#error "build with testbed/fabric/switch_port.py: it passes the wire constants of testbed/nic/wire.py"
#endif

/* IPv6 (RFC 8200) and SRH (RFC 8754) facts: not MRC's to change. */
#define IPV6_HLEN 40
#define UDP_HLEN 8
#define IPV6_ECN_SHIFT 4 /* ECN bits within IPv6 byte 1 */
#define ECN_MASK 0x3
#define ECN_NOT_ECT 0x0
#define ECN_CE 0x3
#define NEXTHDR_ROUTING 43
#define SRH_ROUTING_TYPE 4
#define NSEC_PER_SEC 1000000000ULL

/* Largest MRC header block before the payload: BTH METH TSETH RETH ImmDt. */
#define MRC_MAX_HDR (MRC_BTH_LEN + MRC_METH_LEN + MRC_TSETH_LEN + MRC_RETH_LEN + MRC_IMMDT_LEN)
/* Whether op is in set, a 64-bit mask whose bit i stands for opcode base + i. */
#define OPCODE_IN(set, base, op) \
	((op) >= (base) && (op) - (base) < 64 && (((__u64)(set) >> ((op) - (base))) & 1))

/* port_config.flags; switch_port.py has the same numbers (FLAG_*). */
#define PORT_MARK 0x1
#define PORT_TRIM 0x2
#define PORT_LAST_HOP 0x4

struct port_config {
	__u64 rate_bps;      /* virtual queue drain rate, bits/s; 0 = never drains */
	__u32 mark_bytes;    /* CE when the backlog found on arrival exceeds this */
	__u32 trim_bytes;    /* trim when the backlog found on arrival exceeds this */
	__u32 limit_bytes;   /* the backlog never exceeds this (a real buffer is finite); 0 = no cap */
	__u32 flags;         /* PORT_* */
	__u32 ctrl_priority; /* skb->priority of the control class; 0 = leave it */
	__u32 reserved;
};

struct port_state {
	struct bpf_spin_lock lock; /* ports send from both cores at once */
	__u32 reserved;
	__u64 backlog;     /* virtual queue, bytes */
	__u64 last_ns;     /* bpf_ktime_get_ns() of the last drain; in the future = frozen */
	__u64 drain_rem;   /* drained byte fractions carried over, in 1e-9 bytes */
	__u64 packets;
	__u64 bytes;       /* as sent: trimmed packets count their trimmed length */
	__u64 ce_marked;
	__u64 trimmed;
	__u64 not_ect_over; /* IPv6, not ECT, over the mark threshold: left unmarked */
	__u64 prioritized;
	__u64 trim_errors; /* a trim the kernel refused (packet passed uncut) or left half done (dropped) */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* ifindex */
	__type(value, struct port_config);
} port_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* ifindex */
	__type(value, struct port_state);
} port_state SEC(".maps");

/* What parsing found; every offset counts from the start of the Ethernet frame. */
struct pkt {
	__u32 len;
	__u32 inner_off; /* inner IPv6 header; 0 = none */
	__u32 mrc_off;   /* BTH; 0 = not an MRC packet */
	__u32 hdr_len;   /* MRC bytes before the payload */
	__u32 trim_len;  /* frame length once trimmed; 0 = not trimmable */
	__u8 ipv6;
	__u8 outer_tc1;  /* IPv6 byte 1 (traffic class low nibble | flow label high nibble) */
	__u8 inner_tc1;
	__u8 opcode;
	__u8 bth_flags;
	__u8 control;    /* to the control class: control opcode, or already trimmed */
};

static __always_inline __u8 ecn_of(__u8 tc1)
{
	return (tc1 >> IPV6_ECN_SHIFT) & ECN_MASK;
}

/* The MRC layer: dport, version and opcode say it is MRC. Control opcodes, and data trimmed
 * upstream, go to the control class. Returns whether the UDP datagram is MRC data not yet
 * trimmed, with its UDP length in *udp_len. */
static __always_inline int read_bth(struct __sk_buff *skb, struct pkt *p, __u32 udp_off,
				    __u16 *udp_len)
{
	struct {
		__be16 sport, dport, len, check;
	} udp;
	__u8 bth[MRC_BTH_FLAGS_OFFSET + 1]; /* opcode through the flag byte */

	if (bpf_skb_load_bytes(skb, udp_off, &udp, sizeof(udp)) ||
	    udp.dport != bpf_htons(MRC_UDP_PORT))
		return 0;
	if (bpf_skb_load_bytes(skb, udp_off + UDP_HLEN, bth, sizeof(bth)) ||
	    bth[MRC_BTH_VERSION_OFFSET] != MRC_PROTOCOL_VERSION)
		return 0;
	p->mrc_off = udp_off + UDP_HLEN;
	p->opcode = bth[0];
	p->bth_flags = bth[MRC_BTH_FLAGS_OFFSET];
	*udp_len = bpf_ntohs(udp.len);
	if (OPCODE_IN(MRC_CONTROL_OPCODES, MRC_CONTROL_OPCODE_BASE, p->opcode) ||
	    OPCODE_IN(MRC_ROCE_CONTROL_OPCODES, MRC_ROCE_OPCODE_BASE, p->opcode)) {
		p->control = 1;
		return 0;
	}
	if (!OPCODE_IN(MRC_DATA_OPCODES, 0, p->opcode))
		return 0;
	if (p->bth_flags & MRC_FLAG_TRIMMED) { /* trimmed upstream: headers only, high priority */
		p->control = 1;
		return 0;
	}
	return 1;
}

/* An encapsulated MRC packet: its class, and where a trim would cut it (lengths must agree). */
static __always_inline void parse_mrc(struct __sk_buff *skb, struct pkt *p, __u32 udp_off,
				      __u16 inner_plen)
{
	__u16 udp_len;

	if (!read_bth(skb, p, udp_off, &udp_len))
		return;
	p->hdr_len = MRC_BTH_LEN + MRC_METH_LEN + MRC_RETH_LEN;
	if (p->bth_flags & MRC_FLAG_TIMESTAMP)
		p->hdr_len += MRC_TSETH_LEN;
	if (OPCODE_IN(MRC_IMM_OPCODES, 0, p->opcode))
		p->hdr_len += MRC_IMMDT_LEN;
	/* Trim only what adds up (a switch must not "repair" a malformed packet into a valid
	 * one) and only where there is payload to cut: a header-only packet is already as
	 * small as its trimmed form, and a trim flag on it would only cause a retransmission. */
	if (inner_plen != p->len - p->inner_off - IPV6_HLEN || udp_len != inner_plen)
		return;
	if (p->len <= p->mrc_off + p->hdr_len + MRC_ICRC_LEN)
		return;
	if (skb->gso_size) /* one skb, several wire packets: cutting its tail is not a trim */
		return;
	p->trim_len = p->mrc_off + p->hdr_len + MRC_ICRC_LEN;
}

static __always_inline void parse(struct __sk_buff *skb, struct pkt *p)
{
	struct {
		__u8 vtc, tc1;
		__be16 flow, plen;
		__u8 nexthdr, hop_limit;
	} ip6;
	__be16 proto;
	__u32 off = ETH_HLEN + IPV6_HLEN;

	if (bpf_skb_load_bytes(skb, 12, &proto, sizeof(proto)) || proto != bpf_htons(ETH_P_IPV6))
		return;
	if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip6, sizeof(ip6)) || ip6.vtc >> 4 != 6)
		return;
	p->ipv6 = 1;
	p->outer_tc1 = ip6.tc1;
	if (ip6.nexthdr == NEXTHDR_ROUTING) { /* an SRH for paths longer than one DA */
		__u8 rh[4];                     /* next header, hdr ext len, routing type, SL */

		if (bpf_skb_load_bytes(skb, off, rh, sizeof(rh)) || rh[2] != SRH_ROUTING_TYPE)
			return;
		ip6.nexthdr = rh[0];
		off += ((__u32)rh[1] + 1) * 8;
	}
	if (ip6.nexthdr == IPPROTO_UDP) {
		/* The routed fabric's plain IPv6 (RoCE as RoCE fabrics carry it): its ACKs, NAKs
		 * and CNPs take the control class, as a RoCE fabric gives them a strict-priority
		 * class; its data is never trimmed (no RoCE switch trims). */
		__u16 udp_len;

		read_bth(skb, p, off, &udp_len);
		return;
	}
	if (ip6.nexthdr != IPPROTO_IPV6 || bpf_ntohs(ip6.plen) != p->len - ETH_HLEN - IPV6_HLEN)
		return;
	if (bpf_skb_load_bytes(skb, off, &ip6, sizeof(ip6)) || ip6.vtc >> 4 != 6)
		return;
	p->inner_off = off;
	p->inner_tc1 = ip6.tc1;
	if (ip6.nexthdr == IPPROTO_UDP)
		parse_mrc(skb, p, off + IPV6_HLEN, bpf_ntohs(ip6.plen));
}

/* Virtual queue drain. The remainder carries byte fractions from packet to packet, so the
 * queue drains at the configured rate however small the gaps. The gap is capped at 1 s so
 * dt * bytes/s fits 64 bits up to ~147 Gbit/s; a backlog that a second at the port rate
 * does not drain is far beyond any threshold anyway. A clock that has not advanced past
 * last_ns drains nothing: that is what lets a test freeze the queue (last_ns far ahead). */
static __always_inline void drain(struct port_state *st, const struct port_config *cfg, __u64 now)
{
	__u64 dt, acc, drained;

	if (now <= st->last_ns)
		return;
	dt = now - st->last_ns;
	st->last_ns = now;
	if (dt > NSEC_PER_SEC)
		dt = NSEC_PER_SEC;
	acc = dt * (cfg->rate_bps / 8) + st->drain_rem;
	drained = acc / NSEC_PER_SEC;
	st->drain_rem = acc % NSEC_PER_SEC;
	if (st->backlog > drained) {
		st->backlog -= drained;
	} else { /* an idle link banks no credit */
		st->backlog = 0;
		st->drain_rem = 0;
	}
}

/* zlib's crc32 (reflected, polynomial 0xEDB88320, initial and final inversion), as
 * wire.py's ICRC is; bitwise: only trimmed packets pay for it, at most 40 bytes each. */
static __always_inline __u32 crc32(const __u8 *buf, __u32 len)
{
	__u32 crc = 0xFFFFFFFF;

	for (int i = 0; i < MRC_MAX_HDR; i++) {
		if (i >= len)
			break;
		crc ^= buf[i];
		for (int bit = 0; bit < 8; bit++)
			crc = (crc >> 1) ^ (0xEDB88320 & -(crc & 1));
	}
	return ~crc;
}

/* The trim itself. 0: trimmed; -1: refused, packet untouched; -2: cut but not rewritten
 * (must be dropped). A global (not inlined) function on purpose: the verifier checks it
 * once, with unknown arguments, instead of once per path through the caller, where the
 * unrolled CRC loop on every path ran past the 1M-instruction verification limit. So it
 * trusts nothing it is given: the CRC loop is bounded by MRC_MAX_HDR whatever hdr_len says,
 * and the kernel checks every offset. The inner IPv6 header is always the 48 bytes before
 * the BTH (IPv6 + UDP), so it needs no argument of its own. */
__attribute__((noinline)) int mrc_trim(struct __sk_buff *skb, __u32 mrc_off, __u32 hdr_len,
				       __u32 trim_len, __u32 last_hop)
{
	__u8 hdr[MRC_MAX_HDR];
	__u32 inner_off = mrc_off - UDP_HLEN - IPV6_HLEN;
	__u8 flags;
	__be32 icrc;
	__be16 outer_plen, inner_plen, zero = 0;

	if (hdr_len > MRC_MAX_HDR || mrc_off < ETH_HLEN + 2 * IPV6_HLEN + UDP_HLEN)
		return -1;
	/* A trimmable packet has payload and an ICRC after its headers, so the full 40
	 * bytes are there even when its headers are shorter. */
	if (bpf_skb_load_bytes(skb, mrc_off, hdr, sizeof(hdr)))
		return -1;
	hdr[MRC_BTH_FLAGS_OFFSET] |= MRC_FLAG_TRIMMED | (last_hop ? MRC_FLAG_TRIMMED_LASTHOP : 0);
	flags = hdr[MRC_BTH_FLAGS_OFFSET];
	icrc = bpf_htonl(crc32(hdr, hdr_len));
	outer_plen = bpf_htons(trim_len - ETH_HLEN - IPV6_HLEN);
	inner_plen = bpf_htons(trim_len - inner_off - IPV6_HLEN);
	if (bpf_skb_change_tail(skb, trim_len, 0))
		return -1;
	if (bpf_skb_store_bytes(skb, mrc_off + MRC_BTH_FLAGS_OFFSET, &flags, 1, 0) ||
	    bpf_skb_store_bytes(skb, mrc_off + hdr_len, &icrc, sizeof(icrc), 0) ||
	    bpf_skb_store_bytes(skb, ETH_HLEN + 4, &outer_plen, sizeof(outer_plen), 0) ||
	    bpf_skb_store_bytes(skb, inner_off + 4, &inner_plen, sizeof(inner_plen), 0) ||
	    bpf_skb_store_bytes(skb, inner_off + IPV6_HLEN + 4, &inner_plen,
				sizeof(inner_plen), 0) ||
	    bpf_skb_store_bytes(skb, inner_off + IPV6_HLEN + 6, &zero, sizeof(zero), 0))
		return -2;
	return 0;
}

static __always_inline void set_ce(struct __sk_buff *skb, __u32 off, __u8 tc1)
{
	__u8 marked = tc1 | (ECN_CE << IPV6_ECN_SHIFT);

	bpf_skb_store_bytes(skb, off + 1, &marked, 1, 0);
}

SEC("tc")
int mrc_switch_port(struct __sk_buff *skb)
{
	__u32 ifindex = skb->ifindex;
	struct port_config *cfg = bpf_map_lookup_elem(&port_config, &ifindex);
	struct port_state *st, fresh = {};
	struct pkt p = {.len = skb->len};
	int do_trim, mark, not_ect, ctrl, err;
	__u64 now, sent;

	if (!cfg)
		return TC_ACT_UNSPEC;
	st = bpf_map_lookup_elem(&port_state, &ifindex);
	if (!st) { /* switch_port.py creates it on attach; this covers a race with a reset */
		bpf_map_update_elem(&port_state, &ifindex, &fresh, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&port_state, &ifindex);
		if (!st)
			return TC_ACT_UNSPEC;
	}
	parse(skb, &p);
	now = bpf_ktime_get_ns();

	bpf_spin_lock(&st->lock);
	drain(st, cfg, now);
	do_trim = (cfg->flags & PORT_TRIM) && p.trim_len && st->backlog > cfg->trim_bytes;
	mark = 0;
	not_ect = 0;
	if ((cfg->flags & PORT_MARK) && p.ipv6 && st->backlog > cfg->mark_bytes) {
		__u8 ecn = ecn_of(p.outer_tc1);

		mark = ecn != ECN_NOT_ECT && ecn != ECN_CE;
		not_ect = ecn == ECN_NOT_ECT;
	}
	sent = do_trim ? p.trim_len : p.len;
	st->backlog += sent;
	if (cfg->limit_bytes && st->backlog > cfg->limit_bytes)
		st->backlog = cfg->limit_bytes;
	st->packets++;
	st->bytes += sent;
	st->ce_marked += mark;
	st->trimmed += do_trim;
	st->not_ect_over += not_ect;
	bpf_spin_unlock(&st->lock);

	if (do_trim) {
		err = mrc_trim(skb, p.mrc_off, p.hdr_len, p.trim_len, cfg->flags & PORT_LAST_HOP);
		if (err) {
			bpf_spin_lock(&st->lock); /* it went out whole after all */
			st->backlog += p.len - p.trim_len;
			st->bytes += p.len - p.trim_len;
			st->trimmed--;
			st->trim_errors++;
			bpf_spin_unlock(&st->lock);
			if (err == -2)
				return TC_ACT_SHOT;
			do_trim = 0;
		}
	}
	if (mark) {
		set_ce(skb, ETH_HLEN, p.outer_tc1);
		if (p.inner_off && ecn_of(p.inner_tc1) != ECN_NOT_ECT)
			set_ce(skb, p.inner_off, p.inner_tc1);
	}
	ctrl = p.control || do_trim;
	if (ctrl && cfg->ctrl_priority) {
		skb->priority = cfg->ctrl_priority;
		__sync_fetch_and_add(&st->prioritized, 1);
	}
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
