#include "common/queue/claim_view.h"

#include "common/queue/keys.h"
#include "common/queue/reply.h"

namespace h3pipe::queue {

Result<ClaimView> claim_view(Redis& r, const std::string& stream, const std::string& group,
                             int count) {
  const std::string n = std::to_string(count);
  std::vector<std::vector<std::string>> cmds = {
      {"XRANGE", stream, "-", "+", "COUNT", n},
      {"HGETALL", keys::claim_share(stream)},
      {"ZRANGE", keys::moved_first(), "0", "-1", "WITHSCORES"},
      {"SMEMBERS", keys::paused_runs()},
      {"TIME"},
      {"XPENDING", stream, group, "-", "+", n}};
  auto rep = r.pipeline(cmds);
  if (!rep.ok() && rep.error().message.find("NOGROUP") != std::string::npos) {
    cmds.pop_back();  // no group yet: nothing is held
    rep = r.pipeline(cmds);
  }
  if (!rep.ok()) return rep.error();
  ClaimView v;
  v.entries = as_entries((*rep)[0]);
  if (v.entries.empty()) return v;
  v.full = static_cast<int>(v.entries.size()) == count;
  v.share = as_hash((*rep)[1]);
  for (const auto& [k, s] : as_hash((*rep)[2])) v.moved[k] = std::strtoll(s.c_str(), nullptr, 10);
  if (const redisReply* x = (*rep)[3].get(); x && x->type == REDIS_REPLY_ARRAY)
    for (std::size_t i = 0; i < x->elements; ++i) v.paused.insert(reply_str(x->element[i]));
  if (const redisReply* x = (*rep)[4].get(); x && x->type == REDIS_REPLY_ARRAY && x->elements == 2)
    v.now_ms = std::strtoll(reply_str(x->element[0]).c_str(), nullptr, 10) * 1000 +
               std::strtoll(reply_str(x->element[1]).c_str(), nullptr, 10) / 1000;
  if (rep->size() > 5)
    if (const redisReply* x = (*rep)[5].get(); x && x->type == REDIS_REPLY_ARRAY)
      for (std::size_t i = 0; i < x->elements; ++i)
        if (const redisReply* e = x->element[i]; e->type == REDIS_REPLY_ARRAY && e->elements)
          v.pending.insert(reply_str(e->element[0]));
  return v;
}

}  // namespace h3pipe::queue
