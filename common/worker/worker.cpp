#include "common/worker/worker.h"

#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/latent/latent.h"
#include "common/spec/spec.h"
#include "common/state/paths.h"
#include "common/worker/decode_choice.h"

namespace h3pipe::worker {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string stream_for(config::StageKind stage, const std::string& host) {
  if (stage == config::StageKind::kDecode) return keys::stream("decode@" + host);
  return keys::stream(config::stage_name(stage));
}
std::string group_for(config::StageKind stage) { return config::stage_name(stage); }

namespace {

pb::Stage to_pb(config::StageKind s) {
  switch (s) {
    case config::StageKind::kEncode: return pb::STAGE_ENCODE;
    case config::StageKind::kSample: return pb::STAGE_SAMPLE;
    case config::StageKind::kDecode: return pb::STAGE_DECODE;
  }
  return pb::STAGE_UNSPECIFIED;
}

// One-time library set-up that would otherwise land in the first task's stage time: OpenSSL's
// digest fetch (verify) and protobuf's JSON type resolver (the completion's history record).
void warm_first_use() {
  (void)sha256_hex("");
  (void)state::Store::complete_cmds("warm-up", "warm-up", pb::StageRecord(), "", "", "", false);
}


}  // namespace

StageWorker::StageWorker(Options opts, Runtimes rt, metrics::WorkerProbe& probe, Hooks hooks)
    : opts_(std::move(opts)), rt_(std::move(rt)), probe_(probe), hooks_(std::move(hooks)) {}

StageWorker::~StageWorker() = default;

Result<std::unique_ptr<StageWorker>> StageWorker::create(Options opts, Runtimes rt, metrics::WorkerProbe& probe,
                                                         Hooks hooks) {
  std::unique_ptr<StageWorker> w(new StageWorker(std::move(opts), std::move(rt), probe, std::move(hooks)));
  const auto& pool = *w->opts_.pool;
  const auto& c = *w->opts_.cluster;
  w->stage_ = to_pb(pool.stage);
  warm_first_use();
  if (!w->hooks_.decode_host) {
    std::string self = pool.host;
    // The shared decode-host choice (decode_choice.h) without backlogs; stage services with
    // several decode hosts wire the one that reads them from Redis.
    w->hooks_.decode_host = [&c, self](const pb::StageTask& t) { return choose_decode_host(c, self, t, nullptr); };
  }
  auto r = queue::Redis::connect(w->opts_.redis);
  if (!r.ok()) return r.error();
  w->redis_ = std::move(r.value());
  w->store_ = std::make_unique<state::Store>(*w->redis_);
  queue::QueueOptions qo{stream_for(pool.stage, pool.host), group_for(pool.stage), w->opts_.consumer,
                         c.queue.lease_ms, c.queue.block_ms, c.queue.sweep_ms};
  w->queue_ = std::make_unique<queue::StageQueue>(*w->redis_, qo);
  H3_TRY(w->queue_->ensure_group());
  w->leases_ = std::make_unique<queue::LeaseKeeper>(w->opts_.redis, qo, c.queue.renew_ms);
  return w;
}

void StageWorker::run(const std::atomic<bool>& stop) {
  auto idle_since = Clock::now();
  while (!stop.load()) {
    auto r = step();
    if (!r.ok()) {
      spdlog::warn("{}: {}", opts_.pool->name, r.error().to_string());
      // The task may still be ours (e.g. Redis went away before the completion): take our own
      // pending entries first again, rather than waiting for our own lease to expire.
      queue_->recheck_own();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    auto now = Clock::now();
    if (*r) {
      idle_since = now;
    } else {
      // Idle: count the slice as a bubble if work was waiting for this pool.
      auto len = queue_->length();
      if (len.ok()) {
        probe_.set_queue_depth(static_cast<double>(*len));
        if (*len > 0) probe_.add_bubble(std::chrono::duration<double>(now - idle_since).count());
      }
      idle_since = now;
    }
  }
}

Result<bool> StageWorker::step() {
  bool new_work = hooks_.may_claim();
  auto claimed = queue_->claim(new_work);
  if (!claimed.ok()) return claimed.error();
  if (!claimed->has_value()) {
    if (!new_work) std::this_thread::sleep_for(std::chrono::milliseconds(opts_.cluster->queue.block_ms / 4 + 1));
    return false;
  }
  const queue::Entry& e = **claimed;
  if (e.reclaimed) probe_.reclaimed("expired_lease");
  if (e.own_pending) probe_.reclaimed("own_pending");
  pb::StageTask t;
  double wait = 0;
  if (t.ParseFromString(e.payload)) wait = std::max(0.0, (state::now_ms() - t.enqueued_unix_ms()) / 1000.0);
  leases_->hold(e.id);
  probe_.set_busy(true);
  Status s = process(e, wait);
  probe_.set_busy(false);
  leases_->release(e.id);
  if (!s.ok()) return s.error();
  return true;
}

Status StageWorker::process(const queue::Entry& e, double queue_wait_s) {
  pb::StageTask t;
  if (e.payload.empty() || !t.ParseFromString(e.payload) || t.run_id().empty()) {
    spdlog::error("{}: entry {} holds no valid task; dead-lettering it", opts_.pool->name, e.id);
    probe_.task_dead_lettered();
    return queue_->dead_letter(e, state::stage_key(stage_), t.run_id(), t.job_id(), "unparseable task payload", {});
  }
  const auto& c = *opts_.cluster;
  const std::string& run = t.run_id();
  const std::string& job = t.job_id();
  // One round trip: the attempt is counted, and the run's cancel flag and the job's last error
  // come back with it.
  auto started = store_->start_attempt(run, job, stage_);
  if (!started.ok()) return started.error();
  const long long attempt = started->number;
  if (hooks_.on_event) hooks_.on_event("claimed", t);

  if (started->cancelled) {
    spdlog::info("run={} job={} {}: run cancelled, dropping the task", run, job, state::stage_key(stage_));
    auto r = queue_->complete(e, state::Store::cancel_cmds(run, job));
    return r.ok() ? Status() : Status(r.error());
  }
  if (attempt > c.queue.max_deliveries) {
    const std::string& last = started->last_error;
    std::string reason = fmt::format("{} failed {} deliveries (max_deliveries {}); last error: {}",
                                     state::stage_key(stage_), attempt - 1, c.queue.max_deliveries,
                                     last.empty() ? "the worker died while running it" : last);
    spdlog::error("run={} job={} dead-lettered: {}", run, job, reason);
    probe_.task_dead_lettered();
    if (hooks_.on_event) hooks_.on_event("dead_letter", t);
    return queue_->dead_letter(e, state::stage_key(stage_), run, job, reason, state::Store::fail_cmds(run, job, stage_, reason));
  }

  // Paths from (run, job, stage) alone; a task naming other paths is ignored on purpose.
  auto cond = paths::conditioning(c, run, job);
  auto lat = paths::latent(c, run, job);
  auto mp4 = paths::mp4(c, run, job);
  if (!cond.ok() || !lat.ok() || !mp4.ok()) {
    std::string why = !cond.ok() ? cond.error().message : !lat.ok() ? lat.error().message : mp4.error().message;
    probe_.task_dead_lettered();
    return queue_->dead_letter(e, state::stage_key(stage_), run, job, why, state::Store::fail_cmds(run, job, stage_, why));
  }
  // The job's latent profile (params, job class, cluster): a name the config does not know cannot
  // become valid by retrying.
  auto profile = spec::latent_profile(t.spec(), c);
  if (!profile.ok()) {
    probe_.task_dead_lettered();
    return queue_->dead_letter(e, state::stage_key(stage_), run, job, profile.error().to_string(),
                               state::Store::fail_cmds(run, job, stage_, profile.error().to_string()));
  }
  runtime::StageContext ctx;
  ctx.latent_profile = std::move(*profile);
  ctx.run_id = run;
  ctx.spec = &t.spec();
  ctx.job_class = c.class_of(t.spec().width(), t.spec().height(), t.spec().frames(), t.spec().steps(), t.spec().job_class());
  ctx.host = opts_.pool->host;
  ctx.pool = opts_.pool->name;
  ctx.attempt = attempt;
  ctx.conditioning = *cond;
  // Cancellation reaches a running stage: the runtime polls this; Redis is asked at most once a
  // second (start_attempt just asked).
  auto next_check = std::make_shared<Clock::time_point>(Clock::now() + std::chrono::seconds(1));
  auto was_cancelled = std::make_shared<bool>(false);
  // A lease found lost (another worker owns the task now, e.g. after a Redis restart lost our
  // claim) stops the work the same way, before it commits anything.
  const std::string entry_id = e.id;
  ctx.cancelled = [this, run, next_check, was_cancelled, entry_id] {
    if (leases_->is_lost(entry_id)) return true;
    if (!*was_cancelled && Clock::now() >= *next_check) {
      *next_check = Clock::now() + std::chrono::seconds(1);
      auto c = store_->cancelled(run);
      *was_cancelled = c.ok() && *c;
    }
    return *was_cancelled;
  };
  switch (stage_) {
    case pb::STAGE_ENCODE: ctx.output = *cond; break;
    case pb::STAGE_SAMPLE: ctx.input = *cond; ctx.output = *lat; break;
    default: ctx.input = *lat; ctx.output = *mp4; break;
  }
  // The configured root the output lies under: every file check and write below stays beneath it.
  ctx.root = fs::absolute(stage_ == pb::STAGE_DECODE ? c.output_root : c.artifact_root);

  pb::StageRecord rec;
  rec.set_stage(stage_);
  rec.set_host(opts_.pool->host);
  rec.set_pool(opts_.pool->name);
  rec.set_runtime(c.runtime_for(*opts_.pool).name);
  rec.set_settings_json(c.runtime_for(*opts_.pool).settings.dump());
  rec.set_attempts(static_cast<std::uint32_t>(attempt));
  rec.set_queue_wait_s(queue_wait_s);
  rec.set_output_path(ctx.output.string());
  rec.set_start_unix_ms(state::now_ms());
  auto t0 = Clock::now();

  // Rule 1: an output that exists and verifies means the stage is done.
  auto existing = artifacts::verify(artifacts::Root(ctx.root), fs::absolute(ctx.output));
  if (existing.ok()) {
    rec.set_output_sha256(*existing);
    std::error_code ec;
    rec.set_bytes(fs::file_size(ctx.output, ec));
    rec.set_end_unix_ms(state::now_ms());
    probe_.task_skipped();
    spdlog::info("run={} job={} {}: output already present and verified; skipping", run, job, state::stage_key(stage_));
    return finish(e, t, rec, false);
  }
  if (existing.error().code == "artifact.mismatch" || existing.error().code == "artifact.no_sidecar") {
    std::error_code ec;
    fs::remove(ctx.output, ec);  // a corrupt output is redone, never trusted
  }
  if (!ctx.input.empty()) {
    auto in = artifacts::verify(artifacts::Root(fs::absolute(c.artifact_root)), fs::absolute(ctx.input));
    if (!in.ok()) return fail_attempt(e, t, attempt, in.error());
    rec.set_input_sha256(*in);
    // The decode input is checked against the job's profile before any runtime sees it.  Its
    // bytes are verified, so a latent that does not fit never will: dead-lettered at once.
    if (stage_ == pb::STAGE_DECODE) {
      const latent::Expected want{ctx.latent_profile, spec::job_size(t.spec())};
      if (auto l = latent::read_latent(fs::absolute(ctx.input), &want); !l.ok()) {
        const std::string why = fmt::format("decode input does not fit the job's latent profile {}: {}",
                                            ctx.latent_profile.name, l.error().to_string());
        spdlog::error("run={} job={} dead-lettered: {}", run, job, why);
        probe_.task_dead_lettered();
        (void)store_->note_error(run, job, stage_, why);
        if (hooks_.on_event) hooks_.on_event("dead_letter", t);
        return queue_->dead_letter(e, state::stage_key(stage_), run, job, why,
                                   state::Store::fail_cmds(run, job, stage_, why));
      }
    }
  }
  // The output's folder is created below its root without following a symlink; stale .part files
  // are replaced by name by the runtime's writer (write_once / prepare_output).
  if (auto made = artifacts::make_dirs(artifacts::Root(ctx.root), fs::absolute(ctx.output).parent_path()); !made.ok())
    return fail_attempt(e, t, attempt, made.error());
  (void)store_->note_exec(run, job, stage_);
  auto out = execute(t, ctx);
  if (!out.ok() && out.error().code == "runtime.cancelled" && leases_->is_lost(e.id)) {
    probe_.lease_lost();
    spdlog::warn("run={} job={} {}: lease lost while running; stopped, the new owner runs it", run, job,
                 state::stage_key(stage_));
    return {};
  }
  if (!out.ok() && out.error().code == "runtime.cancelled") {
    spdlog::info("run={} job={} {}: cancelled while running", run, job, state::stage_key(stage_));
    auto r = queue_->complete(e, state::Store::cancel_cmds(run, job));
    return r.ok() ? Status() : Status(r.error());
  }
  if (!out.ok()) return fail_attempt(e, t, attempt, out.error());
  rec.set_output_sha256(out->sha256);
  rec.set_bytes(out->bytes);
  rec.set_device(out->device);
  if (!out->settings.empty()) {
    // The receipt keeps the configured settings and adds what the runtime reports it used.
    auto merged = c.runtime_for(*opts_.pool).settings;
    merged["runtime_reported"] = out->settings;
    rec.set_settings_json(merged.dump());
  }
  rec.set_end_unix_ms(state::now_ms());
  probe_.add_bytes(static_cast<double>(out->bytes));
  probe_.task_done(std::chrono::duration<double>(Clock::now() - t0).count(), queue_wait_s);
  if (out->reused)
    spdlog::warn("run={} job={} {}: another execution committed the output first; kept it", run, job,
                 state::stage_key(stage_));
  return finish(e, t, rec, !out->reused);
}

Result<runtime::StageOutput> StageWorker::execute(const pb::StageTask&, const runtime::StageContext& ctx) {
  switch (stage_) {
    case pb::STAGE_ENCODE: return rt_.encode->encode(ctx);
    case pb::STAGE_SAMPLE: return rt_.sample->sample(ctx);
    default: return rt_.decode->decode(ctx);
  }
}

Status StageWorker::fail_attempt(const queue::Entry& e, const pb::StageTask& t, long long attempt, const Error& err) {
  const auto& c = *opts_.cluster;
  spdlog::warn("run={} job={} {} attempt {}/{} failed: {}", t.run_id(), t.job_id(), state::stage_key(stage_),
               attempt, c.queue.max_deliveries, err.to_string());
  (void)store_->note_error(t.run_id(), t.job_id(), stage_, err.to_string());
  if (hooks_.on_event) hooks_.on_event("failed_attempt", t);
  // runtime.permanent.*: retrying cannot help (runtime.h), so the first failure is the last.
  const bool permanent = err.code.rfind("runtime.permanent.", 0) == 0;
  if (attempt >= c.queue.max_deliveries || permanent) {
    std::string reason = permanent ? fmt::format("{} failed permanently on delivery {}: {}", state::stage_key(stage_),
                                                 attempt, err.to_string())
                                   : fmt::format("{} failed {} of {} deliveries: {}", state::stage_key(stage_), attempt,
                                                 c.queue.max_deliveries, err.to_string());
    probe_.task_dead_lettered();
    return queue_->dead_letter(e, state::stage_key(stage_), t.run_id(), t.job_id(), reason,
                               state::Store::fail_cmds(t.run_id(), t.job_id(), stage_, err.to_string()));
  }
  probe_.task_retry();
  int backoff = c.queue.retry_backoff_ms << std::min<long long>(attempt - 1, 6);
  return queue_->release_for_retry(e, backoff);
}

Status StageWorker::finish(const queue::Entry& e, const pb::StageTask& t, const pb::StageRecord& rec, bool wrote) {
  const auto& c = *opts_.cluster;
  const std::string& run = t.run_id();
  const std::string& job = t.job_id();
  pb::StageTask next = t;
  next.set_input_sha256(rec.output_sha256());
  next.set_input_path(rec.output_path());
  next.set_enqueued_unix_ms(state::now_ms());
  std::string next_state, next_stream;
  bool final_stage = false;
  switch (stage_) {
    case pb::STAGE_ENCODE:
      next.set_stage(pb::STAGE_SAMPLE);
      next_state = "sample";
      next_stream = stream_for(config::StageKind::kSample, "");
      break;
    case pb::STAGE_SAMPLE: {
      std::string target = hooks_.decode_host(t);
      next.set_stage(pb::STAGE_DECODE);
      next.set_target_host(target);
      if (target == opts_.pool->host) {
        next_state = "decode";  // same host: the transfer is the file already in place
        next_stream = stream_for(config::StageKind::kDecode, target);
      } else {
        if (!hooks_.hand_off)
          return make_error("config.transfer", "decode host {} differs from {} but no transfer sender is wired",
                            target, opts_.pool->host);
        next_state = "transfer";  // the receiver on the decode host enqueues the decode task
      }
      break;
    }
    default:
      H3_TRY(write_receipt(t, rec));
      next_state = "done";
      final_stage = true;
      break;
  }
  if (next_state == "transfer") {
    // Before the ack: the outbox record is what lets a restarted sender rebuild the decode task;
    // a crash between record and ack only re-offers a latent the receiver already holds.
    H3_TRY(hooks_.hand_off(next, fs::path(rec.output_path())));
  }
  std::string payload;
  next.SerializeToString(&payload);
  auto cmds = state::Store::complete_cmds(run, job, rec, next_state, next_stream, payload, final_stage);
  const std::vector<std::string> note_write = {"HINCRBY", keys::job(run, job),
                                               std::string("wrote:") + state::stage_key(stage_), "1"};
  if (wrote) cmds.push_back(note_write);
  auto ok = queue_->complete(e, cmds);
  if (!ok.ok()) return ok.error();
  if (!*ok) {
    if (wrote) (void)redis_->command(note_write);  // the file was written even if this completion does not count
    // Someone else owns the entry now (our lease lapsed); their completion counts, ours must not.
    probe_.lease_lost();
    spdlog::warn("run={} job={} {}: lease lost before completion; not enqueuing twice", run, job, state::stage_key(stage_));
    return {};
  }
  if (hooks_.on_event) hooks_.on_event("completed", t);
  spdlog::info("run={} job={} {} done in {:.3f}s -> {}", run, job, state::stage_key(stage_),
               (rec.end_unix_ms() - rec.start_unix_ms()) / 1000.0, next_state);
  (void)c;
  return {};
}

}  // namespace h3pipe::worker
