#pragma once
// What the claim order (claim_order_lua.inc's h3o_pick; its C++ twin dispatch::pick) reads of a
// stage stream, in one round trip, as plain values: the head of the stream, the entries a
// consumer holds, the fair share's hash, the jobs moved first, the paused runs and Redis's clock.
// h3pipe-api ranks a queued job with it (the Video's queue_position, #37).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/queue/redis.h"
#include "common/queue/streams.h"

namespace h3pipe::queue {

struct ClaimView {
  std::vector<StreamEntry> entries;          // the first `count` entries, in stream order
  std::set<std::string> pending;             // ids a consumer holds (XPENDING), among the first
  std::map<std::string, std::string> share;  // keys::claim_share(stream): "u:USER", "floor"
  std::map<std::string, long long> moved;    // keys::moved_first(): "RUN JOB" -> move ms
  std::set<std::string> paused;              // keys::paused_runs()
  long long now_ms = 0;                      // Redis's TIME
  bool full = false;                         // `count` entries were read: more may follow
};

// The view of `stream` as consumer group `group` sees it.  A stream or group that does not exist
// yet: an empty view.  Errors: I/O.
Result<ClaimView> claim_view(Redis& r, const std::string& stream, const std::string& group,
                             int count);

}  // namespace h3pipe::queue
