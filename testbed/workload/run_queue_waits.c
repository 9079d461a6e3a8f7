// SPDX-License-Identifier: GPL-2.0
/*
 * mrc-testbed: how long the threads that carry a trial's packets wait, runnable, for a CPU,
 * one wait at a time (testbed/workload/run_queue_waits.py loads it; the health gate reads it).
 *
 * The kernel's schedstat gives only the sum of a thread's waits. The sum cannot tell 13,000
 * wake-ups a second that each wait a few microseconds (what a PMD thread polling AF_XDP ports
 * at nice -10 sees beside a busy process: it delays no packet measurably) from a few waits of
 * a whole scheduler slice, milliseconds, a real part of the fabric's base RTT. This program
 * keeps a log2 histogram of the waits of the threads userspace names, by group, as the
 * run-queue latency tools do: a thread becomes runnable at a wake-up, or when it is switched
 * out while still runnable (preempted); its wait ends when it is switched in.
 *
 * Raw tracepoints (sched_wakeup, sched_wakeup_new, sched_switch); the only kernel structure
 * read is task_struct.pid, through a CO-RE relocation against the kernel's BTF.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define GROUPS 4        /* run_queue_waits.py: GROUPS */
#define BUCKETS 32      /* bucket b: waits of [2^b, 2^(b+1)) microseconds; bucket 0 also < 1 us */
#define THREADS 4096

struct task_struct {
	int pid;
} __attribute__((preserve_access_index));

struct waits {
	__u64 count[BUCKETS];
	__u64 sum_ns[BUCKETS];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, THREADS);
	__type(key, __u32);             /* thread id */
	__type(value, __u32);           /* group */
} watched SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, THREADS);
	__type(key, __u32);             /* thread id */
	__type(value, __u64);           /* runnable since, ns (bpf_ktime_get_ns) */
} runnable_since SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GROUPS);
	__type(key, __u32);
	__type(value, struct waits);
} waits SEC(".maps");

static __always_inline void became_runnable(struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);
	__u64 now;

	if (!bpf_map_lookup_elem(&watched, &tid))
		return;
	now = bpf_ktime_get_ns();
	bpf_map_update_elem(&runnable_since, &tid, &now, BPF_ANY);
}

/* floor(log2(microseconds)), 0 below 2 us, at most BUCKETS - 1 (branch-free: no loop) */
static __always_inline __u32 bucket(__u64 wait_ns)
{
	__u64 us = wait_ns / 1000;
	__u32 b = 0, shift;

	shift = (us > 0xFFFFFFFFULL) << 5; us >>= shift; b |= shift;
	shift = (us > 0xFFFF) << 4; us >>= shift; b |= shift;
	shift = (us > 0xFF) << 3; us >>= shift; b |= shift;
	shift = (us > 0xF) << 2; us >>= shift; b |= shift;
	shift = (us > 0x3) << 1; us >>= shift; b |= shift;
	b |= us >> 1;
	return b < BUCKETS ? b : BUCKETS - 1;
}

SEC("raw_tp/sched_wakeup")
int on_wakeup(struct bpf_raw_tracepoint_args *ctx)
{
	became_runnable((struct task_struct *)ctx->args[0]);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int on_wakeup_new(struct bpf_raw_tracepoint_args *ctx)
{
	became_runnable((struct task_struct *)ctx->args[0]);
	return 0;
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
 *              unsigned int prev_state) */
SEC("raw_tp/sched_switch")
int on_switch(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *next = (struct task_struct *)ctx->args[2];
	__u32 tid, *group;
	__u64 *since, wait;
	struct waits *w;
	__u32 b;

	if (ctx->args[0] || (__u32)ctx->args[3] == 0)   /* preempted, or still TASK_RUNNING */
		became_runnable((struct task_struct *)ctx->args[1]);
	tid = BPF_CORE_READ(next, pid);
	group = bpf_map_lookup_elem(&watched, &tid);
	if (!group)
		return 0;
	since = bpf_map_lookup_elem(&runnable_since, &tid);
	if (!since)
		return 0;
	wait = bpf_ktime_get_ns() - *since;
	bpf_map_delete_elem(&runnable_since, &tid);
	w = bpf_map_lookup_elem(&waits, group);
	if (!w)
		return 0;
	b = bucket(wait);
	__sync_fetch_and_add(&w->count[b], 1);
	__sync_fetch_and_add(&w->sum_ns[b], wait);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
