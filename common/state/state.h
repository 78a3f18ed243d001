#pragma once
// Run and job state in Redis (every key of a run under the hash tag {RUN}, see queue/keys.h).
//
// job hash fields:  state (queued|encode|sample|transfer|decode|done|failed|cancelled),
//   spec (canonical JSON), error, submitted_ms, attempts:<stage>, exec:<stage> (runtime started),
//   done:<stage> (output committed), task:<stage> (stream id of the outstanding task).
// run hash fields:  created_ms, expected, total, done, failed, cancelled, count:<stage>.
// history list:     one StageRecord (proto3 JSON) per completed stage, in order.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/queue/queue.h"

namespace h3pipe::state {

const char* stage_key(pb::Stage s);  // "encode", "sample", "transfer", "decode"

struct JobStatus {
  std::string job_id;
  std::string state;
  std::string error;
  std::map<std::string, std::string> fields;  // the whole hash
};

struct RunStatus {
  std::string run_id;
  long long created_ms = 0, expected = 0, total = 0, done = 0, failed = 0;
  bool cancelled = false;
  std::map<std::string, long long> stage_done;  // stage -> jobs past it
  bool finished() const { return total > 0 && total >= expected && done + failed >= total; }
};

// What a worker learns when it starts an attempt (Store::start_attempt).
struct Attempt {
  long long number = 0;    // 1 on the first delivery
  bool cancelled = false;  // the run was cancelled
  std::string last_error;  // the job's error field (the reason for a dead letter)
};

std::string new_run_id();  // r-YYYYMMDD-HHMMSS-xxxxxx (UTC, random suffix)
long long now_ms();

class Store final {
 public:
  explicit Store(queue::Redis& redis) : redis_(redis) {}

  Status create_run(const std::string& run_id, long long expected);
  // Registers a job and enqueues its encode task in one transaction.  Returns false (and
  // changes nothing) if the job id already exists in the run.
  Result<bool> accept_job(const std::string& run_id, const pb::JobSpec& spec, const std::string& encode_payload);
  // Records a submission that failed validation: a failed job with the reason.
  Status reject_job(const std::string& run_id, const std::string& job_id, const std::string& reason);
  // Start of one attempt, in one round trip: attempts:<stage>++ and state -> stage, and reads
  // the run's cancelled flag and the job's last error.
  Result<Attempt> start_attempt(const std::string& run_id, const std::string& job_id, pb::Stage s);
  // start_attempt's number alone.
  Result<long long> begin_attempt(const std::string& run_id, const std::string& job_id, pb::Stage s);
  // exec:<stage>++ (the runtime starts).  Sent without waiting for the reply (Redis::send): it
  // reaches Redis before the runtime starts, and costs no round trip.
  Status note_exec(const std::string& run_id, const std::string& job_id, pb::Stage s);
  Status note_error(const std::string& run_id, const std::string& job_id, pb::Stage s, const std::string& reason);
  Result<bool> cancelled(const std::string& run_id);
  Status cancel(const std::string& run_id);
  Result<std::vector<pb::StageRecord>> history(const std::string& run_id, const std::string& job_id);

  Result<RunStatus> run_status(const std::string& run_id);
  Result<std::vector<JobStatus>> jobs(const std::string& run_id);
  Result<std::vector<std::string>> runs(std::size_t limit = 20);

  // Follow-up commands (run atomically by StageQueue::complete) for a finished stage:
  // history += record, done:<stage>++, run count:<stage>++, state -> next_state; when next is
  // non-empty it is XADDed to next_stream.  final_stage also increments run done.
  static queue::Commands complete_cmds(const std::string& run_id, const std::string& job_id,
                                       const pb::StageRecord& rec, const std::string& next_state,
                                       const std::string& next_stream, const std::string& next_payload,
                                       bool final_stage);
  static queue::Commands fail_cmds(const std::string& run_id, const std::string& job_id,
                                   pb::Stage s, const std::string& reason);
  static queue::Commands cancel_cmds(const std::string& run_id, const std::string& job_id);

 private:
  queue::Redis& redis_;
};

}  // namespace h3pipe::state
