#include "common/state/pool_board_store.h"

#include "common/queue/keys.h"
#include "common/queue/reply.h"

namespace h3pipe::state {
using queue::reply_str;

OpenPoolBoardStore RedisPoolBoardStore::opener(queue::Connector connector) {
  return [connector = std::move(connector)]() -> Result<std::unique_ptr<PoolBoardStore>> {
    auto r = connector.connect();
    if (!r.ok()) return r.error();
    return std::unique_ptr<PoolBoardStore>(new RedisPoolBoardStore(std::move(r.value())));
  };
}

Result<std::vector<queue::StreamBacklog>> RedisPoolBoardStore::backlogs(
    const std::vector<std::pair<std::string, std::string>>& streams) {
  return queue::stream_backlogs(redis_, streams);
}

Result<std::vector<std::pair<std::string, std::string>>> RedisPoolBoardStore::heartbeats() {
  auto r = redis_.command({"HGETALL", keys::pools()});
  if (!r.ok()) return r.error();
  std::vector<std::pair<std::string, std::string>> out;
  const redisReply* h = r->get();
  if (h->type != REDIS_REPLY_ARRAY) return out;
  out.reserve(h->elements / 2);
  for (std::size_t i = 0; i + 1 < h->elements; i += 2)
    out.emplace_back(reply_str(h->element[i]), reply_str(h->element[i + 1]));
  return out;
}

Status RedisPoolBoardStore::publish(const std::string& pool, const std::string& heartbeat) {
  return redis_.send({"HSET", keys::pools(), pool, heartbeat});
}

Status RedisPoolBoardStore::publish_now(const std::string& pool, const std::string& heartbeat) {
  auto r = redis_.command({"HSET", keys::pools(), pool, heartbeat});
  if (!r.ok()) return r.error();
  return {};
}

void RedisPoolBoardStore::flush() {
  (void)redis_.command({"PING"});
}

Result<std::optional<std::string>> RedisPoolBoardStore::next_task(const std::string& stream,
                                                                  const std::string& group,
                                                                  const std::string& claim_order) {
  auto e = queue::peek_ordered(redis_, stream, group, claim_order);
  if (!e.ok()) return e.error();
  // An entry without a task (or with an empty one) is no task.
  if (!*e || (*e)->payload.empty()) return std::optional<std::string>();
  return std::optional<std::string>(std::move((*e)->payload));
}

Status RedisPoolBoardStore::wait_for_entry(const std::string& stream,
                                           std::chrono::milliseconds max) {
  auto r = redis_.command({"XREAD", "BLOCK", std::to_string(std::max<long long>(1, max.count())),
                           "STREAMS", stream, "$"});
  if (!r.ok()) return r.error();
  return {};
}

}  // namespace h3pipe::state
