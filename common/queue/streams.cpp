#include "common/queue/streams.h"

#include <cstdlib>

#include "common/core/error_codes.h"
#include "common/queue/reply.h"

namespace h3pipe::queue {
namespace {

// [id, [field, value, ...]] (a deleted entry's fields are nil: skipped).
std::optional<StreamEntry> entry(const redisReply* e) {
  if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 2) return std::nullopt;
  StreamEntry out{reply_str(e->element[0]), {}};
  const redisReply* kv = e->element[1];
  if (!kv || kv->type != REDIS_REPLY_ARRAY) return std::nullopt;
  for (std::size_t i = 0; i + 1 < kv->elements; i += 2)
    out.fields.emplace_back(reply_str(kv->element[i]), reply_str(kv->element[i + 1]));
  return out;
}

std::vector<StreamEntry> entries(const redisReply* x) {
  std::vector<StreamEntry> out;
  if (x && x->type == REDIS_REPLY_ARRAY)
    for (std::size_t i = 0; i < x->elements; ++i)
      if (auto e = entry(x->element[i])) out.push_back(std::move(*e));
  return out;
}

// XREAD/XREADGROUP: [[key, [entries]], ...] (RESP2) or nil after a timeout.
std::vector<std::pair<std::string, std::vector<StreamEntry>>> per_key(const redisReply* x) {
  std::vector<std::pair<std::string, std::vector<StreamEntry>>> out;
  if (!x || x->type != REDIS_REPLY_ARRAY) return out;
  for (std::size_t i = 0; i < x->elements; ++i) {
    const redisReply* k = x->element[i];
    if (!k || k->type != REDIS_REPLY_ARRAY || k->elements < 2) continue;
    out.emplace_back(reply_str(k->element[0]), entries(k->element[1]));
  }
  return out;
}

std::string as_string(const redisReply* x) {
  if (!x) return "";
  if (x->type == REDIS_REPLY_INTEGER) return std::to_string(x->integer);
  if (x->type == REDIS_REPLY_NIL) return "";
  return reply_str(x);
}

}  // namespace

std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_stream_id(const std::string& id) {
  if (id.empty() || id.size() > 41) return std::nullopt;
  const auto dash = id.find('-');
  const std::string ms = id.substr(0, dash);
  const std::string seq = dash == std::string::npos ? "0" : id.substr(dash + 1);
  const auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!digits(ms) || !digits(seq)) return std::nullopt;
  return std::pair{std::strtoull(ms.c_str(), nullptr, 10), std::strtoull(seq.c_str(), nullptr, 10)};
}

Result<std::vector<std::pair<std::string, std::vector<StreamEntry>>>> xread(
    Redis& r, const std::vector<std::pair<std::string, std::string>>& key_after, int count,
    int block_ms) {
  std::vector<std::string> argv{"XREAD", "COUNT", std::to_string(count)};
  if (block_ms >= 0) argv.insert(argv.end(), {"BLOCK", std::to_string(block_ms)});
  argv.push_back("STREAMS");
  for (const auto& [k, _] : key_after) argv.push_back(k);
  for (const auto& [_, id] : key_after) argv.push_back(id);
  auto rep = r.command(argv);
  if (!rep.ok()) return rep.error();
  return per_key(rep->get());
}

std::vector<StreamEntry> as_entries(const Reply& x) {
  return entries(x.get());
}

Result<std::vector<StreamEntry>> xrange_after(Redis& r, const std::string& key,
                                              const std::string& after, const std::string& end,
                                              int count) {
  auto rep = r.command(
      {"XRANGE", key, after == "0-0" ? "-" : "(" + after, end, "COUNT", std::to_string(count)});
  if (!rep.ok()) return rep.error();
  return entries(rep->get());
}

Status xgroup_create(Redis& r, const std::string& stream, const std::string& group,
                     const std::string& id) {
  auto rep = r.command({"XGROUP", "CREATE", stream, group, id, "MKSTREAM"});
  if (!rep.ok() && rep.error().message.find("BUSYGROUP") == std::string::npos) return rep.error();
  return {};
}

Result<std::vector<StreamEntry>> xreadgroup(Redis& r, const std::string& stream,
                                            const std::string& group, const std::string& consumer,
                                            int count, int block_ms) {
  auto rep = r.command({"XREADGROUP", "GROUP", group, consumer, "COUNT", std::to_string(count),
                        "BLOCK", std::to_string(block_ms), "STREAMS", stream, ">"});
  if (!rep.ok()) return rep.error();
  auto keys = per_key(rep->get());
  return keys.empty() ? std::vector<StreamEntry>{} : std::move(keys[0].second);
}

Result<Claimed> xautoclaim(Redis& r, const std::string& stream, const std::string& group,
                           const std::string& consumer, long long min_idle_ms,
                           const std::string& start, int count) {
  auto rep = r.command({"XAUTOCLAIM", stream, group, consumer, std::to_string(min_idle_ms), start,
                        "COUNT", std::to_string(count)});
  if (!rep.ok()) return rep.error();
  const redisReply* x = rep->get();
  if (!x || x->type != REDIS_REPLY_ARRAY || x->elements < 2)
    return make_error(errc::redis::kReply, "XAUTOCLAIM {}: unexpected reply", stream);
  return Claimed{entries(x->element[1]), reply_str(x->element[0])};
}

Result<std::vector<GroupConsumer>> xinfo_consumers(Redis& r, const std::string& stream,
                                                   const std::string& group) {
  auto rep = r.command({"XINFO", "CONSUMERS", stream, group});
  if (!rep.ok()) return rep.error();
  const redisReply* x = rep->get();
  if (!x || x->type != REDIS_REPLY_ARRAY)
    return make_error(errc::redis::kReply, "XINFO CONSUMERS {} {}: unexpected reply", stream,
                      group);
  std::vector<GroupConsumer> out;
  for (std::size_t n = 0; n < x->elements; ++n) {
    const redisReply* c = x->element[n];
    GroupConsumer g;
    for (std::size_t i = 0; c && c->type == REDIS_REPLY_ARRAY && i + 1 < c->elements; i += 2) {
      const std::string k = reply_str(c->element[i]);
      if (k == "name") g.name = reply_str(c->element[i + 1]);
      if (k == "pending") g.pending = reply_int(c->element[i + 1]);
      if (k == "idle") g.idle_ms = reply_int(c->element[i + 1]);
    }
    out.push_back(std::move(g));
  }
  return out;
}

Result<long long> int_command(Redis& r, const std::vector<std::string>& argv) {
  auto rep = r.command(argv);
  if (!rep.ok()) return rep.error();
  return reply_int(rep->get());
}

Result<std::vector<std::string>> transaction(Redis& r,
                                             const std::vector<std::vector<std::string>>& cmds) {
  std::vector<std::vector<std::string>> all{{"MULTI"}};
  all.insert(all.end(), cmds.begin(), cmds.end());
  all.push_back({"EXEC"});
  auto reps = r.pipeline(all);
  if (!reps.ok()) return reps.error();
  const redisReply* x = reps->back().get();
  if (!x || x->type != REDIS_REPLY_ARRAY || x->elements != cmds.size())
    return make_error(errc::redis::kReply, "MULTI/EXEC of {} commands: the transaction was not run",
                      cmds.size());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < x->elements; ++i) {
    const redisReply* e = x->element[i];
    if (e && e->type == REDIS_REPLY_ERROR)
      return make_error(errc::redis::kError, "{} in a transaction: {}", cmds[i][0], reply_str(e));
    out.push_back(as_string(e));
  }
  return out;
}

}  // namespace h3pipe::queue
