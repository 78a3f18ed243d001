#pragma once
// What `h3pipe resume RUN` reads and writes in Redis before it re-enqueues anything
// (docs/design.md, rule 1: resume is the idempotence check over every job).  The CLI names the
// stage streams (they follow from the config and worker/, which this module does not use),
// checks each job's artifacts and re-enqueues through Store::reopen_move; what Redis says of the
// run, its jobs and their outstanding tasks is read here, in the state module (issue #26 item 2).
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/queue/redis.h"
#include "common/state/state.h"

namespace h3pipe::state {

// One job of the run as resume sees it.
struct ResumeJob {
  std::string job_id;
  std::string state;  // the job hash's state field (job_state.h names)
  // The submitted spec; nullopt when there is none to resume from (rejected at submission, or a
  // spec field that no longer parses).
  std::optional<pb::JobSpec> spec;
  // A task of this job is on one of the streams and the job is not terminal: that task will run,
  // so resume leaves the job to it.  A terminal job's (failed, cancelled, done with its files
  // gone) task was acked with its last move, so one still there is stale and does not count (the
  // start move will drop it).
  bool left_to_its_task = false;
};

// One resume of a run at a time (issue #35 D12: two concurrent resumes both found a job's stage
// missing and enqueued it twice).  A string key beside the run, SET NX PX with a random token;
// refreshed while the resume works (refresh: PEXPIRE after checking the token) and deleted when
// the holder is destroyed, only if it still holds the token.  A resume killed outright leaves it
// to expire after kTtl.  Not thread-safe; the connection must outlive the lock.
class ResumeLock final {
 public:
  static constexpr std::chrono::milliseconds kTtl{30000};
  // The lock's key: keys::run(run_id) + ":resume-lock" (the run's hash tag; the operator's ACL
  // grants get/set/pexpire/del on these keys only, configs/redis/users.acl).
  static std::string key(const std::string& run_id);
  // Waits up to `wait` (polling) while another resume holds it.  Errors: state.refused naming
  // the run and the key when it stays held; I/O.
  static Result<ResumeLock> acquire(queue::Redis& redis, const std::string& run_id,
                                    std::chrono::milliseconds wait = kTtl +
                                                                     std::chrono::seconds(5));
  // Extends the lock when a third of kTtl has passed since it was taken or last extended; an
  // error (state.refused) when it is no longer this holder's (it expired and another took it).
  Status refresh();
  ResumeLock(ResumeLock&& o) noexcept;
  ResumeLock& operator=(ResumeLock&&) = delete;
  ResumeLock(const ResumeLock&) = delete;
  ~ResumeLock();

 private:
  ResumeLock(queue::Redis& r, std::string key, std::string token)
      : redis_(&r), key_(std::move(key)), token_(std::move(token)) {}
  queue::Redis* redis_;
  std::string key_, token_;
  std::chrono::steady_clock::time_point extended_ = std::chrono::steady_clock::now();
};

struct ResumePlan {
  RunStatus run;  // as it was before the resume (run.cancelled: the run had been cancelled)
  std::vector<ResumeJob> jobs;  // every job of the run, in submission order
  // Held from before the run is read until the plan is destroyed (after the caller re-enqueued
  // what was missing); the caller refreshes it while it works.
  std::optional<ResumeLock> lock;
};

// Clears the run's cancel flag (the counterpart of Store::cancel; HSET run cancelled 0).  From
// then on a worker that reaches one of the run's tasks runs it: a cancel move whose flag is gone
// is not applied (Move::only_while_cancelled), so nothing resumed is dropped.
//
// Why not a Move through Store::apply: a Move is one job's transition, checked against the job
// state table on the job's hash; the flag is the run's, must be cleared before the jobs are read
// (and for a run that re-enqueues nothing), and is not a job state.  It is written here, beside
// the Store, like Store::cancel writes it, and nowhere above the state module.
Status uncancel(queue::Redis& redis, const std::string& run_id);

// The job ids of run_id that have a task on one of `streams`.  Stage streams hold only unacked
// entries (acked ones are deleted), so these are the tasks a worker will still take.  Entries of
// other runs, entries without a "task" field and payloads that are not a StageTask are ignored; a
// stream that cannot be read (missing, another type) holds none.  Errors: I/O only.
Result<std::set<std::string>> outstanding_jobs(queue::Redis& redis, const std::string& run_id,
                                               const std::vector<std::string>& streams);

// The start of a resume, in this order: the run's ResumeLock is taken (waiting for another
// resume of the run to finish), the run must exist (errc::run::kUnknown, and nothing is written),
// its cancel flag is cleared (uncancel), then its jobs and the outstanding tasks on `streams` are
// read.  The plan holds the lock.
Result<ResumePlan> begin_resume(queue::Redis& redis, const std::string& run_id,
                                const std::vector<std::string>& streams);

}  // namespace h3pipe::state
