#pragma once
// A run's receipts and its stages' completion records as Redis holds them, so that `report`,
// `profile learn` and `resume` give one answer on every host of the cluster (issue #34 P8), not
// only on the decode host whose disk holds JOB.pipeline.json.
//
// receipts hash  h3pipe:run:{RUN}:receipts  job -> the receipt's JSON text (JOB.pipeline.json as
//   the decoder wrote it), set by the decode's completion move (attach_receipt) in the same Lua
//   step as the job's `done`: the Store stays the one writer of run state.  A receipt larger than
//   kReceiptMaxBytes is kept on the decode host's disk only (the readers fall back to it).
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/queue/redis.h"
#include "common/state/state.h"

namespace h3pipe::state {

inline constexpr std::size_t kReceiptMaxBytes = 256 * 1024;

// The key of the run's receipts hash (under the run's hash tag, like every key of a run).
std::string receipts_key(const std::string& run_id);

// Adds the receipt to the move's record (op::KeepReceipt, done when the move applies and when the
// job is already past it, so a redelivered decode that rewrote the file rewrites this copy too).
// False, and nothing added, when the text is empty or larger than kReceiptMaxBytes.
bool attach_receipt(Move& m, const std::string& receipt_json);

// job id -> receipt JSON text, every receipt Redis holds for the run (empty: none).  Errors: I/O.
Result<std::map<std::string, std::string>> receipts(queue::Redis& redis, const std::string& run_id);

// The last record of `stage` in a job's history whose output was committed (output_sha256 set):
// where the stage's output lies and its hash.  nullopt: no such record.
std::optional<pb::StageRecord> completion(const std::vector<pb::StageRecord>& history,
                                          pb::Stage stage);

}  // namespace h3pipe::state
