#pragma once
// The one place a cluster config's /redis section becomes a connection address: host and port,
// the config's user and password, Sentinel (addresses, master name, Sentinel's own AUTH) and the
// WAIT settings.  Every service (runner::redis_address), the supervisor and the CLI start from
// it, so each (re)connect of every Redis connection finds the primary the same way.
#include <string_view>

#include "common/config/config.h"
#include "common/queue/redis.h"

namespace h3pipe::queue {

RedisAddress address_of(const config::Redis& r);
// An explicit address over `a` (H3PIPE_REDIS_ADDRESS, a service's --redis): a Unix socket path,
// or HOST:PORT; Sentinels are dropped (it is used as it is).  False, `a` unchanged, for anything
// else (no port).
bool set_address(RedisAddress& a, std::string_view host_port_or_socket);

// Keeps a's user and password, takes host/port/Sentinel/WAIT from r (the supervisor and the CLI
// set their own user on an address first).
void apply_topology(const config::Redis& r, RedisAddress& a);

}  // namespace h3pipe::queue
