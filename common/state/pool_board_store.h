#pragma once
// The dispatch board's side of Redis (worker/pool_board.h has the policy): every pool's heartbeat
// in the hash keys::pools() (field: the pool's name, value: pb::Heartbeat bytes, decoded by the
// board), the stage streams' backlogs, and the next task a stage's group would hand out.  The
// board and the decode-host choice (worker/decode_choice.h) read and write through these ports
// only; tests put an in-memory board behind them (tests/support/fake_pool_board_store.h).
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/core/result.h"
#include "common/queue/connector.h"
#include "common/queue/queue.h"

namespace h3pipe::state {

// What the decode-host choice reads (worker::decode_load).  Not thread-safe: one per thread.
class BoardReader {
 public:
  virtual ~BoardReader() = default;
  // (length, claimed) of each (stream, group), as queue::stream_backlogs reads them.
  virtual Result<std::vector<queue::StreamBacklog>> backlogs(
      const std::vector<std::pair<std::string, std::string>>& streams) = 0;
  // Every field of keys::pools() as (pool name, heartbeat bytes), in the hash's order (HGETALL).
  virtual Result<std::vector<std::pair<std::string, std::string>>> heartbeats() = 0;
};

// What a pool's board reads and writes.  Not thread-safe: one per thread (the board's worker
// thread and its heartbeat thread each open their own).
class PoolBoardStore : public BoardReader {
 public:
  // HSET keys::pools() pool heartbeat, sent without waiting for the reply (Redis::send: no round
  // trip on the worker's path; the reply is read with the next command).  Errors: I/O only.
  virtual Status publish(const std::string& pool, const std::string& heartbeat) = 0;
  // The same, waiting for the reply (the heartbeat thread, between tasks' own writes).
  virtual Status publish_now(const std::string& pool, const std::string& heartbeat) = 0;
  // Returns once Redis has applied everything sent before (PING), whatever it answered.
  virtual void flush() = 0;
  // The task field of the next entry `group` would hand out on `stream` in `claim_order` (the
  // claim order's pick, queue::peek_ordered): nullopt when there is no such entry or the entry
  // has no task field; an error when there is no stream or group, or no answer.
  virtual Result<std::optional<std::string>> next_task(const std::string& stream,
                                                       const std::string& group,
                                                       const std::string& claim_order) = 0;
  // Blocks until an entry is added to `stream` (XREAD BLOCK max STREAMS stream $) or `max` (at
  // least 1 ms) has passed.
  virtual Status wait_for_entry(const std::string& stream, std::chrono::milliseconds max) = 0;
};

// Opens a PoolBoardStore on a connection of its own.
using OpenPoolBoardStore = std::function<Result<std::unique_ptr<PoolBoardStore>>()>;

// The ports in Redis.
class RedisPoolBoardStore final : public PoolBoardStore {
 public:
  // On a connection of its own, owned.
  explicit RedisPoolBoardStore(std::unique_ptr<queue::Redis> own)
      : own_(std::move(own)), redis_(*own_) {}
  // On the caller's connection (the decode-host choice on a CLI's or a sampler's connection).
  explicit RedisPoolBoardStore(queue::Redis& redis) : redis_(redis) {}
  // Each call opens a store on a new connection from `connector`.
  static OpenPoolBoardStore opener(queue::Connector connector);

  Result<std::vector<queue::StreamBacklog>> backlogs(
      const std::vector<std::pair<std::string, std::string>>& streams) override;
  Result<std::vector<std::pair<std::string, std::string>>> heartbeats() override;
  Status publish(const std::string& pool, const std::string& heartbeat) override;
  Status publish_now(const std::string& pool, const std::string& heartbeat) override;
  void flush() override;
  Result<std::optional<std::string>> next_task(const std::string& stream, const std::string& group,
                                               const std::string& claim_order) override;
  Status wait_for_entry(const std::string& stream, std::chrono::milliseconds max) override;

 private:
  std::unique_ptr<queue::Redis> own_;
  queue::Redis& redis_;
};

}  // namespace h3pipe::state
