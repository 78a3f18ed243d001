#pragma once
// The stage worker: the one loop every stage service runs (encode, sample, decode).  It owns the
// docs/design.md rules — leased claim, idempotent skip, validated input, atomic output, ack with
// the next stage's enqueue in one step, retry with backoff, dead-letter after max deliveries — and
// calls a runtime only to compute.  It is a loop over ports (ports.h: TaskSource, GpuGate;
// engine.h: Ledger, Files): create() builds them over Redis and the disk, over() takes them
// (unit tests: tests/support/fake_stage_ports.h).  Transport-specific seams are Hooks.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/metrics/metrics.h"
#include "common/queue/queue.h"
#include "common/runtime/runtime.h"
#include "common/state/state.h"
#include "common/worker/disk_health.h"
#include "common/worker/drain_flag.h"
#include "common/worker/engine.h"
#include "common/worker/gpu_lease.h"
#include "common/worker/ports.h"

namespace h3pipe::worker {

class RedisTasks;

struct Hooks {
  // The dispatch policy (every stage: PoolBoard::policy()), which the pool's Claimer asks before
  // each claim of new work (claimer.h).  Default: always claim.  (StageWorker::over: the given
  // TaskSource asks its own.)
  ClaimPolicy policy;
  // Chooses the decode host for a finished latent.  Default: the shared choice
  // (worker::choose_decode_host, dispatch/decode_route.h) without queue backlogs.
  std::function<std::string(const pb::StageTask&)> decode_host;
  // Hands a durable latent to this host's transfer sender when the decode host differs.  The
  // receiver enqueues the decode task.  Required when any decode host differs from this one.
  std::function<Status(const pb::StageTask& decode_task, const std::filesystem::path& latent)>
      hand_off;
  // Then, after the completion is recorded, tells the sender (optional; engine.h Routing::nudge).
  std::function<Status(const pb::StageTask& decode_task)> nudge;
  // Called with "claimed" and with every outcome (outcome_name: "completed", "skipped",
  // "retried", "dead_lettered", "cancelled", "refused", "lease_lost"): tests and status lines.
  std::function<void(const std::string& event, const pb::StageTask&)> on_event;
};

struct Options {
  const config::Cluster* cluster = nullptr;
  const config::Pool* pool = nullptr;
  // Every connection the worker opens (its own, its lease keepers', its GPU lease's): the service's
  // one connector (the runner's).
  queue::Connector redis;
  std::string consumer;  // stable per pool (restart drains its own pending entries)
  std::string software_version = "0.1.0";
  // Scale-in (issue #23): after SIGTERM a task in progress runs on for at most this long less a
  // margin (min(2 s, 20 %)), then is handed back (released at once for another worker) instead
  // of being killed with its pod.  0: finish it however long it takes (the local stack).
  double stop_grace_s = 0;
  // The live MFU (h3pipe_pool_mfu) of a sample pool: the pool's GPUs' dense BF16 peak in GFLOP/s
  // (configs/gpus.json, by NVML's device name or the pool's gpu_model; the runner sets it), and
  // the declared GFLOP of a task whose runtime counts none (ComfyUI: configs/gpus.json
  // model_flops by the task's settings and spec).  0 / unset: the runtime's reported figures.
  double peak_gflops = 0;
  // {}: a default like every member's, so `{cluster, pool, redis, consumer}` warns of none left
  // out (-Wmissing-field-initializers).
  std::function<double(const std::string& settings_json, const pb::JobSpec& spec)> declared_gflop{};
};

// The stream a stage's tasks live on (decode: one stream per decode host).
std::string stream_for(config::StageKind stage, const std::string& host);
std::string group_for(config::StageKind stage);
// Every stage stream of the cluster (each pool's, and a GPU group's own sample stream), once:
// where a user's admitted jobs are (state/quota.h).
std::vector<std::string> stage_streams(const config::Cluster& c);

// The ports of a worker that does not build its own (StageWorker::over); they outlive it.
struct Ports {
  TaskSource* tasks = nullptr;
  Ledger* ledger = nullptr;
  Files* files = nullptr;
  GpuGate* gpu = nullptr;     // nullptr: the pool's GPUs are its own
  int then_rank = 0;          // a completed task's job goes on to this stage of the GPU group
  std::string sample_stream;  // where an encoded job's sample task goes ("": the shared stream)
  Clock clock = Clock::system();
  // stage.started / step / preview events (#37); nullptr: none.
  EventSink* events = nullptr;
};

class StageWorker final {
 public:
  // Over Redis (RedisTasks and its Claimer), this host's disk (DiskFiles) and, for a pool of a GPU
  // group, the group's lease (GpuLease), all from the config.
  static Result<std::unique_ptr<StageWorker>> create(Options opts,
                                                     std::unique_ptr<runtime::StageRuntime> rt,
                                                     metrics::WorkerProbe& probe, Hooks hooks);
  // Over the given ports (Options::redis unused).
  static std::unique_ptr<StageWorker> over(Options opts, Ports ports,
                                           std::unique_ptr<runtime::StageRuntime> rt,
                                           metrics::WorkerProbe& probe, Hooks hooks);
  ~StageWorker();
  // Runs until `stop` is set; a task in progress is finished first (graceful drain).
  void run(const std::atomic<bool>& stop);
  // One claim + process; returns false when there was nothing to do.
  Result<bool> step();
  // Told when the loop enters a storage state (a full disk, a Redis that cannot persist) and
  // when it leaves it ("") (disk_health.h); the service shows it on /readyz.
  void on_degraded(DiskHealth::OnChange f) { disk_.on_change(std::move(f)); }
  // The engine's count of an outcome (tests, status lines).
  long long count(Outcome o) const { return engine_->count(o); }

 private:
  StageWorker(Options opts, std::unique_ptr<runtime::StageRuntime> rt, metrics::WorkerProbe& probe,
              Hooks hooks);
  void wire(Ports ports);  // the engine over the ports
  // The probe's series of an outcome (`spec`: the task's, for the declared GFLOP).
  void report(Outcome o, const pb::StageRecord& rec, const pb::JobSpec& spec);
  // True once the stop flag has been set for longer than the grace allows (stop_grace_s).
  bool hand_back_due();
  bool stopping() const { return stop_ && stop_->load(); }

  Options opts_;
  std::unique_ptr<runtime::StageRuntime> rt_;  // the pool's stage's
  metrics::WorkerProbe& probe_;
  Hooks hooks_;
  Ports ports_;
  // What create() built the ports from (over(): none).
  std::unique_ptr<RedisTasks> owned_tasks_;
  std::unique_ptr<Files> owned_files_;
  std::unique_ptr<GpuGate> owned_gpu_;
  std::unique_ptr<EventSink> owned_events_;
  std::unique_ptr<StageEngine> engine_;
  pb::Stage stage_ = pb::STAGE_UNSPECIFIED;
  const std::atomic<bool>* stop_ = nullptr;  // run()'s flag, read by hand_back_due()
  std::optional<std::chrono::steady_clock::time_point> stop_seen_;
  DiskHealth disk_{"worker"};
  // Duty cycle (run/step, the loop's thread; metrics.h WorkerProbe::idle): why the last idle
  // step was idle, how long the last task's process() and its hand-off to the sender took, and
  // since when visible work has waited for the GPU group.
  const char* idle_cause_ = "no_job";
  double process_s_ = 0;
  std::shared_ptr<double> handoff_s_ = std::make_shared<double>(0);
  std::optional<std::chrono::steady_clock::time_point> gpu_wait_since_;
  bool claimed_once_ = false;
  // Drained by an operator (drain_flag.h): claims nothing until undrained (create() only).
  std::unique_ptr<DrainFlag> drain_;
};

// Submission ingest (runs in the encoder service): validates what arrives on h3pipe:submit
// exactly like the CLI and turns it into jobs + encode tasks, or failed jobs with the reason.  A
// loop over one port, Intake (ports.h).
class Ingest final {
 public:
  // Over Redis: its connection from `redis` (the service's connector).
  static Result<std::unique_ptr<Ingest>> create(const config::Cluster& c,
                                                const queue::Connector& redis,
                                                std::string consumer);
  // Over the given port, which outlives it.
  static std::unique_ptr<Ingest> over(const config::Cluster& c, Intake& intake);
  ~Ingest();
  void run(const std::atomic<bool>& stop);
  Result<bool> step();
  // Called at most once a second from run() with the dead-letter stream's length (a gauge).
  void on_dead_letters(std::function<void(long long)> f) { on_dead_letters_ = std::move(f); }
  void on_degraded(DiskHealth::OnChange f) { disk_.on_change(std::move(f)); }

 private:
  explicit Ingest(const config::Cluster& c) : cluster_(c) {}
  // A refused submission: a failed job, or a record beside the run when its job exists.
  Result<bool> reject(const queue::Entry& e, const std::string& run, const std::string& job,
                      const std::string& why);
  std::function<void(long long)> on_dead_letters_;
  DiskHealth disk_{"ingest"};
  const config::Cluster& cluster_;
  std::unique_ptr<Intake> owned_;  // create()'s RedisIntake
  Intake* intake_ = nullptr;
};

}  // namespace h3pipe::worker
