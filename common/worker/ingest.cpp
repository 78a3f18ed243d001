// Submission ingest: XADD h3pipe:submit * run RUN spec JSON  ->  a job + its encode task, or a
// failed job with the reason.  Never crashes on bad input, never drops silently.

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/logging/log.h"
#include "common/logging/rate_limit.h"
#include "common/spec/spec.h"
#include "common/state/quota.h"
#include "common/state/state.h"
#include "common/worker/worker.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("ingest");
  return *l;
}

}  // namespace

namespace h3pipe::worker {

namespace {

// Intake over Redis: the submit stream's consumer group and the job store.
class RedisIntake final : public Intake {
 public:
  static Result<std::unique_ptr<RedisIntake>> create(const config::Cluster& c,
                                                     const queue::Connector& redis,
                                                     const std::string& consumer) {
    std::unique_ptr<RedisIntake> in(new RedisIntake);
    in->cluster_ = &c;
    in->streams_ = stage_streams(c);
    auto r = redis.connect();
    if (!r.ok()) return r.error();
    in->redis_ = std::move(r.value());
    in->store_ = std::make_unique<state::Store>(*in->redis_);
    H3_TRY(in->store_->load_scripts());
    queue::QueueOptions qo{keys::submit(),   std::string(keys::kIngestGroup),
                           consumer,         c.queue.lease_ms,
                           c.queue.block_ms, c.queue.sweep_ms};
    in->queue_ = std::make_unique<queue::StageQueue>(*in->redis_, qo);
    H3_TRY(in->queue_->ensure_group());
    // The encode stream's group too, so tasks enqueued before any encoder started are kept.
    queue::StageQueue enc(*in->redis_, {keys::stage_stream("encode"), "encode", consumer});
    H3_TRY(enc.ensure_group());
    return in;
  }
  Result<std::optional<queue::Entry>> next() override {
    reload_scripts();
    release_held();
    return queue_->claim();
  }
  Status done(const queue::Entry& e) override {
    auto ok = queue_->complete(e, {});
    if (!ok.ok()) return ok.error();
    return {};
  }
  Result<bool> job_exists(const std::string& run, const std::string& job) override {
    return store_->job_exists(run, job);
  }
  Result<std::string> job_spec(const std::string& run, const std::string& job) override {
    return store_->job_spec(run, job);
  }
  Result<bool> accept_job(const std::string& run, const pb::JobSpec& spec,
                          const std::string& payload) override {
    // A held quota's user past max_jobs: accepted, its task parked where no claim sees it.
    const config::User* u = held_quota(spec.user());
    if (!u) return store_->accept_job(run, spec, payload);
    auto to = state::accept_stream(*redis_, streams_, spec.user(), u->max_jobs);
    if (!to.ok()) return to.error();
    if (*to == keys::held(spec.user()))
      logger().info("run={} job={}: user {} is at users.{}.max_jobs ({}): held until under it", run,
                    spec.job_id(), spec.user(), spec.user(), u->max_jobs);
    return store_->accept_job(run, spec, payload, *to);
  }
  Status reject_job(const std::string& run, const std::string& job,
                    const std::string& why) override {
    return store_->reject_job(run, job, why);
  }
  Status refuse_submission(const std::string& run, const state::Refusal& r) override {
    return store_->refuse_submission(run, r);
  }
  Result<long long> dead_letters() override { return queue::dead_letter_count(*redis_); }

 private:
  RedisIntake() = default;
  // The job store's scripts into Redis's script cache again every few seconds: a Redis restart
  // empties it, and the operator (the CLI's and the API's cancel, resume and retry) may run them
  // by SHA but not load them (docs/security.md).  SCRIPT LOAD of a cached script is a no-op.
  void reload_scripts() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_reload_) return;
    next_reload_ = now + std::chrono::seconds(2);
    if (auto s = store_->load_scripts(); !s.ok())
      next_reload_ = now;  // Redis away: again on the next claim, which reports the error
  }
  std::chrono::steady_clock::time_point next_reload_ = std::chrono::steady_clock::now();
  // The user's quota when it holds (users.NAME.over_quota "hold" with max_jobs), else nullptr.
  const config::User* held_quota(const std::string& user) const {
    auto it = cluster_->users.find(user);
    if (it == cluster_->users.end() || it->second.max_jobs <= 0 || it->second.over_quota != "hold")
      return nullptr;
    return &it->second;
  }
  // Every 250 ms: each held quota's user's oldest held tasks to the encode stream while it is
  // under max_jobs (state/quota.h).  Redis away: the claim after reports it.
  void release_held() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_release_) return;
    next_release_ = now + std::chrono::milliseconds(250);
    for (const auto& [name, u] : cluster_->users) {
      if (!held_quota(name)) continue;
      auto n = state::release_held(*redis_, streams_, name, u.max_jobs);
      if (n.ok() && *n > 0) logger().info("user {}: {} held job(s) released", name, *n);
    }
  }
  std::chrono::steady_clock::time_point next_release_ = std::chrono::steady_clock::now();
  const config::Cluster* cluster_ = nullptr;
  std::vector<std::string> streams_;  // the stage streams (a quota's jobs admitted)
  std::unique_ptr<queue::Redis> redis_;
  std::unique_ptr<state::Store> store_;
  std::unique_ptr<queue::StageQueue> queue_;
};

// protobuf's JSON parser sets itself up on first use (milliseconds): here, not in the first
// submission's latency.
void warm_json() {
  (void)spec::parse_json(R"({"prompt": "warm-up"})");
}

}  // namespace

Ingest::~Ingest() = default;

Result<std::unique_ptr<Ingest>> Ingest::create(const config::Cluster& c,
                                               const queue::Connector& redis,
                                               std::string consumer) {
  auto intake = RedisIntake::create(c, redis, consumer);
  if (!intake.ok()) return intake.error();
  auto in = over(c, **intake);
  in->owned_ = std::move(intake.value());
  return in;
}

std::unique_ptr<Ingest> Ingest::over(const config::Cluster& c, Intake& intake) {
  warm_json();
  std::unique_ptr<Ingest> in(new Ingest(c));
  in->intake_ = &intake;
  return in;
}

void Ingest::run(const std::atomic<bool>& stop) {
  auto next_idle = std::chrono::steady_clock::now();
  // Redis down: one line per kind of error per 10 s, not one every 200 ms (#34 P14).
  logging::LogRateLimit step_log{1, std::chrono::seconds(10), 16};
  std::uint64_t failed_steps = 0;  // since the last step that worked
  while (!stop.load()) {
    if (on_dead_letters_ && std::chrono::steady_clock::now() >= next_idle) {
      if (auto n = intake_->dead_letters(); n.ok()) on_dead_letters_(*n);
      next_idle = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
    auto r = step();
    if (!r.ok()) {
      ++failed_steps;
      if (!disk_.observe(r.error())) {
        const auto a = step_log.admit(r.error().code);
        if (a.log)
          logger().warn("ingest: {}{}", r.error().to_string(),
                        a.suppressed ? fmt::format(" ({} like it held back)", a.suppressed) : "");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } else {
      if (failed_steps > 0)
        logger().info("ingest: working again after {} failed step(s)", failed_steps);
      failed_steps = 0;
      disk_.ok();
    }
  }
}

// A refused submission for a new job is a failed job with the reason, visible in `status`.  One
// naming a job that already exists never touches it and never becomes a job: it is recorded
// beside the run (Store::refuse_submission), so a finished run's verdict stays what it was (issue
// #22: a late conflicting XADD used to add a failed pseudo-job for good).
Result<bool> Ingest::reject(const queue::Entry& e, const std::string& run, const std::string& job,
                            const std::string& why) {
  bool exists = false;
  if (job != "sub-" + e.id) {
    auto r = intake_->job_exists(run, job);
    if (!r.ok()) return r.error();
    exists = *r;
  }
  if (exists) {
    logger().warn("ingest: run={} job={} submission {} refused beside the run: {}", run, job, e.id,
                  why);
    H3_TRY(intake_->refuse_submission(run, {e.id, job, why, state::now_ms()}));
  } else {
    logger().warn("ingest: run={} job={} rejected: {}", run, job, why);
    H3_TRY(intake_->reject_job(run, job, why));
  }
  H3_TRY(intake_->done(e));
  return true;
}

Result<bool> Ingest::step() {
  auto claimed = intake_->next();
  if (!claimed.ok()) return claimed.error();
  if (!claimed->has_value()) return false;
  const queue::Entry& e = **claimed;
  // The entry's fields (claimed with it, no second read): run, spec.
  const auto run_field = e.fields.find("run");
  const auto spec_field = e.fields.find("spec");
  std::string run = run_field != e.fields.end() ? run_field->second : std::string();
  const std::string spec_json = spec_field != e.fields.end() ? spec_field->second : std::string();
  auto reject = [&](const std::string& job, const std::string& why) {
    return this->reject(e, run, job, why);
  };
  // A field given twice is refused, never read last-wins (issue #35 D12): which spec (or run) the
  // submitter meant is not ours to guess.  A run given twice cannot be trusted either.
  if (!e.repeated.empty()) {
    const std::string& field = e.repeated.front();
    if (std::find(e.repeated.begin(), e.repeated.end(), "run") != e.repeated.end() ||
        !artifacts::validate_id("run", run).ok())
      run = "invalid-runs";
    return reject("sub-" + e.id,
                  fmt::format("{}: the submission has the field {} more than once; exactly one "
                              "expected (XADD h3pipe:submit * run RUN spec JSON)",
                              field, field));
  }
  if (run_field == e.fields.end()) {
    run = "invalid-runs";
    return reject("sub-" + e.id,
                  "run: the submission has no run field (XADD h3pipe:submit * run RUN spec JSON)");
  }
  if (auto s = artifacts::validate_id("run", run); !s.ok()) {
    run = "invalid-runs";
    return reject("sub-" + e.id, s.error().message);
  }
  if (spec_field == e.fields.end())
    return reject(
        "sub-" + e.id,
        "spec: the submission has no spec field (XADD h3pipe:submit * run RUN spec JSON)");
  auto spec = spec::parse_json(spec_json);
  if (!spec.ok()) return reject("sub-" + e.id, spec.error().message);
  if (spec->job_id().empty()) spec->set_job_id("sub-" + e.id);
  auto errs = spec::validate(*spec, cluster_);
  if (!errs.empty()) {
    std::string why;
    for (const auto& fe : errs) why += (why.empty() ? "" : "; ") + fe.to_string();
    std::string job =
        artifacts::validate_id("jobId", spec->job_id()).ok() ? spec->job_id() : "sub-" + e.id;
    return reject(job, why);
  }
  pb::StageTask t;
  t.set_run_id(run);
  t.set_job_id(spec->job_id());
  t.set_stage(pb::STAGE_ENCODE);
  *t.mutable_spec() = *spec;
  t.set_enqueued_unix_ms(state::now_ms());
  std::string payload;
  t.SerializeToString(&payload);
  auto accepted = intake_->accept_job(run, *spec, payload);
  if (!accepted.ok()) return accepted.error();
  if (!*accepted) {
    // The same job again: identical is idempotent, another spec is refused with the reason.
    auto stored = intake_->job_spec(run, spec->job_id());
    if (!stored.ok()) return stored.error();
    if (*stored != spec::to_json(*spec))
      return reject(spec->job_id(),
                    fmt::format("jobId {} already exists in run {} with another spec; the "
                                "submission was refused and the existing job left as it is",
                                spec->job_id(), run));
    logger().info("ingest: run={} job={} submitted again with the same spec: nothing to do", run,
                  spec->job_id());
  }
  H3_TRY(intake_->done(e));
  return true;
}

}  // namespace h3pipe::worker
