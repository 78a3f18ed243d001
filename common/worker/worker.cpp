#include "common/worker/worker.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "common/core/json_parse.h"
#include "common/core/sha256.h"
#include "common/logging/log.h"
#include "common/logging/rate_limit.h"
#include "common/worker/decode_choice.h"
#include "common/worker/disk_files.h"
#include "common/worker/redis_events.h"
#include "common/worker/redis_tasks.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("worker");
  return *l;
}

}  // namespace

namespace h3pipe::worker {
namespace fs = std::filesystem;

std::string stream_for(config::StageKind stage, const std::string& host) {
  return keys::stage_stream(config::describe_stage(stage).stream, host);
}
std::string group_for(config::StageKind stage) {
  return config::stage_name(stage);
}
std::vector<std::string> stage_streams(const config::Cluster& c) {
  std::vector<std::string> out;
  for (const auto& p : c.pools) {
    out.push_back(stream_for(p.stage, p.host));
    if (auto own = group_role(c, p).own_stream; !own.empty()) out.push_back(own);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

// One-time library set-up that would otherwise land in the first task's stage time: OpenSSL's
// digest fetch (verify) and protobuf's JSON type resolver (the completion's history record).
void warm_first_use() {
  (void)sha256_hex("");
  (void)state::Store::advance_move("warm-up", "warm-up", pb::StageRecord(), state::JobState::kDone);
}

}  // namespace

StageWorker::StageWorker(Options opts, std::unique_ptr<runtime::StageRuntime> rt,
                         metrics::WorkerProbe& probe, Hooks hooks)
    : opts_(std::move(opts)), rt_(std::move(rt)), probe_(probe), hooks_(std::move(hooks)) {}

StageWorker::~StageWorker() = default;

Result<std::unique_ptr<StageWorker>> StageWorker::create(Options opts,
                                                         std::unique_ptr<runtime::StageRuntime> rt,
                                                         metrics::WorkerProbe& probe, Hooks hooks) {
  std::unique_ptr<StageWorker> w(
      new StageWorker(std::move(opts), std::move(rt), probe, std::move(hooks)));
  const auto& pool = *w->opts_.pool;
  const auto& c = *w->opts_.cluster;
  const GroupRole role = group_role(c, pool);
  StageWorker* self = w.get();
  ClaimerOptions to{
      .cluster = &c,
      .pool = &pool,
      .redis = w->opts_.redis,
      .consumer = w->opts_.consumer,
      .own_stream = role.own_stream,
      .gpu_group = !role.group.empty(),
      .policy = w->hooks_.policy,
      .stopping = [self] { return self->stopping() || (self->drain_ && self->drain_->drained()); }};
  auto tasks = RedisTasks::create(std::move(to));
  if (!tasks.ok()) return tasks.error();
  RedisTasks* redis_tasks = tasks->get();
  w->owned_tasks_ = std::move(tasks.value());
  w->drain_ = std::make_unique<DrainFlag>(w->opts_.redis, pool.name);
  w->owned_files_ = std::make_unique<DiskFiles>(
      c, w->opts_.software_version,
      [redis_tasks](const std::string& run, const std::string& job) {
        return redis_tasks->history(run, job);
      },
      [self](double e2e_s, double rtf) { self->probe_.job_done(e2e_s, rtf); });
  Ports ports;
  ports.tasks = &redis_tasks->claimer();
  ports.ledger = redis_tasks;
  ports.files = w->owned_files_.get();
  w->owned_events_ = std::make_unique<RedisEventSink>(w->opts_.redis);
  ports.events = w->owned_events_.get();
  if (!role.group.empty()) {
    auto lease = std::make_unique<GpuLease>(w->opts_.redis, role.group, pool.name, role.rank,
                                            c.queue.lease_ms);
    logger().info("{}: shares its GPUs with GPU group {}: runs only while it holds {}", pool.name,
                  role.group, lease->key());
    w->owned_gpu_ = std::move(lease);
    ports.gpu = w->owned_gpu_.get();
    ports.then_rank = role.then_rank;
    ports.sample_stream = role.to_stream;
  }
  w->wire(std::move(ports));
  return w;
}

std::unique_ptr<StageWorker> StageWorker::over(Options opts, Ports ports,
                                               std::unique_ptr<runtime::StageRuntime> rt,
                                               metrics::WorkerProbe& probe, Hooks hooks) {
  std::unique_ptr<StageWorker> w(
      new StageWorker(std::move(opts), std::move(rt), probe, std::move(hooks)));
  w->wire(std::move(ports));
  return w;
}

void StageWorker::wire(Ports ports) {
  ports_ = std::move(ports);
  const auto& pool = *opts_.pool;
  const auto& c = *opts_.cluster;
  stage_ = config::describe_stage(pool.stage).stage;
  warm_first_use();
  if (!hooks_.decode_host) {
    std::string self = pool.host;
    // The shared decode-host choice (decode_choice.h) without backlogs; stage services with
    // several decode hosts wire the one that reads them from Redis.
    hooks_.decode_host = [&c, self](const pb::StageTask& t) {
      return choose_decode_host(c, self, t, nullptr);
    };
  }
  Routing routing{hooks_.decode_host, hooks_.hand_off, hooks_.nudge};
  if (!ports_.sample_stream.empty()) routing.sample_stream = ports_.sample_stream;
  if (routing.hand_off)  // timed: the duty cycle's transfer_credit share
    routing.hand_off = [h = routing.hand_off, acc = handoff_s_](const pb::StageTask& t,
                                                                const fs::path& p) {
      const auto t0 = std::chrono::steady_clock::now();
      Status s = h(t, p);
      *acc += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return s;
    };
  Compute compute = [this](const runtime::StageContext& ctx) { return rt_->run(ctx); };
  EngineOptions eo{&c, &pool, true, [this] { return hand_back_due(); }, ports_.events};
  eo.next_claim = ports_.tasks;  // asked to fold the next claim into each completion
  engine_ = std::make_unique<StageEngine>(eo, *ports_.ledger, *ports_.files, std::move(compute),
                                          ports_.clock, routing);
  engine_->on_outcome = [this](Outcome o, const pb::StageTask& t, const pb::StageRecord& rec) {
    // The metrics once the next task's runtime runs (EngineOptions::defer_reports); the event now
    // (the board hears "idle" before the next task's "claimed").
    engine_->report([this, o, rec, spec = t.spec()] { report(o, rec, spec); });
    if (hooks_.on_event) hooks_.on_event(outcome_name(o), t);
  };
}

void StageWorker::report(Outcome o, const pb::StageRecord& rec, const pb::JobSpec& spec) {
  switch (o) {
    case Outcome::kCompleted:
      probe_.add_bytes(static_cast<double>(rec.bytes()));
      probe_.task_done((rec.end_unix_ms() - rec.start_unix_ms()) / 1000.0, rec.queue_wait_s());
      // MFU of a sample task: the model GFLOP the runtime reports (builtin) or, where it counts
      // none (ComfyUI), the declared GFLOP of its model (configs/gpus.json model_flops); over the
      // pool's GPUs' peak from configs/gpus.json, else the peak the runtime reports (builtin on
      // CPU: its measured sgemm peak).
      if (stage_ == pb::STAGE_SAMPLE && rec.run_s() > 0) {
        double gflop = 0, peak = opts_.peak_gflops;
        std::string why;
        const auto j =
            json_reader::parse_limited(rec.settings_json(), {}, &why).value_or(nlohmann::json());
        if (j.is_object() && j.contains("runtime_reported") && j["runtime_reported"].is_object()) {
          const auto& rr = j["runtime_reported"];
          gflop = rr.value("gflop", 0.0);
          if (peak <= 0) peak = rr.value("peak_gflops", 0.0);
        }
        if (gflop <= 0 && opts_.declared_gflop)
          gflop = opts_.declared_gflop(rec.settings_json(), spec);
        if (gflop > 0 && peak > 0) probe_.set_mfu(gflop / rec.run_s() / peak);
      }
      break;
    case Outcome::kSkipped:
      probe_.task_skipped();
      break;
    case Outcome::kRetried:
      probe_.task_retry();
      break;
    case Outcome::kDeadLettered:
      probe_.task_dead_lettered();
      break;
    case Outcome::kCancelled:
      probe_.task_cancelled();
      break;
    case Outcome::kRefused:
      probe_.task_refused();
      break;
    case Outcome::kLeaseLost:
      probe_.lease_lost();
      break;
    case Outcome::kCount:
      break;
  }
}

bool StageWorker::hand_back_due() {
  if (!stop_ || opts_.stop_grace_s <= 0 || !stop_->load()) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!stop_seen_) stop_seen_ = now;
  const double margin = std::min(2.0, 0.2 * opts_.stop_grace_s);
  return std::chrono::duration<double>(now - *stop_seen_).count() >= opts_.stop_grace_s - margin;
}

void StageWorker::run(const std::atomic<bool>& stop) {
  stop_ = &stop;
  auto idle_since = std::chrono::steady_clock::now();
  // Redis down (or any other error every step meets) is one line per kind of error per 10 s,
  // not one every 200 ms per worker (#34 P14); the first line after says how many were held.
  logging::LogRateLimit step_log{1, std::chrono::seconds(10), 16};
  std::uint64_t failed_steps = 0;  // since the last step that worked
  while (!stop.load()) {
    auto r = step();
    if (!r.ok()) {
      // A full disk or a Redis that cannot persist: said once per change (disk_health.h), not
      // every 200 ms.
      ++failed_steps;
      if (!disk_.observe(r.error())) {
        const auto a = step_log.admit(r.error().code);
        if (a.log)
          logger().warn("{}: {}{}", opts_.pool->name, r.error().to_string(),
                        a.suppressed ? fmt::format(" ({} like it held back)", a.suppressed) : "");
      }
      // The task may still be ours (e.g. Redis went away before the completion): take our own
      // pending entries first again, rather than waiting for our own lease to expire.
      ports_.tasks->recheck_own();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    if (failed_steps > 0) {
      logger().info("{}: working again after {} failed step(s)", opts_.pool->name, failed_steps);
      failed_steps = 0;
    }
    disk_.ok();
    auto now = std::chrono::steady_clock::now();
    const double slice = std::chrono::duration<double>(now - idle_since).count();
    if (*r) {
      // The slice is the claim and the task: the task's process() ran it, less its hand-off.
      const double handoff = std::min(*handoff_s_, process_s_);
      probe_.task_ran(process_s_ - handoff);
      probe_.idle(handoff, "transfer_credit");
      probe_.idle(slice - process_s_, "overhead");
      idle_since = now;
    } else {
      if (claimed_once_) probe_.idle(slice, idle_cause_);
      // Idle: count the slice as a bubble if work was waiting for this pool.
      auto len = ports_.tasks->depth();
      if (len.ok()) {
        probe_.set_queue_depth(static_cast<double>(*len));
        if (*len > 0) probe_.add_bubble(std::chrono::duration<double>(now - idle_since).count());
      }
      idle_since = now;
    }
  }
  engine_->run_deferred();
  // Stopped between a completion that claimed the next task and its processing: handed back at
  // once (claimable by the next sweep of any worker), not left until its lease runs out.
  if (auto s = ports_.tasks->hand_back_ahead(); !s.ok())
    logger().warn("{}: handing back the task claimed ahead at stop: {}", opts_.pool->name,
                  s.error().to_string());
}

Result<bool> StageWorker::step() {
  // Reports the last task left (engine.h defer_reports) when no next task is claimed yet.
  if (!ports_.tasks->claimed_ahead()) engine_->run_deferred();
  const auto nap = std::chrono::milliseconds(opts_.cluster->queue.block_ms / 4 + 1);
  if (drain_ && drain_->drained()) {
    // Drained: nothing claimed, and a task the last completion claimed ahead goes back at once.
    idle_cause_ = "dispatch";
    if (ports_.tasks->claimed_ahead())
      if (auto s = ports_.tasks->hand_back_ahead(); !s.ok()) return s.error();
    std::this_thread::sleep_for(std::max(nap, std::chrono::milliseconds(50)));
    return false;
  }
  if (ports_.gpu) {
    // Polled often: a GPU group hands its GPUs from stage to stage at every job, and each wait
    // here is time the GPUs sit idle (two small Redis commands per poll).
    const auto gpu_nap = std::min(nap, std::chrono::milliseconds(5));
    auto visible = ports_.tasks->visible();
    if (!visible.ok()) return visible.error();
    if (!*visible) {
      idle_cause_ = "no_job";
      gpu_wait_since_.reset();
      std::this_thread::sleep_for(gpu_nap);
      return false;
    }
    auto got = ports_.gpu->acquire();
    if (!got.ok()) return got.error();
    if (!*got) {
      idle_cause_ = "gpu_group";
      if (!gpu_wait_since_) gpu_wait_since_ = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(gpu_nap);
      return false;
    }
  }
  double gpu_wait_s = 0;
  if (gpu_wait_since_) {
    gpu_wait_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - *gpu_wait_since_).count();
    gpu_wait_since_.reset();
  }
  // The GPUs are let go whatever happens below; after a completed task whose job goes on in
  // this group, to that stage first.
  int then_rank = 0;
  struct Release {
    GpuGate* g;
    const int& rank;
    ~Release() {
      if (g) g->release(rank);
    }
  } release{ports_.gpu, then_rank};
  // The Claimer asks the dispatch policy only when no task of the group's or claimed ahead
  // comes first.
  auto claim = ports_.tasks->take();
  if (!claim.ok()) return claim.error();
  auto& taken = claim->taken;
  if (!taken) {
    idle_cause_ = claim->refused ? "dispatch" : "no_job";
    if (claim->refused) ports_.tasks->wait_after_refusal(nap);
    return false;
  }
  queue::Entry& e = taken->entry;
  if (e.reclaimed) probe_.reclaimed("expired_lease");
  if (e.own_pending) probe_.reclaimed("own_pending");
  pb::StageTask t;
  double wait = 0;
  if (t.ParseFromString(e.payload))
    wait = std::max(0.0, (state::now_ms() - t.enqueued_unix_ms()) / 1000.0);
  if (hooks_.on_event) hooks_.on_event("claimed", t);
  ports_.tasks->hold(e.id);
  probe_.set_busy(true);
  claimed_once_ = true;
  *handoff_s_ = 0;
  const auto p0 = std::chrono::steady_clock::now();
  auto r = engine_->process({e.id, e.payload, gpu_wait_s, std::move(taken->started)}, wait);
  process_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
  probe_.set_busy(false);
  ports_.tasks->let_go(e.id);
  if (!r.ok()) return r.error();
  if (*r == Outcome::kCompleted || *r == Outcome::kSkipped) then_rank = ports_.then_rank;
  return true;
}

}  // namespace h3pipe::worker
