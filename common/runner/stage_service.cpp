// encoder / sampler / decoder: wire config -> runtime -> StageWorker (+ ingest in the encoder).
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
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
class FailingRuntime final : public runtime::EncodeRuntime,
                             public runtime::SampleRuntime,
                             public runtime::DecodeRuntime {
 public:
  explicit FailingRuntime(Error e) : e_(std::move(e)) {}
  Result<runtime::StageOutput> encode(const runtime::StageContext&) override { return e_; }
  Result<runtime::StageOutput> sample(const runtime::StageContext&) override { return e_; }
  Result<runtime::StageOutput> decode(const runtime::StageContext&) override { return e_; }

 private:
  Error e_;
};

}  // namespace

int stage_service_main(int argc, char** argv, config::StageKind stage) {
  ServiceInfo info{std::string(stage == config::StageKind::kEncode   ? "encoder"
                               : stage == config::StageKind::kSample ? "sampler"
                                                                     : "decoder"),
                   true, stage};
  return run(argc, argv, info, [stage](Context& ctx) -> int {
    media::set_libav_log_level(AV_LOG_ERROR);  // no x264 statistics per job in the logs
    keep_freed_memory();
    const auto& c = ctx.cluster;
    const auto& rt = c.runtime_for(*ctx.pool);
    runtime::FactoryArgs fa{&c, ctx.pool, &rt.settings, static_cast<std::uint64_t>(::getpid())};
    worker::Runtimes rts;
    Error err;
    bool ok = true;
    bool broken = false;
    auto take = [&](auto r, auto& slot) {
      if (r.ok())
        slot = std::move(r.value());
      else {
        ok = false;
        err = r.error();
      }
    };
    if (stage == config::StageKind::kEncode) take(runtime::make_encode(rt.name, fa), rts.encode);
    if (stage == config::StageKind::kSample) take(runtime::make_sample(rt.name, fa), rts.sample);
    if (stage == config::StageKind::kDecode) take(runtime::make_decode(rt.name, fa), rts.decode);
    if (!ok) {
      if (!errc::is_permanent(err.code)) {
        logger().critical("{}", err.to_string());
        return 2;
      }
      // A runtime that cannot load (bad weights file): stay up, never ready, and fail every task
      // with the reason, so tasks reach the dead-letter stream instead of a restart loop.
      logger().error(
          "runtime {} cannot start: {}; every task of pool {} will fail with this reason", rt.name,
          err.to_string(), ctx.pool->name);
      rts.encode = std::make_unique<FailingRuntime>(err);
      rts.sample = std::make_unique<FailingRuntime>(err);
      rts.decode = std::make_unique<FailingRuntime>(err);
      broken = true;
    }
    // Crash garbage (rule 2), only a day old and more: the root is shared with the host's other
    // pools and its transfer receiver, whose .part files may be live (a restart used to delete
    // them under their writers, whose commit then failed).
    std::size_t swept = artifacts::sweep_parts(
        stage == config::StageKind::kDecode ? c.output_root : c.artifact_root,
        std::chrono::hours(24));
    if (swept) logger().info("removed {} stale .part files (untouched for a day)", swept);

    metrics::WorkerProbe probe(*ctx.registry, config::stage_name(stage), ctx.pool->name, ctx.host);
    // GPU series of this pool's devices (NVML at run time; none -> h3pipe_gpu_available 0 only).
    auto gpus = gpu::GpuMonitor::start(*ctx.registry, ctx.pool->gpus, std::chrono::seconds(5));
    // The one place this service's Redis connections are made: everything below opens its own
    // (one per thread) from this connector.
    const queue::Connector redis(ctx.redis);
    worker::Options opts{&c, ctx.pool, redis, ctx.pool->name};
    // The pod's terminationGracePeriodSeconds (Helm sets it from the pool's profile): a task
    // that cannot finish within it is handed back rather than killed with the pod.
    if (const char* g = std::getenv("H3PIPE_STOP_GRACE_S"); g && *g)
      opts.stop_grace_s = std::atof(g);
    worker::Hooks hooks;
    std::unique_ptr<worker::PoolBoard> board;
    // The shared dispatch policy (common/schedule) decides whether this pool claims next, at
    // every stage.
    auto b = worker::PoolBoard::create(c, *ctx.pool, redis);
    if (!b.ok()) {
      logger().critical("{}", b.error().to_string());
      return 3;
    }
    board = std::move(b.value());
    hooks.may_claim = [&board] { return board->may_claim(); };
    // The policy's answer needs no read here (first_free, or no peer): the worker folds each
    // claim into the completion before it (one script between two tasks; issue #24).
    hooks.claims_unconditionally = board->claims_unconditionally();
    hooks.idle_wait = [&board](std::chrono::milliseconds d) { board->wait_for_work(d); };
    hooks.on_event = [&board](const std::string& ev, const pb::StageTask& t) {
      if (ev == "claimed")
        board->claimed(t);
      else
        board->idle();
    };
    if (stage == config::StageKind::kSample) {
      // Latents for another decode host go through this host's transfer sender: the outbox record
      // before the ack (durable), the nudge after it (the job's history has the sample record
      // before any receiver can act).
      hooks.hand_off = [&c, host = ctx.host](const pb::StageTask& t,
                                             const std::filesystem::path&) -> Status {
        return transfer::record_task(transfer::outbox_dir(c, host), t);
      };
      hooks.nudge = [&c, host = ctx.host](const pb::StageTask& t) -> Status {
        return transfer::notify_latent_ready(transfer::notify_endpoint(c, host), t, {});
      };
      // Several decode hosts: each latent goes where it is expected to be decoded soonest
      // (transfer + that host's decode backlog + its decode time; common/worker/decode_choice.h).
      std::set<std::string> decode_hosts;
      for (const auto* p : c.pools_on("", config::StageKind::kDecode)) decode_hosts.insert(p->host);
      if (decode_hosts.size() > 1) {
        auto conn = std::make_shared<std::unique_ptr<queue::Redis>>();
        hooks.decode_host = [&c, host = ctx.host, redis, conn](const pb::StageTask& t) {
          if (!*conn) {
            auto r = redis.connect();
            if (r.ok()) *conn = std::move(r.value());
          }
          auto chosen = worker::choose_decode_host(c, host, t, conn->get());
          logger().debug("run={} job={}: decode on {}", t.run_id(), t.job_id(), chosen);
          return chosen;
        };
      }
    }
    auto w = worker::StageWorker::create(opts, std::move(rts), probe, hooks);
    if (!w.ok()) {
      logger().critical("{}", w.error().to_string());
      return 3;
    }
    std::unique_ptr<worker::Ingest> ingest;
    std::thread ingest_thread;
    if (stage == config::StageKind::kEncode) {
      auto in = worker::Ingest::create(c, redis, ctx.pool->name);
      if (!in.ok()) {
        logger().critical("{}", in.error().to_string());
        return 3;
      }
      ingest = std::move(in.value());
      auto& dead =
          prometheus::BuildGauge()
              .Name("h3pipe_dead_letters")
              .Help("Entries in the dead-letter stream h3pipe:dead (exported by the encoder)")
              .Register(*ctx.registry)
              .Add({});
      ingest->on_idle([&dead](queue::Redis& r) {
        if (auto n = queue::dead_letter_count(r); n.ok()) dead.Set(static_cast<double>(*n));
      });
      ingest->on_degraded(
          [h = ctx.health](const std::string& why) { h->set_degraded("ingest", why); });
      ingest_thread = std::thread([&] { ingest->run(*ctx.stop); });
    }
    (*w)->on_degraded([h = ctx.health](const std::string& why) { h->set_degraded("worker", why); });
    ctx.health->set_ready(!broken);
    if (broken) ctx.health->set_failed(err.to_string());
    (*w)->run(*ctx.stop);
    ctx.health->set_ready(false);
    if (ingest_thread.joinable()) ingest_thread.join();
    return 0;
  });
}

}  // namespace h3pipe::runner
