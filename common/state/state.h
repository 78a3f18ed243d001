#pragma once
// Run and job state in Redis (every key of a run under the hash tag {RUN}, see queue/keys.h).
// A job's state is written only here, through the job state machine (job_state.h): Store::apply
// checks the move against its table and applies it, the task's ack and what the move does
// (move_ops.h, turned into commands only here) in one Lua script, so a refused move changes
// nothing but the run's `illegal` count.
//
// job hash fields:  state (queued|encode|sample|transfer|decode|done|failed|cancelled),
//   spec (canonical JSON), error, submitted_ms, attempts:<stage>, exec:<stage> (runtime started),
//   done:<stage> (output committed), wrote:<stage> (committed by this execution), task:encode.
// run hash fields:  created_ms, total, done, failed, jobs_cancelled, cancelled (the flag),
//   n:<state> (jobs in each state, kept by every move), illegal, illegal:<from>><to>.
// run expected set: the job ids `h3pipe run` submitted (a resubmission adds nothing).
// history list:     one StageRecord (proto3 JSON) per completed stage, in order.
// refused list:     submissions refused beside the run (a job id that exists, with another or
//   an invalid spec): {"submission", "job_id", "reason", "at_ms"} JSON, the newest kRefusedKept;
//   the run hash's `refused` counts them all.  Never a job: the run's verdict ignores them.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/queue/events.h"
#include "common/queue/queue.h"
#include "common/state/job_state.h"
#include "common/state/move_ops.h"

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
  long long created_ms = 0, expected = 0, total = 0, done = 0, failed = 0, cancelled_jobs = 0,
            illegal = 0;
  long long refused = 0;                      // submissions refused beside the run (not jobs)
  bool cancelled = false;                     // the run was cancelled (h3pipe cancel)
  std::map<std::string, long long> in_state;  // state -> jobs in it now
  // Jobs at or past each stage ("encode", "sample", "decode"), from in_state: jobs, never
  // executions.
  std::map<std::string, long long> stage_jobs() const;
  bool finished() const {
    return total > 0 && total >= expected && done + failed + cancelled_jobs >= total;
  }
};

// A submission refused beside a run (Store::refuse_submission).
struct Refusal {
  std::string submission;  // the h3pipe:submit entry id
  std::string job_id;
  std::string reason;
  long long at_ms = 0;
};
inline constexpr int kRefusedKept = 100;

// The entry after a started one on its stream, seen by the start (Store::start_attempt with
// peek): its job's keys, so that the next claim may start it in the same step (claim_and_start).
struct NextEntry {
  std::string entry_id, run_id, job_id;
};

// What a worker learns when it starts an attempt (Store::start_attempt).
struct Attempt {
  bool refused = false;  // the job is not at this stage (done, failed, cancelled, elsewhere)
  JobState from = JobState::kNone;  // the job's state before the start
  long long number = 0;             // 1 on the first delivery
  bool cancelled = false;           // the run was cancelled
  std::string last_error;           // the job's error field (the reason for a dead letter)
  std::optional<NextEntry> next;    // asked with peek: the stream's next entry, when there is one
};

// The task entry a move acks and deletes in the same step, only while it is still this
// consumer's (a worker whose lease lapsed must not complete what another now owns).
struct QueueAck {
  std::string stream, group, consumer, entry_id;
  // The claim made with it (claim_and_start, Move::then_claim) takes new entries in this claim
  // order (dispatch::ClaimOrder::encode(); "": XREADGROUP >), updating the share hash.
  std::string claim_order{}, share_key{};
};

// An entry claimed by Store::claim_and_start; `attempt` is set when it was started in the same
// step (it was the entry expected), else its start is the caller's.
struct ClaimedStart {
  std::string entry_id, payload;
  std::optional<Attempt> attempt;
  bool reclaimed = false;  // another consumer's expired lease (Move::then_claim's sweep)
};

// The claim right after a completion, made in the completion's own step (Move::then_claim): the
// consumer's next entry as StageQueue::claim() takes it once its own pending entries are drained
// (an expired lease first when a sweep is due, then a new entry), started in the same step when
// it is `expected`.  Only for a pool whose dispatch answer needs nothing the completion changes.
struct ClaimNext {
  NextEntry expected;  // entry_id empty: none known (the claimed entry's start is the caller's)
  pb::Stage stage = pb::STAGE_UNSPECIFIED;
  int sweep_idle_ms = 0;  // > 0: a sweep is due (XAUTOCLAIM of entries idle this long first)
};

// One move of the state machine with what goes with it.
struct Move {
  std::string run_id, job_id;
  Event event = Event::kAdvance;
  JobState to = JobState::kNone;
  std::optional<QueueAck> ack;
  // What the move does beside the state change (move_ops.h), in order: `record` when the move
  // applies or the job is already past it (the stage's history and counters, the receipt);
  // `next` only when it applies (the next stage's task, the reason, a dead letter).
  Ops record;
  Ops next;
  bool only_while_cancelled = false;  // a cancel: applies only while the run's flag is still set
  // With an ack: the consumer's next claim in the same script, whatever the move's code (it is
  // the claim the worker would make right after).  Moved::claimed holds what it took.
  std::optional<ClaimNext> then_claim;
  // The run's events this move announces (#37, common/queue/events.h): XADDed to the run's stream
  // (and a terminal one to keys::terminal_events() too, with `run`) in the move's own script,
  // only when the move applies, so a crash neither loses nor repeats one.  The move builders set
  // type, job, stage and reason; the worker adds host, pool and attempt.
  std::vector<queue::events::Event> announce{};
};

enum class Applied {
  kLeaseLost = 0,  // the entry is no longer ours: nothing happened
  kApplied = 1,
  kRefused = 2,       // illegal here: counted; the entry (if any) is acked, nothing else happens
  kAlreadyPast = 3,   // entry acked, record kept, state and next untouched
  kNotCancelled = 4,  // a cancel whose run is no longer cancelled (resumed): nothing happened
};
struct Moved {
  Applied code = Applied::kLeaseLost;
  JobState from = JobState::kNone;
  // Replicas that acknowledged an applied completion (redis.wait_replicas; -1: not asked).
  int replicas = -1;
  // Move::then_claim: the entry claimed (none: nothing to claim).
  std::optional<ClaimedStart> claimed{};
};
const char* applied_name(Applied a);

std::string new_run_id();  // r-YYYYMMDD-HHMMSS-xxxxxxxxxxxx (UTC, 48 random bits)
long long now_ms();

class Store final {
 public:
  explicit Store(queue::Redis& redis) : redis_(redis) {}

  // Registers a run and the job ids `h3pipe run` is about to submit (the run is finished once
  // each of them is in it); a second call with the same ids changes nothing.
  Status create_run(const std::string& run_id, const std::vector<std::string>& job_ids);
  // Registers a job and enqueues its encode task in one transaction.  Returns false (and
  // changes nothing) if the job id already exists in the run.  `stream`: where the task entry
  // goes ("": the encode stream; a held quota's keys::held(user), state/quota.h).
  Result<bool> accept_job(const std::string& run_id, const pb::JobSpec& spec,
                          const std::string& encode_payload, const std::string& stream = "");
  // Records a submission that failed validation: a failed job with the reason.
  Status reject_job(const std::string& run_id, const std::string& job_id,
                    const std::string& reason);
  // Records a submission refused because its job id already exists in the run (another spec, or
  // one that does not validate): beside the run, never as a job, so the run's verdict, a finished
  // run's included, stays what it was.  `refused` counts it; the list keeps the newest.
  Status refuse_submission(const std::string& run_id, const Refusal& r);
  Result<std::vector<Refusal>> refused(const std::string& run_id);
  // Start of one attempt, in one round trip: the start move (refused unless the job is at this
  // stage; then the entry, when given, is acked: a stale or cancelled task is dropped),
  // attempts:<stage>++, and the run's cancelled flag and the job's last error read back.
  // With peek (and an entry), the attempt also names the stream's next entry (Attempt::next).
  Result<Attempt> start_attempt(const std::string& run_id, const std::string& job_id, pb::Stage s,
                                const std::optional<QueueAck>& entry = std::nullopt,
                                bool peek = false);
  // The claim of the next new entry of q's stream for q's consumer (XREADGROUP >, not blocking)
  // and, when it is `expected` (q.entry_id is not used), its start move, in one round trip: the
  // two steps between a worker's tasks that used to be two.  nullopt: nothing new on the stream.
  // The same moves as claim() + start_attempt(): a stale task is refused and acked, attempts++.
  Result<std::optional<ClaimedStart>> claim_and_start(const QueueAck& q, const NextEntry& expected,
                                                      pb::Stage s);
  // SCRIPT LOADs the state machine's scripts, so a user that may only EVALSHA (the operator's
  // `resume`) finds them in Redis's cache; the encoder's ingest calls it at start.
  Status load_scripts();
  // Applies one move of the state machine (see Move, Applied); with then_claim (and an ack), the
  // claim after it in the same script, the WAIT after it covering both.
  Result<Moved> apply(const Move& m);
  // exec:<stage>++ (the runtime starts).  Sent without waiting for the reply (Redis::send): it
  // reaches Redis before the runtime starts, and costs no round trip.
  Status note_exec(const std::string& run_id, const std::string& job_id, pb::Stage s);
  Status note_error(const std::string& run_id, const std::string& job_id, pb::Stage s,
                    const std::string& reason);
  // Scale-in: the task was stopped and handed back (another worker takes it at once):
  // handed_back:<stage>++ and the job's error set to `why`, in one round trip (pipelined).
  Status note_handed_back(const std::string& run_id, const std::string& job_id, pb::Stage s,
                          const std::string& why);
  // Whether the job's hash exists (EXISTS).
  Result<bool> job_exists(const std::string& run_id, const std::string& job_id);
  // The job's submitted spec as stored (canonical JSON; "" when the job or the field is missing).
  Result<std::string> job_spec(const std::string& run_id, const std::string& job_id);
  Result<bool> cancelled(const std::string& run_id);
  Status cancel(const std::string&
                    run_id);  // sets the run's flag; workers cancel its jobs as they reach them
  Result<std::vector<pb::StageRecord>> history(const std::string& run_id,
                                               const std::string& job_id);

  Result<RunStatus> run_status(const std::string& run_id);
  Result<std::vector<JobStatus>> jobs(const std::string& run_id);
  Result<std::vector<std::string>> runs(std::size_t limit = 20);

  // The moves every writer uses.  advance: history += rec, done:<stage>++, state -> to, and
  // the next task XADDed to next_stream when given.
  static Move advance_move(const std::string& run_id, const std::string& job_id,
                           const pb::StageRecord& rec, JobState to,
                           const std::string& next_stream = "",
                           const std::string& next_payload = "");
  // Adds to a move's record: wrote:<stage>++, the executions that committed the stage's output
  // (the chaos test's duplicate check), counted even when the job is already past it.
  static void count_written(Move& m, pb::Stage s);
  // fail: state -> failed with "<stage>: reason"; dead_letter_payload (when set) also files the
  // task on h3pipe:dead with the reason (queue::dead_letter_record).
  static Move fail_move(const std::string& run_id, const std::string& job_id, pb::Stage s,
                        const std::string& reason,
                        const std::optional<std::string>& dead_letter_payload = std::nullopt);
  // cancel: state -> cancelled with the reason, only while the run is still cancelled.
  static Move cancel_move(const std::string& run_id, const std::string& job_id, pb::Stage s);
  // reopen (resume): state -> to, attempts and error cleared, the task XADDed when given.
  static Move reopen_move(const std::string& run_id, const std::string& job_id, JobState to,
                          const std::string& stream = "", const std::string& payload = "");

 private:
  queue::Redis& redis_;
};

}  // namespace h3pipe::state
