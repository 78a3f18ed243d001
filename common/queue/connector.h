#pragma once
// The one place a service's Redis connections are made (docs/design.md, convention 3): the runner
// builds one Connector from the config's address and hands it to everything that talks to Redis
// (the stage worker, its lease keepers and GPU lease, the pool board, ingest), each of which opens
// the connections it needs from it (one per thread: a Redis is never shared between threads).
#include <memory>
#include <utility>

#include "common/core/result.h"
#include "common/queue/redis.h"

namespace h3pipe::queue {

// A value: copies connect to the same address.  connect() is thread-safe.  Made from the address
// it connects to, implicitly (what takes a Connector takes an address where a test has one).
class Connector final {
 public:
  Connector() = default;
  Connector(RedisAddress addr) : addr_(std::move(addr)) {}  // NOLINT: implicit by design
  // A new connection, connected and authenticated (Redis::connect: errors name the address).
  Result<std::unique_ptr<Redis>> connect() const;
  const RedisAddress& address() const { return addr_; }

 private:
  RedisAddress addr_;
};

}  // namespace h3pipe::queue
