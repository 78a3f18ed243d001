#include "common/state/pause.h"

#include "common/queue/keys.h"

namespace h3pipe::state {

Status pause_run(queue::Redis& redis, const std::string& run_id) {
  auto r = redis.command({"SADD", keys::paused_runs(), run_id});
  if (!r.ok()) return r.error();
  return {};
}

Status unpause_run(queue::Redis& redis, const std::string& run_id) {
  auto r = redis.command({"SREM", keys::paused_runs(), run_id});
  if (!r.ok()) return r.error();
  return {};
}

Status move_first(queue::Redis& redis, const std::string& run_id, const std::string& job_id,
                  long long at_ms) {
  auto r =
      redis.command({"ZADD", keys::moved_first(), std::to_string(at_ms), run_id + " " + job_id});
  if (!r.ok()) return r.error();
  return {};
}

Result<bool> run_paused(queue::Redis& redis, const std::string& run_id) {
  auto r = redis.command({"SISMEMBER", keys::paused_runs(), run_id});
  if (!r.ok()) return r.error();
  return queue::reply_int(r->get()) == 1;
}

}  // namespace h3pipe::state
