#include "common/queue/hashes.h"

#include "common/queue/reply.h"

namespace h3pipe::queue {

std::map<std::string, std::string> as_hash(const Reply& rep) {
  std::map<std::string, std::string> m;
  const redisReply* x = rep.get();
  if (x && x->type == REDIS_REPLY_ARRAY)
    for (std::size_t i = 0; i + 1 < x->elements; i += 2)
      m[reply_str(x->element[i])] = reply_str(x->element[i + 1]);
  return m;
}

std::optional<std::string> as_value(const Reply& rep) {
  if (!rep.get() || rep.get()->type != REDIS_REPLY_STRING) return std::nullopt;
  return reply_str(rep.get());
}

Result<std::map<std::string, std::string>> hgetall(Redis& r, const std::string& key) {
  auto rep = r.command({"HGETALL", key});
  if (!rep.ok()) return rep.error();
  return as_hash(*rep);
}

Result<std::optional<std::string>> hget(Redis& r, const std::string& key,
                                        const std::string& field) {
  auto rep = r.command({"HGET", key, field});
  if (!rep.ok()) return rep.error();
  return as_value(*rep);
}

Result<bool> hsetnx(Redis& r, const std::string& key, const std::string& field,
                    const std::string& value) {
  auto rep = r.command({"HSETNX", key, field, value});
  if (!rep.ok()) return rep.error();
  return reply_int(rep->get()) == 1;
}

Result<std::vector<std::string>> zmembers(Redis& r, const std::string& key, bool descending) {
  auto rep = r.command({descending ? "ZREVRANGE" : "ZRANGE", key, "0", "-1"});
  if (!rep.ok()) return rep.error();
  std::vector<std::string> out;
  const redisReply* x = rep->get();
  if (x && x->type == REDIS_REPLY_ARRAY)
    for (std::size_t i = 0; i < x->elements; ++i) out.push_back(reply_str(x->element[i]));
  return out;
}

Result<std::vector<std::optional<std::string>>> pipeline_values(
    Redis& r, const std::vector<std::vector<std::string>>& cmds) {
  auto rep = r.pipeline(cmds);
  if (!rep.ok()) return rep.error();
  std::vector<std::optional<std::string>> out;
  for (const auto& x : *rep) out.push_back(as_scalar(x));
  return out;
}

std::optional<std::string> as_scalar(const Reply& x) {
  if (x && (x->type == REDIS_REPLY_STRING || x->type == REDIS_REPLY_STATUS))
    return reply_str(x.get());
  if (x && x->type == REDIS_REPLY_INTEGER) return std::to_string(x->integer);
  return std::nullopt;
}

}  // namespace h3pipe::queue
