#include "common/state/transfer_facts.h"

#include "common/queue/keys.h"
#include "common/queue/reply.h"
#include "common/state/state.h"

namespace h3pipe::state {

Result<TransferFacts> transfer_facts(queue::Redis& redis, const std::string& run_id,
                                     const std::string& job_id) {
  auto r = redis.pipeline(
      {{"HGET", keys::job(run_id, job_id), "state"}, {"HGET", keys::job(run_id, job_id), "spec"}});
  if (!r.ok()) return r.error();
  TransferFacts f;
  f.exists = (*r)[0].get()->type != REDIS_REPLY_NIL;
  f.state = queue::reply_str((*r)[0].get());
  f.spec_json = queue::reply_str((*r)[1].get());
  if (!f.exists) return f;
  auto h = Store(redis).history(run_id, job_id);
  if (!h.ok()) return h.error();
  for (const auto& rec : *h)
    if (rec.stage() == pb::STAGE_SAMPLE) f.sampled_on = rec.host();
  return f;
}

}  // namespace h3pipe::state
