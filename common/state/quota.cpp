#include "common/state/quota.h"

#include <nlohmann/json.hpp>

#include "common/core/json_parse.h"
#include "common/queue/keys.h"
#include "common/queue/queue.h"

namespace h3pipe::state {

Result<long long> user_jobs_admitted(queue::Redis& redis, const std::vector<std::string>& streams,
                                     const std::string& user) {
  long long n = 0;
  for (const auto& s : streams) {
    auto es = queue::read_range(redis, s, "-", "+");
    if (!es.ok()) return es.error();
    for (const auto& e : *es)
      if (auto it = e.fields.find("user"); it != e.fields.end() && it->second == user) ++n;
  }
  return n;
}

Result<long long> user_jobs_in_flight(queue::Redis& redis, const std::vector<std::string>& streams,
                                      const std::string& user) {
  auto admitted = user_jobs_admitted(redis, streams, user);
  if (!admitted.ok()) return admitted.error();
  long long n = *admitted;
  auto held = held_tasks(redis, user);
  if (!held.ok()) return held.error();
  n += *held;
  auto subs = queue::read_range(redis, keys::submit(), "-", "+");
  if (!subs.ok()) return subs.error();
  for (const auto& e : *subs) {
    auto it = e.fields.find("spec");
    if (it == e.fields.end()) continue;
    std::string why;
    const auto j = json_reader::parse_limited(it->second, {}, &why).value_or(nlohmann::json());
    if (j.is_object() && j.value("user", std::string()) == user) ++n;
  }
  return n;
}

Result<long long> held_tasks(queue::Redis& redis, const std::string& user) {
  auto n = redis.command({"XLEN", keys::held(user)});
  if (!n.ok()) return n.error();
  return queue::reply_int(n->get());
}

Result<std::string> accept_stream(queue::Redis& redis, const std::vector<std::string>& streams,
                                  const std::string& user, long long max_jobs) {
  auto held = held_tasks(redis, user);
  if (!held.ok()) return held.error();
  if (*held > 0) return keys::held(user);
  auto n = user_jobs_admitted(redis, streams, user);
  if (!n.ok()) return n.error();
  return *n >= max_jobs ? keys::held(user) : keys::stream("encode");
}

namespace {

// KEYS: held stream, encode stream, the job's hash.  ARGV: the held entry expected first.
// Moves it (when it is still first) to the encode stream; returns 1, or 0 when it was not.
constexpr const char* kReleaseScript = R"LUA(
local e = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #e == 0 or e[1][1] ~= ARGV[1] then return 0 end
local id = redis.call('XADD', KEYS[2], '*', unpack(e[1][2]))
redis.call('XDEL', KEYS[1], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('HSET', KEYS[3], 'task:encode', id) end
return 1
)LUA";

}  // namespace

Result<long long> release_held(queue::Redis& redis, const std::vector<std::string>& streams,
                               const std::string& user, long long max_jobs) {
  auto held = held_tasks(redis, user);
  if (!held.ok()) return held.error();
  if (*held == 0) return 0;
  auto n = user_jobs_admitted(redis, streams, user);
  if (!n.ok()) return n.error();
  long long moved = 0;
  for (long long room = max_jobs - *n; room > 0; --room) {
    auto first = queue::read_range(redis, keys::held(user), "-", "+", 1);
    if (!first.ok()) return first.error();
    if (first->empty()) break;
    const auto& e = first->front();
    auto field = [&](const char* k) {
      auto it = e.fields.find(k);
      return it == e.fields.end() ? std::string() : it->second;
    };
    auto r = redis.eval(
        kReleaseScript,
        {keys::held(user), keys::stream("encode"), keys::job(field("run"), field("job"))}, {e.id});
    if (!r.ok()) return r.error();
    if (queue::reply_int(r->get()) == 1) ++moved;
  }
  return moved;
}

}  // namespace h3pipe::state
