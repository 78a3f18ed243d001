#include "common/worker/engine.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

#include "common/core/json_reader.h"
#include "common/logging/log.h"
#include "common/spec/spec.h"
#include "common/state/paths.h"
#include "common/state/receipts.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("engine");
  return *l;
}

}  // namespace

namespace h3pipe::worker {
namespace fs = std::filesystem;
using state::Applied;
using state::JobState;

namespace {

// What makes a task's spec unfit to run, joined ("" = fit): spec::validate's rules against the
// limits (the referenceImage is the runtime's to open, at the time of use), and the spec's jobId
// must be the task's.
std::string task_spec_problems(const pb::StageTask& t, const config::Cluster& cl) {
  std::string out;
  for (const auto& fe : spec::validate(t.spec(), cl, spec::Check::kTask))
    out += (out.empty() ? "" : "; ") + fe.to_string();
  if (t.spec().job_id() != t.job_id())
    out += fmt::format("{}jobId: the task is for job {} but its spec names {}",
                       out.empty() ? "" : "; ", t.job_id(), config::printable(t.spec().job_id()));
  return out;
}

}  // namespace

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kCompleted:
      return "completed";
    case Outcome::kSkipped:
      return "skipped";
    case Outcome::kRetried:
      return "retried";
    case Outcome::kDeadLettered:
      return "dead_lettered";
    case Outcome::kCancelled:
      return "cancelled";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kLeaseLost:
      return "lease_lost";
    case Outcome::kCount:
      break;
  }
  return "?";
}

Clock Clock::system() {
  return {[] { return state::now_ms(); },
          [] {
            return std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                .count();
          }};
}

StageEngine::StageEngine(EngineOptions o, Ledger& ledger, Files& files, Compute compute,
                         Clock clock, Routing routing)
    : opts_(o),
      stage_(config::describe_stage(o.pool->stage)),
      ledger_(ledger),
      files_(files),
      compute_(std::move(compute)),
      clock_(std::move(clock)),
      routing_(std::move(routing)) {}

void StageEngine::report(std::function<void()> f) {
  if (opts_.defer_reports)
    deferred_.push_back(std::move(f));
  else
    f();
}

void StageEngine::run_deferred() {
  auto fs = std::exchange(deferred_, {});
  for (auto& f : fs) f();
}

Result<Outcome> StageEngine::done(Outcome o, const pb::StageTask& t, const pb::StageRecord& rec) {
  counts_[static_cast<int>(o)]++;
  if (on_outcome) on_outcome(o, t, rec);
  return o;
}

state::Move StageEngine::stamped(state::Move m) const {
  for (auto& e : m.announce) {
    if (e.host.empty()) e.host = opts_.pool->host;
    if (e.pool.empty()) e.pool = opts_.pool->name;
    if (e.attempt.empty() && attempt_ > 0) e.attempt = std::to_string(attempt_);
  }
  return m;
}

void StageEngine::emit(const pb::StageTask& t, queue::events::Event e) {
  if (!opts_.events) return;
  e.job = t.job_id();
  e.stage = stage_.name;
  e.host = opts_.pool->host;
  e.pool = opts_.pool->name;
  if (attempt_ > 0) e.attempt = std::to_string(attempt_);
  opts_.events->emit(t.run_id(), e);
}

Result<Outcome> StageEngine::process(const Claimed& c, double queue_wait_s) {
  attempt_ = 0;
  pb::StageTask t;
  if (auto end = admit(c, t)) return std::move(*end);
  runtime::StageContext ctx;
  if (auto end = prepare(c, t, ctx)) return std::move(*end);
  watch(c, t, ctx);
  pb::StageRecord rec = new_record(c, ctx, queue_wait_s);
  if (auto end = check_files(c, t, ctx, rec)) return std::move(*end);
  ledger_.note_exec(t);
  const long long compute_start_ms = clock_.steady_ms();
  auto out = compute_(ctx);
  const double compute_s = static_cast<double>(clock_.steady_ms() - compute_start_ms) / 1000.0;
  run_deferred();  // a runtime that never polled: the last report waits no longer than this one
  return conclude(c, t, std::move(rec), out, compute_s);
}

StageEngine::Ended StageEngine::admit(const Claimed& c, pb::StageTask& t) {
  const auto& cl = *opts_.cluster;
  if (c.payload.empty() || !t.ParseFromString(c.payload) || t.run_id().empty() ||
      t.job_id().empty()) {
    logger().error("{}: entry {} holds no valid task; dead-lettering it", opts_.pool->name,
                   c.entry_id);
    H3_TRY(ledger_.dead_letter_entry(c, "unparseable task payload"));
    return done(Outcome::kDeadLettered, pb::StageTask());
  }
  // The start move counts the attempt and reads the run's cancel flag and the job's last error;
  // a job that is not at this stage (done, failed, cancelled, or elsewhere: a stale task) is
  // refused and its entry dropped in the same step.
  auto started = c.started ? Result<state::Attempt>(*c.started) : ledger_.start(t, c.entry_id);
  if (!started.ok()) return started.error();
  if (started->refused) {
    logger().warn(
        "run={} job={} {}: the job is {}; dropping the task (refused by the state machine)",
        t.run_id(), t.job_id(), stage_.name, state::job_state_name(started->from));
    return done(Outcome::kRefused, t);
  }
  attempt_ = started->number;
  if (started->cancelled) {
    auto r = cancel(c, t);
    if (!r.ok()) return r.error();
    if (*r) return **r;
    // The run was resumed between the start and the cancel: the task runs after all.
  }
  if (attempt_ > cl.queue.max_deliveries) {
    const std::string& last = started->last_error;
    return dead_letter(c, t,
                       fmt::format("{} failed {} deliveries (max_deliveries {}); last error: {}",
                                   stage_.name, attempt_ - 1, cl.queue.max_deliveries,
                                   last.empty() ? "the worker died while running it" : last));
  }
  return std::nullopt;
}

StageEngine::Ended StageEngine::prepare(const Claimed& c, const pb::StageTask& t,
                                        runtime::StageContext& ctx) {
  const auto& cl = *opts_.cluster;
  const std::string& run = t.run_id();
  const std::string& job = t.job_id();
  // Paths from (run, job, stage) alone; a task naming other paths is ignored on purpose.
  auto cond = paths::conditioning(cl, run, job);
  auto lat = paths::latent(cl, run, job);
  auto mp4 = paths::mp4(cl, run, job);
  if (!cond.ok() || !lat.ok() || !mp4.ok())
    return dead_letter(c, t,
                       !cond.ok()  ? cond.error().message
                       : !lat.ok() ? lat.error().message
                                   : mp4.error().message);
  // The job's latent profile: a name the config does not know cannot become valid by retrying.
  auto profile = spec::latent_profile(t.spec(), cl);
  if (!profile.ok()) return dead_letter(c, t, profile.error().to_string());
  // The submission's rules again, before anything is allocated for the task: the operator user
  // may XADD a task to any stage stream (an 8192x8192 spec made a sampler die of bad_alloc on
  // every delivery).  A spec out of range never becomes valid: dead-lettered at once, with every
  // reason; the worker carries on.
  if (auto bad = task_spec_problems(t, cl); !bad.empty()) {
    const std::string why = fmt::format("{} refused the task's spec: {}", stage_.name, bad);
    ledger_.note_error(t, why);
    return dead_letter(c, t, why);
  }

  emit(t, {.type = std::string(queue::events::kStageStarted)});
  ctx.latent_profile = std::move(*profile);
  ctx.run_id = run;
  ctx.spec = &t.spec();
  ctx.job_class = spec::job_class(t.spec(), cl);
  ctx.host = opts_.pool->host;
  ctx.pool = opts_.pool->name;
  ctx.attempt = attempt_;
  ctx.conditioning = *cond;
  const auto path_of = [&](config::Artifact a) {
    switch (a) {
      case config::Artifact::kConditioning:
        return *cond;
      case config::Artifact::kLatent:
        return *lat;
      case config::Artifact::kVideo:
        return *mp4;
      case config::Artifact::kNone:
        break;
    }
    return fs::path();
  };
  ctx.input = path_of(stage_.reads);
  ctx.output = path_of(stage_.writes);
  // The configured root the output lies under: every file check and write stays beneath it.
  ctx.root =
      fs::absolute(stage_.writes == config::Artifact::kVideo ? cl.output_root : cl.artifact_root);
  return std::nullopt;
}

void StageEngine::watch(const Claimed& c, const pb::StageTask& t, runtime::StageContext& ctx) {
  // Cancellation reaches a running stage: the runtime polls this (the builtin sampler between
  // steps); the ledger is asked at most every kCancelPollMs, so a cancel stops the sampler within
  // one step + kCancelPollMs (#37 item 5).  A lease found lost (another worker owns the task now)
  // stops it the same way.
  struct Poll {
    long long next_ms = 0;
    bool cancelled = false;
  };
  auto poll = std::make_shared<Poll>();
  poll->next_ms = clock_.steady_ms() + kCancelPollMs;
  ctx.cancelled = [this, run = t.run_id(), poll, entry_id = c.entry_id] {
    if (!deferred_.empty()) run_deferred();  // the last task's report, now that this one runs
    if (ledger_.lease_lost(entry_id) || opts_.hand_back_due()) return true;
    if (!poll->cancelled && clock_.steady_ms() >= poll->next_ms) {
      poll->next_ms = clock_.steady_ms() + kCancelPollMs;
      auto x = ledger_.run_cancelled(run);
      poll->cancelled = x.ok() && *x;
    }
    return poll->cancelled;
  };

  // Step progress (#37): one event per step the runtime reports, at most ~20 a second (the last
  // step always), each a pipelined write that the runtime never waits on.
  auto last_step_ms = std::make_shared<long long>(-1000000);
  ctx.progress = [this, t, last_step_ms](long long step, long long steps) {
    const long long now = clock_.steady_ms();
    if (step < steps && now - *last_step_ms < 50) return;
    *last_step_ms = now;
    emit(t, {.type = std::string(queue::events::kStep),
             .step = std::to_string(step),
             .steps = std::to_string(steps)});
  };
  // Previews (#38 item 6): bounded in size here whatever the runtime makes.
  ctx.preview = [this, t](long long step, long long steps, const std::string& jpeg_base64) {
    if (jpeg_base64.empty() || jpeg_base64.size() > kMaxPreviewBase64) return;
    emit(t, {.type = std::string(queue::events::kPreview),
             .step = std::to_string(step),
             .steps = std::to_string(steps),
             .extra = {{"format", "jpeg"}, {"image", jpeg_base64}}});
  };
}

pb::StageRecord StageEngine::new_record(const Claimed& c, const runtime::StageContext& ctx,
                                        double queue_wait_s) const {
  const auto& rt = opts_.cluster->runtime_for(*opts_.pool);
  pb::StageRecord rec;
  rec.set_stage(stage_.stage);
  rec.set_host(opts_.pool->host);
  rec.set_pool(opts_.pool->name);
  rec.set_runtime(rt.name);
  rec.set_settings_json(rt.settings.dump());
  rec.set_attempts(static_cast<std::uint32_t>(attempt_));
  rec.set_queue_wait_s(queue_wait_s);
  rec.set_gpu_wait_s(c.gpu_wait_s);
  rec.set_output_path(ctx.output.string());
  rec.set_start_unix_ms(clock_.unix_ms());
  return rec;
}

StageEngine::Ended StageEngine::check_files(const Claimed& c, const pb::StageTask& t,
                                            const runtime::StageContext& ctx,
                                            pb::StageRecord& rec) {
  const auto& cl = *opts_.cluster;
  // Rule 1: an output that exists and verifies means the stage is done.
  auto existing = files_.verify(ctx.root, fs::absolute(ctx.output));
  if (existing.ok()) {
    rec.set_output_sha256(*existing);
    if (auto n = files_.size(ctx.output); n.ok()) rec.set_bytes(*n);
    rec.set_end_unix_ms(clock_.unix_ms());
    logger().info("run={} job={} {}: output already present and verified; skipping", t.run_id(),
                  t.job_id(), stage_.name);
    return finish(c, t, rec, false, true);
  }
  if (existing.error().code == errc::artifact::kMismatch ||
      existing.error().code == errc::artifact::kNoSidecar)
    files_.remove(ctx.output);  // a corrupt output is redone, never trusted
  if (stage_.reads != config::Artifact::kNone) {
    auto in = files_.verify(fs::absolute(cl.artifact_root), fs::absolute(ctx.input));
    if (!in.ok()) return fail_attempt(c, t, attempt_, in.error());
    rec.set_input_sha256(*in);
    // A latent input is checked against the job's profile before any runtime sees it.  Its
    // bytes are verified, so a latent that does not fit never will: dead-lettered at once.
    if (stage_.reads == config::Artifact::kLatent) {
      const latent::Expected want{ctx.latent_profile, spec::job_size(t.spec())};
      if (auto f = files_.fits(fs::absolute(ctx.input), want); !f.ok()) {
        const std::string why =
            fmt::format("{} input does not fit the job's latent profile {}: {}", stage_.name,
                        ctx.latent_profile.name, f.error().to_string());
        ledger_.note_error(t, why);
        return dead_letter(c, t, why);
      }
    }
  }
  // The output's folder is created below its root without following a symlink; stale .part files
  // are replaced by name by the runtime's writer (write_once / prepare_output).
  if (auto made = files_.make_dirs(ctx.root, fs::absolute(ctx.output).parent_path()); !made.ok())
    return fail_attempt(c, t, attempt_, made.error());
  return std::nullopt;
}

Result<Outcome> StageEngine::conclude(const Claimed& c, const pb::StageTask& t, pb::StageRecord rec,
                                      const Result<runtime::StageOutput>& out, double compute_s) {
  const std::string& run = t.run_id();
  const std::string& job = t.job_id();
  if (!out.ok() && out.error().code == errc::runtime::kCancelled) return stopped(c, t, compute_s);
  if (!out.ok()) return fail_attempt(c, t, attempt_, out.error());
  rec.set_output_sha256(out->sha256);
  rec.set_bytes(out->bytes);
  rec.set_device(out->device);
  rec.set_mux_s(out->mux_s);
  rec.set_run_s(std::max(0.0, compute_s - out->mux_s));
  if (!out->settings.empty()) {
    // The receipt keeps the configured settings and adds what the runtime reports it used.
    auto merged = opts_.cluster->runtime_for(*opts_.pool).settings;
    merged["runtime_reported"] = out->settings;
    rec.set_settings_json(merged.dump());
  }
  rec.set_end_unix_ms(clock_.unix_ms());
  if (out->reused)
    logger().warn("run={} job={} {}: another execution committed the output first; kept it", run,
                  job, stage_.name);
  return finish(c, t, rec, !out->reused, false);
}

Result<Outcome> StageEngine::stopped(const Claimed& c, const pb::StageTask& t, double compute_s) {
  const std::string& run = t.run_id();
  const std::string& job = t.job_id();
  if (ledger_.lease_lost(c.entry_id)) {
    logger().warn("run={} job={} {}: lease lost while running; stopped, the new owner runs it", run,
                  job, stage_.name);
    return done(Outcome::kLeaseLost, t);
  }
  if (opts_.hand_back_due()) {
    // Scale-in: the pod's grace ends before the stage would; the task goes back now, not when
    // its lease expires (another worker's next sweep takes it).
    const std::string why =
        fmt::format("{} handed back by pool {} at shutdown after {:.1f}s (its stop grace ran out)",
                    stage_.name, opts_.pool->name, compute_s);
    logger().warn("run={} job={} {}", run, job, why);
    ledger_.note_handed_back(t, why);
    H3_TRY(ledger_.retry_later(c.entry_id, 0));
    return done(Outcome::kRetried, t);
  }
  logger().info("run={} job={} {}: cancelled while running", run, job, stage_.name);
  auto r = cancel(c, t);
  if (!r.ok()) return r.error();
  if (*r) return **r;
  // Resumed while it ran: the output was not committed; the task is taken again at once.
  H3_TRY(ledger_.retry_later(c.entry_id, 0));
  return done(Outcome::kRetried, t);
}

Result<std::optional<Outcome>> StageEngine::cancel(const Claimed& c, const pb::StageTask& t) {
  auto m = ledger_.apply(stamped(state::Store::cancel_move(t.run_id(), t.job_id(), stage_.stage)),
                         c.entry_id);
  if (!m.ok()) return m.error();
  switch (m->code) {
    case Applied::kApplied:
      logger().info("run={} job={} {}: run cancelled; the job is cancelled", t.run_id(), t.job_id(),
                    stage_.name);
      return std::optional<Outcome>(*done(Outcome::kCancelled, t));
    case Applied::kNotCancelled:
      return std::optional<Outcome>();  // resumed meanwhile
    case Applied::kLeaseLost:
      return std::optional<Outcome>(*done(Outcome::kLeaseLost, t));
    default:
      return std::optional<Outcome>(*done(Outcome::kRefused, t));
  }
}

Result<Outcome> StageEngine::dead_letter(const Claimed& c, const pb::StageTask& t,
                                         const std::string& reason) {
  logger().error("run={} job={} {} dead-lettered: {}", t.run_id(), t.job_id(), stage_.name, reason);
  auto m = ledger_.apply(
      stamped(state::Store::fail_move(t.run_id(), t.job_id(), stage_.stage, reason, c.payload)),
      c.entry_id);
  if (!m.ok()) return m.error();
  if (m->code == Applied::kLeaseLost) return done(Outcome::kLeaseLost, t);
  if (m->code == Applied::kRefused) return done(Outcome::kRefused, t);
  return done(Outcome::kDeadLettered, t);
}

Result<Outcome> StageEngine::fail_attempt(const Claimed& c, const pb::StageTask& t,
                                          long long attempt, const Error& err) {
  const auto& cl = *opts_.cluster;
  logger().warn("run={} job={} {} attempt {}/{} failed: {}", t.run_id(), t.job_id(), stage_.name,
                attempt, cl.queue.max_deliveries, err.to_string());
  ledger_.note_error(t, err.to_string());
  // A permanent code (the catalogue's retry class): retrying cannot help, so the first failure is
  // the last.
  const bool permanent = errc::is_permanent(err.code);
  if (attempt >= cl.queue.max_deliveries || permanent)
    return dead_letter(c, t,
                       permanent ? fmt::format("{} failed permanently on delivery {}: {}",
                                               stage_.name, attempt, err.to_string())
                                 : fmt::format("{} failed {} of {} deliveries: {}", stage_.name,
                                               attempt, cl.queue.max_deliveries, err.to_string()));
  const int backoff = cl.queue.retry_backoff_ms << std::min<long long>(attempt - 1, 6);
  H3_TRY(ledger_.retry_later(c.entry_id, backoff));
  return done(Outcome::kRetried, t);
}

Result<Outcome> StageEngine::finish(const Claimed& c, const pb::StageTask& t,
                                    const pb::StageRecord& rec, bool wrote, bool skipped) {
  const std::string& run = t.run_id();
  const std::string& job = t.job_id();
  pb::StageTask next = t;
  next.set_input_sha256(rec.output_sha256());
  next.set_input_path(rec.output_path());
  next.set_enqueued_unix_ms(clock_.unix_ms());
  JobState to = JobState::kDone;
  std::string next_stream;
  bool via_transfer = false;
  std::string receipt;  // the last stage's receipt, kept in Redis with its completion
  switch (stage_.stage) {
    case pb::STAGE_ENCODE:
      next.set_stage(pb::STAGE_SAMPLE);
      to = JobState::kSample;
      next_stream = routing_.sample_stream;
      break;
    case pb::STAGE_SAMPLE: {
      const std::string target = routing_.decode_host(t);
      next.set_stage(pb::STAGE_DECODE);
      next.set_target_host(target);
      if (target == opts_.pool->host) {
        to = JobState::kDecode;  // same host: the transfer is the file already in place
        next_stream = keys::stage_stream("decode", target);
      } else {
        if (!routing_.hand_off)
          return make_error(errc::config::kTransfer,
                            "decode host {} differs from {} but no transfer sender is wired",
                            target, opts_.pool->host);
        to = JobState::kTransfer;  // the receiver on the decode host enqueues the decode task
        via_transfer = true;
      }
      break;
    }
    default: {
      auto w = files_.write_receipt(t, rec);
      if (!w.ok()) return fail_attempt(c, t, rec.attempts(), w.error());
      receipt = std::move(*w);
      break;
    }
  }
  // Before the ack: the outbox record is what lets a restarted sender rebuild the decode task; a
  // crash between record and ack only re-offers a latent the receiver already holds.
  if (via_transfer) H3_TRY(routing_.hand_off(next, fs::path(rec.output_path())));
  std::string payload;
  next.SerializeToString(&payload);
  auto m = state::Store::advance_move(run, job, rec, to, next_stream, payload);
  // wrote:<stage> counts the executions that committed the output (the chaos test's duplicate
  // check): recorded even when the job was already past this stage.
  if (wrote) state::Store::count_written(m, stage_.stage);
  // The receipt beside the run in Redis, in the completion's own step: `report`, `profile learn`
  // and `resume` read it from any host (issue #34 P8).  One too large stays on this disk only.
  if (!receipt.empty() && !state::attach_receipt(m, receipt))
    logger().warn("run={} job={}: receipt of {} bytes kept on this host's disk only (over {})", run,
                  job, receipt.size(), state::kReceiptMaxBytes);
  // The next claim rides in the completion's own script when the Claimer allows it.
  if (opts_.next_claim) opts_.next_claim->fold_into(m);
  auto moved = ledger_.apply(m, c.entry_id);
  if (!moved.ok()) return moved.error();
  if (opts_.next_claim && m.then_claim) opts_.next_claim->folded(std::move(moved->claimed));
  if (via_transfer && routing_.nudge && moved->code != Applied::kRefused)
    if (auto n = routing_.nudge(next); !n.ok())
      logger().warn("run={} job={}: {} (the sender finds the latent at its next outbox scan)", run,
                    job, n.error().to_string());
  if (moved->code == Applied::kApplied && moved->replicas == 0)
    logger().warn(
        "run={} job={} {}: completion acknowledged by no replica within redis.wait_timeout_ms; a "
        "failover "
        "now would redo it from its artifacts",
        run, job, stage_.name);
  switch (moved->code) {
    case Applied::kApplied:
      report([run, job, key = stage_.name, s = (rec.end_unix_ms() - rec.start_unix_ms()) / 1000.0,
              to] {
        logger().info("run={} job={} {} done in {:.3f}s -> {}", run, job, key, s,
                      state::job_state_name(to));
      });
      return done(skipped ? Outcome::kSkipped : Outcome::kCompleted, t, rec);
    case Applied::kAlreadyPast:
      logger().info("run={} job={} {}: the job is already {}; history kept, nothing enqueued", run,
                    job, stage_.name, state::job_state_name(moved->from));
      return done(Outcome::kSkipped, t, rec);
    case Applied::kLeaseLost:
      logger().warn("run={} job={} {}: lease lost before completion; not enqueuing twice", run, job,
                    stage_.name);
      return done(Outcome::kLeaseLost, t, rec);
    default:
      logger().warn("run={} job={} {}: the job is {}; completion refused by the state machine", run,
                    job, stage_.name, state::job_state_name(moved->from));
      return done(Outcome::kRefused, t, rec);
  }
}

}  // namespace h3pipe::worker
