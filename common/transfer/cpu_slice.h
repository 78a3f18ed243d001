#pragma once
// The transfer service's CPU slice (issue #36 item 8).  A hand-off crosses a handful of threads
// (the ZeroMQ I/O threads, the receiver's loop and its disk thread, the sender's) and each hop is
// a wakeup.  On a host whose cores are busy feeding GPUs, each wakeup waits for the busy thread
// beside it to use up its slice (1.4 ms here by default), and those waits add up on the
// hand-off's critical path.  Linux's EEVDF scheduler (6.12 and later) lets a thread ask for a
// shorter slice: it then gets an earlier deadline and preempts at wakeup, while its share of the
// CPU stays what its nice value gives it.  That is what a latency-sensitive, I/O-bound service
// wants, and it needs no privilege (the nice value is kept as it is).
#include "common/core/result.h"

namespace h3pipe::transfer {

// Asks for a slice of `us` microseconds for the calling thread and every thread it creates
// afterwards (call it before the ZeroMQ context and the service's threads start).  Returns the
// slice in effect, in microseconds, as the kernel reports it back (it clamps to [100, 100000]),
// or 0 where the kernel keeps no custom slice for ordinary threads (before 6.12: the call is
// accepted and changes nothing).  us == 0 asks for nothing and returns 0.  Errors:
// transfer.slice (sched_getattr/sched_setattr refused; the kernel's default stays).
Result<int> request_cpu_slice(int us);

}  // namespace h3pipe::transfer
