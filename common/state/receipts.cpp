#include "common/state/receipts.h"

#include "common/queue/keys.h"
#include "common/queue/reply.h"

namespace h3pipe::state {

std::string receipts_key(const std::string& run_id) {
  return keys::run(run_id) + ":receipts";
}

bool attach_receipt(Move& m, const std::string& receipt_json) {
  if (receipt_json.empty() || receipt_json.size() > kReceiptMaxBytes) return false;
  m.record.push_back(op::KeepReceipt{receipt_json});
  return true;
}

Result<std::map<std::string, std::string>> receipts(queue::Redis& redis,
                                                    const std::string& run_id) {
  auto r = redis.command({"HGETALL", receipts_key(run_id)});
  if (!r.ok()) return r.error();
  std::map<std::string, std::string> out;
  const redisReply* h = r->get();
  for (std::size_t i = 0; h && i + 1 < h->elements; i += 2)
    out[queue::reply_str(h->element[i])] = queue::reply_str(h->element[i + 1]);
  return out;
}

std::optional<pb::StageRecord> completion(const std::vector<pb::StageRecord>& history,
                                          pb::Stage stage) {
  for (auto it = history.rbegin(); it != history.rend(); ++it)
    if (it->stage() == stage && !it->output_sha256().empty()) return *it;
  return std::nullopt;
}

}  // namespace h3pipe::state
