#pragma once
// The stage engine: what a stage worker decides for one claimed task, with everything it talks
// to behind an interface so that its rules are tested without a Redis or a real disk.
//
//   parse -> start (the state machine's start move: a stale or cancelled job's task is dropped)
//   -> cancelled run? -> delivery budget -> paths and profile -> output already there? (skip)
//   -> input verified (decode: fits the job's latent profile) -> runtime -> outcome
//
// Every outcome is one of Outcome and is counted: completed, skipped, retried (with backoff),
// dead-lettered, cancelled, refused (the state machine said no), lease lost.  The live worker
// (worker.cpp) implements the interfaces with Redis (redis_tasks.h), the artifact files
// (disk_files.h) and the runtimes; unit tests with memory (tests/support/fake_stage_ports.h) and a
// settable clock.
#include <array>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/config/stages.h"
#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"
#include "common/queue/events.h"
#include "common/queue/keys.h"
#include "common/runtime/runtime.h"
#include "common/state/state.h"

namespace h3pipe::worker {

enum class Outcome {
  kCompleted,
  kSkipped,
  kRetried,
  kDeadLettered,
  kCancelled,
  kRefused,
  kLeaseLost,
  kCount
};
const char* outcome_name(Outcome o);

struct Claimed {
  std::string entry_id;
  std::string payload;    // serialized pb::StageTask
  double gpu_wait_s = 0;  // before the claim: work was visible, the GPU group was held elsewhere
  // Set when the claim already made the start move (Store::claim_and_start): process() takes it
  // instead of asking Ledger::start.
  std::optional<state::Attempt> started{};
};

// The job's state and the task's entry (Redis in production).
class Ledger {
 public:
  virtual ~Ledger() = default;
  virtual Result<state::Attempt> start(const pb::StageTask& t, const std::string& entry_id) = 0;
  // Applies a move, acking the entry in the same step.
  virtual Result<state::Moved> apply(state::Move m, const std::string& entry_id) = 0;
  // An entry that holds no task: filed on the dead-letter stream and acked.
  virtual Status dead_letter_entry(const Claimed& c, const std::string& reason) = 0;
  // Keeps the entry pending; it is claimable again after backoff_ms.
  virtual Status retry_later(const std::string& entry_id, int backoff_ms) = 0;
  virtual void note_exec(const pb::StageTask& t) = 0;
  virtual void note_error(const pb::StageTask& t, const std::string& reason) = 0;
  virtual Result<bool> run_cancelled(const std::string& run_id) = 0;
  virtual bool lease_lost(const std::string& entry_id) = 0;
  // A task handed back at scale-in (EngineOptions::hand_back_due), said in the job hash.
  virtual void note_handed_back(const pb::StageTask& t, const std::string& why) = 0;
};

// The claim after a completion, folded into it (issue #24: one script between two tasks; #39:
// an explicit call of the engine, not a side effect of Ledger::apply).  On a successful
// completion the engine calls fold_into(m) before it applies the move, and folded() with what
// the move's script claimed (Moved::claimed) when the move carried a claim (m.then_claim).
// Production: the Claimer (claimer.h), which decides whether the claim may ride along.
class NextClaim {
 public:
  virtual ~NextClaim() = default;
  virtual void fold_into(state::Move& m) = 0;
  virtual void folded(std::optional<state::ClaimedStart> c) = 0;
};

// How often a running stage asks the ledger whether its run was cancelled (one HGET): a cancel
// frees the pool within a step + this (#37 item 5).
inline constexpr long long kCancelPollMs = 250;
// The largest preview image an event carries (base64 of a JPEG; preview.h makes ~2-6 KiB).
inline constexpr std::size_t kMaxPreviewBase64 = 48 * 1024;

// The run's live events that are not part of a state change (#37: stage.started, step, preview):
// best effort, never on the critical path.  emit() must not wait on a reply (a pipelined write at
// most) and never fails the task; an event lost to a broken connection is only a gap in the
// stream.  Called from the worker's thread (the runtime's progress calls included).
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void emit(const std::string& run_id, const queue::events::Event& e) = 0;
};

// The artifact files (the disk in production).
class Files {
 public:
  virtual ~Files() = default;
  // The SHA-256 of a present, verified artifact; errors say why not (artifact.mismatch,
  // artifact.no_sidecar, artifact.missing, ...).
  virtual Result<std::string> verify(const std::filesystem::path& root,
                                     const std::filesystem::path& p) = 0;
  virtual void remove(const std::filesystem::path& p) = 0;
  virtual Result<std::uint64_t> size(const std::filesystem::path& p) = 0;
  virtual Status make_dirs(const std::filesystem::path& root, const std::filesystem::path& dir) = 0;
  // The decode input fits the job's profile and size (latent::read_latent).
  virtual Status fits(const std::filesystem::path& latent, const latent::Expected& want) = 0;
  // JOB.pipeline.json from the job's history and this stage's record (the last stage, before
  // it acks).  Returns the receipt's JSON text as written: the completion move keeps it in Redis
  // too (state/receipts.h), so every host reads it.
  virtual Result<std::string> write_receipt(const pb::StageTask& t, const pb::StageRecord& own) = 0;
};

// The runtime call.
using Compute = std::function<Result<runtime::StageOutput>(const runtime::StageContext&)>;

// Wall clock (records, queue wait) and a monotonic one (durations, cancel polling), both in ms.
struct Clock {
  std::function<long long()> unix_ms;
  std::function<long long()> steady_ms;
  static Clock system();
};

// Where the finished stage's task goes next (the sample stage's decode host, the transfer).
struct Routing {
  std::function<std::string(const pb::StageTask&)> decode_host;
  std::function<Status(const pb::StageTask& decode_task, const std::filesystem::path& latent)>
      hand_off;
  // After the completion move: tells the transfer sender the latent is ready (best effort: the
  // sender also rescans its outbox).  Not before, or a fast receiver and decoder could write the
  // receipt before this stage's record is in the job's history.
  std::function<Status(const pb::StageTask& decode_task)> nudge{};
  // The stream an encoded job's sample task goes to: the shared one, or the GPU group's own when
  // the encoder shares a sampler's GPUs (the group keeps the job through its sampling).
  std::string sample_stream = keys::stage_stream("sample");
};

struct EngineOptions {
  const config::Cluster* cluster = nullptr;
  const config::Pool* pool = nullptr;
  // A completed task's report (its "done" line, the worker's metrics: report()) waits until the
  // next task's runtime polls cancellation the first time, off the path between two tasks
  // (issue #24); run_deferred() runs what waits.
  bool defer_reports = false;
  // Scale-in: the worker is stopping and its grace is running out (StageWorker); a running task
  // stops and is handed back (retry_later(id, 0): claimable by another worker at once).
  std::function<bool()> hand_back_due = [] { return false; };
  // Where stage.started / step / preview events go (nullptr: nowhere).  The terminal events and
  // stage.finished ride on the moves themselves (state::Move::announce).
  EventSink* events = nullptr;
  // Asked to fold the next claim into each completion (nullptr: none is folded).
  NextClaim* next_claim = nullptr;
};

class StageEngine final {
 public:
  StageEngine(EngineOptions o, Ledger& ledger, Files& files, Compute compute, Clock clock,
              Routing routing);
  // One claimed entry, to its outcome.  An error is Redis failing under the engine: the entry
  // is still pending and comes back.
  Result<Outcome> process(const Claimed& c, double queue_wait_s);
  long long count(Outcome o) const { return counts_[static_cast<int>(o)]; }
  // Called with every outcome and task (metrics, tests); the task is empty when unparseable.
  std::function<void(Outcome, const pb::StageTask&, const pb::StageRecord&)> on_outcome;
  // Runs f now, or with defer_reports once the next runtime is under way (or run_deferred).
  void report(std::function<void()> f);
  void run_deferred();

 private:
  // An outcome decided before the runtime ran (a task refused, dead-lettered, skipped, ...), or
  // empty: the task goes on to its next step.
  using Ended = std::optional<Result<Outcome>>;
  // process(), step by step.  admit: parses the task and makes the start move (a stale, refused
  // or cancelled task ends here, and one past its delivery budget); sets attempt_.
  Ended admit(const Claimed& c, pb::StageTask& t);
  // The runtime's context: paths from (run, job, stage), the job's latent profile, the spec
  // checked again (a bad one is dead-lettered); emits stage.started.
  Ended prepare(const Claimed& c, const pb::StageTask& t, runtime::StageContext& ctx);
  // The context's callbacks: cancellation (run cancelled, lease lost, hand-back), progress and
  // previews as events.
  void watch(const Claimed& c, const pb::StageTask& t, runtime::StageContext& ctx);
  pb::StageRecord new_record(const Claimed& c, const runtime::StageContext& ctx,
                             double queue_wait_s) const;
  // Rule 1 (an output already there and verified: skipped), the input verified (a latent fits
  // the job's profile), the output's folder made.
  Ended check_files(const Claimed& c, const pb::StageTask& t, const runtime::StageContext& ctx,
                    pb::StageRecord& rec);
  // The runtime's answer to the outcome: stopped, failed, or the record completed and finished.
  Result<Outcome> conclude(const Claimed& c, const pb::StageTask& t, pb::StageRecord rec,
                           const Result<runtime::StageOutput>& out, double compute_s);
  // A runtime that returned runtime.cancelled: lease lost, handed back at shutdown, or the run
  // cancelled (resumed meanwhile: retried at once).
  Result<Outcome> stopped(const Claimed& c, const pb::StageTask& t, double compute_s);
  // skipped: the output was already there (counted as skipped, not completed).
  Result<Outcome> finish(const Claimed& c, const pb::StageTask& t, const pb::StageRecord& rec,
                         bool wrote, bool skipped);
  Result<Outcome> fail_attempt(const Claimed& c, const pb::StageTask& t, long long attempt,
                               const Error& err);
  Result<Outcome> dead_letter(const Claimed& c, const pb::StageTask& t, const std::string& reason);
  // nullopt: the run is no longer cancelled (resumed meanwhile); nothing was done.
  Result<std::optional<Outcome>> cancel(const Claimed& c, const pb::StageTask& t);
  Result<Outcome> done(Outcome o, const pb::StageTask& t, const pb::StageRecord& rec = {});
  // The move's announced events with this pool's host and name and the attempt in progress.
  state::Move stamped(state::Move m) const;
  void emit(const pb::StageTask& t, queue::events::Event e);

  EngineOptions opts_;
  const config::StageDescriptor& stage_;  // this pool's row of the stage table
  Ledger& ledger_;
  Files& files_;
  Compute compute_;
  Clock clock_;
  Routing routing_;
  std::array<long long, static_cast<int>(Outcome::kCount)> counts_{};
  std::vector<std::function<void()>> deferred_;
  long long attempt_ = 0;  // the attempt process() is handling (events, records)
};

}  // namespace h3pipe::worker
