// encoder / sampler / decoder: config -> runtime -> StageWorker, one service main for the three;
// what differs between them is one row of kStageWiring.
#include <malloc.h>
#include <prometheus/gauge.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/gpu/gpu_monitor.h"
#include "common/logging/log.h"
#include "common/media/media.h"

extern "C" {
#include <libavutil/log.h>
}
#include "common/queue/connector.h"
#include "common/queue/queue.h"
#include "common/runner/runner.h"
#include "common/schedule/gpu_table.h"
#include "common/state/pool_board_store.h"
#include "common/transfer/config_map.h"
#include "common/transfer/outbox.h"
#include "common/worker/decode_choice.h"
#include "common/worker/pool_board.h"
#include "common/worker/worker.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("stage");
  return *l;
}

}  // namespace

namespace h3pipe::runner {

namespace {

// Every task allocates and frees the same large buffers (codec contexts and frames, latents):
// keep freed memory in the heap instead of handing it back to the kernel after each task, which
// cost every sim MP4 write ~200 page faults (several ms on a paravirtualized VM; bench_mp4
// --keep-heap).  Blocks over 32 MiB are still mapped and unmapped on their own.
void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

// Stands in for a runtime whose start-up failed permanently: every task fails with that error.
class FailingRuntime final : public runtime::StageRuntime {
 public:
  explicit FailingRuntime(Error e) : e_(std::move(e)) {}
  Result<runtime::StageOutput> run(const runtime::StageContext&) override { return e_; }

 private:
  Error e_;
};

// The sampler's hooks: latents for another decode host go through this host's transfer sender
// (the outbox record before the ack, durable; the nudge after it, so that the job's history has
// the sample record before any receiver can act), and with several decode hosts each latent goes
// where it is expected to be decoded soonest (transfer + that host's decode backlog + its decode
// time; common/worker/decode_choice.h).
void wire_hand_off(const Context& ctx, const queue::Connector& redis, worker::Hooks& hooks) {
  const auto& c = ctx.cluster;
  hooks.hand_off = [&c, host = ctx.host](const pb::StageTask& t,
                                         const std::filesystem::path&) -> Status {
    return transfer::record_task(transfer::outbox_dir(c, host), t);
  };
  hooks.nudge = [&c, host = ctx.host](const pb::StageTask& t) -> Status {
    return transfer::notify_latent_ready(transfer::notify_endpoint(c, host), t, {});
  };
  std::set<std::string> decode_hosts;
  for (const auto* p : c.pools_on("", config::StageKind::kDecode)) decode_hosts.insert(p->host);
  if (decode_hosts.size() > 1) {
    // The board read on a connection of its own, opened on first use (none: from the config).
    auto board = std::make_shared<std::unique_ptr<state::BoardReader>>();
    hooks.decode_host = [&c, host = ctx.host, redis, board](const pb::StageTask& t) {
      if (!*board) {
        auto r = redis.connect();
        if (r.ok()) *board = std::make_unique<state::RedisPoolBoardStore>(std::move(r.value()));
      }
      auto chosen = worker::choose_decode_host(c, host, t, board->get());
      logger().debug("run={} job={}: decode on {}", t.run_id(), t.job_id(), chosen);
      return chosen;
    };
  }
}

// The encoder's submission ingest (h3pipe:submit -> jobs + encode tasks) on its own thread, and
// the dead-letter gauge it exports while idle.
class IngestThread final {
 public:
  static Result<std::unique_ptr<IngestThread>> start(Context& ctx, const queue::Connector& redis) {
    auto in = worker::Ingest::create(ctx.cluster, redis, ctx.pool->name);
    if (!in.ok()) return in.error();
    std::unique_ptr<IngestThread> t(new IngestThread(std::move(in.value())));
    auto& dead =
        prometheus::BuildGauge()
            .Name("h3pipe_dead_letters")
            .Help("Entries in the dead-letter stream h3pipe:dead (exported by the encoder)")
            .Register(*ctx.registry)
            .Add({});
    t->ingest_->on_dead_letters([&dead](long long n) { dead.Set(static_cast<double>(n)); });
    t->ingest_->on_degraded(
        [h = ctx.health](const std::string& why) { h->set_degraded("ingest", why); });
    t->thread_ = std::thread([t = t.get(), stop = ctx.stop] { t->ingest_->run(*stop); });
    return t;
  }
  // The runner's stop flag ends the loop; this waits for it.
  ~IngestThread() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  explicit IngestThread(std::unique_ptr<worker::Ingest> in) : ingest_(std::move(in)) {}
  std::unique_ptr<worker::Ingest> ingest_;
  std::thread thread_;
};

// What differs between the three stage services besides their rows of the stage table
// (config/stages.h: the service's name, what it reads and writes) and their runtimes
// (runtime::make_runtime), one row each; the rest of the wiring (runtime start-up, the dispatch
// board, the worker loop, health) is the same for all.
struct StageWiring {
  config::StageKind stage;
  // Hooks only this stage has (the sampler's hand-off and decode-host choice), or none.
  void (*wire_hooks)(const Context& ctx, const queue::Connector& redis, worker::Hooks& hooks);
  bool runs_ingest;  // the encoder also turns submissions into jobs (IngestThread)
};

constexpr StageWiring kStageWiring[] = {
    {config::StageKind::kEncode, nullptr, true},
    {config::StageKind::kSample, wire_hand_off, false},
    {config::StageKind::kDecode, nullptr, false},
};

const StageWiring& wiring_of(config::StageKind stage) {
  for (const auto& w : kStageWiring)
    if (w.stage == stage) return w;
  std::abort();  // every StageKind has a row (the table lists all three)
}

// The pool's runtime, or (a permanent start-up failure: a bad weights file) one that fails every
// task with the reason, which `broken` holds, so that tasks reach the dead-letter stream instead
// of a restart loop.  A transient failure is returned: the service exits and restarts.
struct StartedRuntime {
  std::unique_ptr<runtime::StageRuntime> rt;
  std::optional<Error> broken;
};
Result<StartedRuntime> start_runtime(const StageWiring& w, const Context& ctx) {
  const auto& rt = ctx.cluster.runtime_for(*ctx.pool);
  runtime::FactoryArgs fa{&ctx.cluster, ctx.pool, &rt.settings,
                          static_cast<std::uint64_t>(::getpid())};
  StartedRuntime out;
  auto made = runtime::make_runtime(w.stage, rt.name, fa);
  if (made.ok()) {
    out.rt = std::move(*made);
    return out;
  }
  if (!errc::is_permanent(made.error().code)) return made.error();
  const Error& e = out.broken.emplace(made.error());
  logger().error("runtime {} cannot start: {}; every task of pool {} will fail with this reason",
                 rt.name, e.to_string(), ctx.pool->name);
  out.rt = std::make_unique<FailingRuntime>(e);
  return out;
}

// The live MFU's inputs (h3pipe_pool_mfu, docs/report.md): the pool's GPUs' peak from
// configs/gpus.json by the name NVML gives its first device, else by the pool's gpu_model; and the
// declared GFLOP of a sample task whose runtime counts none (model_flops).
void set_mfu_inputs(const config::Pool& pool, worker::Options& opts) {
  auto table = schedule::load_gpu_table();
  if (!table.ok()) {
    logger().warn("h3pipe_pool_mfu: {}", table.error().to_string());
    return;
  }
  std::string device;
  if (!pool.gpus.empty()) {
    const auto inv = gpu::probe_inventory();
    const int idx =
        gpu::nvml_indices({pool.gpus.front()}, std::getenv("NVIDIA_VISIBLE_DEVICES")).front();
    if (inv.nvml && idx >= 0 && idx < static_cast<int>(inv.names.size())) device = inv.names[idx];
  }
  opts.peak_gflops = device.empty() ? 0 : table->peak_gflops(device, pool.gpus.size());
  if (opts.peak_gflops <= 0 && !pool.gpu_model.empty())
    opts.peak_gflops = table->peak_gflops(pool.gpu_model, pool.gpus.size());
  logger().info("h3pipe_pool_mfu: peak {:.0f} GFLOP/s ({} x {})", opts.peak_gflops,
                std::max<std::size_t>(1, pool.gpus.size()),
                !device.empty()           ? device
                : !pool.gpu_model.empty() ? pool.gpu_model
                                          : "unknown");
  opts.declared_gflop = [t = std::move(table.value())](const std::string& settings,
                                                       const pb::JobSpec& spec) {
    return t.declared_gflop(settings, spec.width(), spec.height(), spec.frames(), spec.steps());
  };
}

}  // namespace

int stage_service_main(int argc, char** argv, config::StageKind stage) {
  const StageWiring& wiring = wiring_of(stage);
  ServiceInfo info{std::string(config::describe_stage(stage).service), true, stage};
  return run(argc, argv, info, [&wiring](Context& ctx) -> int {
    media::set_libav_log_level(AV_LOG_ERROR);  // no x264 statistics per job in the logs
    keep_freed_memory();
    const auto& c = ctx.cluster;
    auto started = start_runtime(wiring, ctx);
    if (!started.ok()) {
      logger().critical("{}", started.error().to_string());
      return 2;
    }
    const std::optional<Error> broken = started->broken;
    // Crash garbage (rule 2), only a day old and more: the root is shared with the host's other
    // pools and its transfer receiver, whose .part files may be live (a restart used to delete
    // them under their writers, whose commit then failed).
    std::size_t swept = artifacts::sweep_parts(
        config::describe_stage(wiring.stage).writes == config::Artifact::kVideo ? c.output_root
                                                                                : c.artifact_root,
        std::chrono::hours(24));
    if (swept) logger().info("removed {} stale .part files (untouched for a day)", swept);

    metrics::WorkerProbe probe(*ctx.registry, config::stage_name(wiring.stage), ctx.pool->name,
                               ctx.host);
    // GPU series of this pool's devices (NVML at run time; none -> h3pipe_gpu_available 0 only).
    auto gpus = gpu::GpuMonitor::start(*ctx.registry, ctx.pool->gpus, std::chrono::seconds(5));
    // How many GPUs this pool's runtime uses: 0 for a sim pool or one with no gpus, so
    // H3pipeGpuMissing (configs/prometheus/alerts.yml) stays quiet on a rehearsal without GPUs.
    prometheus::BuildGauge()
        .Name("h3pipe_pool_gpus")
        .Help("GPUs this pool's runtime uses (0: sim runtime or no gpus; no GPU alert for it)")
        .Register(*ctx.registry)
        .Add({{"stage", config::stage_name(wiring.stage)},
              {"pool", ctx.pool->name},
              {"host", ctx.host}})
        .Set(c.runtime_for(*ctx.pool).name == "sim" ? 0.0
                                                    : static_cast<double>(ctx.pool->gpus.size()));
    // The one place this service's Redis connections are made: everything below opens its own
    // (one per thread) from this connector.
    const queue::Connector redis(ctx.redis);
    worker::Options opts{&c, ctx.pool, redis, ctx.pool->name};
    // The pod's terminationGracePeriodSeconds (Helm sets it from the pool's profile): a task
    // that cannot finish within it is handed back rather than killed with the pod.
    if (const char* g = std::getenv("H3PIPE_STOP_GRACE_S"); g && *g)
      opts.stop_grace_s = std::atof(g);
    if (wiring.stage == config::StageKind::kSample) set_mfu_inputs(*ctx.pool, opts);
    // The shared dispatch policy (common/dispatch) decides whether this pool claims next, at
    // every stage.
    auto b = worker::PoolBoard::create(c, *ctx.pool, redis);
    if (!b.ok()) {
      logger().critical("{}", b.error().to_string());
      return 3;
    }
    std::unique_ptr<worker::PoolBoard> board = std::move(b.value());
    // Its GPUs as NVML reports them, in its heartbeat (GET /v1/fleet); none on a CPU pool.
    if (gpus)
      board->set_gpu_use([g = gpus.get()]() -> std::optional<worker::PoolBoard::GpuUse> {
        const auto u = g->use();
        if (!u) return std::nullopt;
        return worker::PoolBoard::GpuUse{u->devices, u->utilization, u->memory_used_bytes,
                                         u->memory_total_bytes};
      });
    worker::Hooks hooks;
    // Asked by the pool's Claimer (common/worker/claimer.h), the one place a pool decides what it
    // runs next.
    hooks.policy = board->policy();
    hooks.on_event = [&board](const std::string& ev, const pb::StageTask& t) {
      if (ev == "claimed")
        board->claimed(t);
      else
        board->idle();
    };
    if (wiring.wire_hooks) wiring.wire_hooks(ctx, redis, hooks);
    auto w = worker::StageWorker::create(opts, std::move(started->rt), probe, hooks);
    if (!w.ok()) {
      logger().critical("{}", w.error().to_string());
      return 3;
    }
    std::unique_ptr<IngestThread> ingest;
    if (wiring.runs_ingest) {
      auto in = IngestThread::start(ctx, redis);
      if (!in.ok()) {
        logger().critical("{}", in.error().to_string());
        return 3;
      }
      ingest = std::move(in.value());
    }
    (*w)->on_degraded([h = ctx.health](const std::string& why) { h->set_degraded("worker", why); });
    ctx.health->set_ready(!broken);
    if (broken) ctx.health->set_failed(broken->to_string());
    (*w)->run(*ctx.stop);
    ctx.health->set_ready(false);
    ingest.reset();  // joins the ingest thread (stopped by the same flag)
    return 0;
  });
}

}  // namespace h3pipe::runner
