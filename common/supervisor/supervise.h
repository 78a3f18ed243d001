#pragma once
// The supervisor process of `h3pipe start` (supervisor.h), private to common/supervisor: what it
// runs (Redis, its stunnel, every service of this host), how it restarts a child that died, and
// how it stops them all.  start() daemonizes and calls supervise().
#include <string>

#include "common/config/config.h"
#include "common/queue/redis.h"
#include "common/supervisor/redis_plan.h"
#include "common/supervisor/supervisor.h"

namespace h3pipe::supervisor {

// The supervisor proper; runs in the daemonized child and never returns.
[[noreturn]] void supervise(const config::Cluster& c, const StartOptions& o,
                            const std::string& host, const RedisPlan& plan);

// How the supervisor itself reaches Redis: this host's way (redis_plan.h) as the plan's user:
// admin only where this stack runs Redis, else the operator (issue #34 P2), or the config's.
queue::RedisAddress supervisor_address(const config::Cluster& c, const RedisPlan& plan);
// "" when Redis answers PING at `a`, else why not.
std::string redis_problem(const queue::RedisAddress& a);

}  // namespace h3pipe::supervisor
