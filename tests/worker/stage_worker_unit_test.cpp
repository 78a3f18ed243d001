// The stage worker's loop over its ports (label: unit): the order it claims in, the dispatch
// policy's no, the GPU group's turn, errors under it, and the stop (a task claimed ahead, a
// task past the stop grace), with the ports in memory (tests/support/fake_stage_ports.h).  The
// same loop over Redis runs in every e2e, chaos and container test.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/worker/worker.h"
#include "tests/support/fake_stage_ports.h"

using namespace h3pipe;
using namespace h3pipe::worker;
using h3pipe::test_support::MemoryFiles;
using h3pipe::test_support::MemoryGpu;
using h3pipe::test_support::MemoryLedger;
using h3pipe::test_support::MemoryTasks;
using state::JobState;

namespace {

// An encode runtime that runs `body` (default: writes its output, which the files then verify).
class FnEncode final : public runtime::StageRuntime {
 public:
  explicit FnEncode(std::function<Result<runtime::StageOutput>(const runtime::StageContext&)> f)
      : f_(std::move(f)) {}
  Result<runtime::StageOutput> run(const runtime::StageContext& ctx) override { return f_(ctx); }

 private:
  std::function<Result<runtime::StageOutput>(const runtime::StageContext&)> f_;
};

struct Rig {
  config::Cluster c = [] {
    auto c = test_support::stage_cluster();
    c.queue.block_ms = 40;  // the idle nap: block_ms/4 + 1
    return c;
  }();
  MemoryLedger ledger;
  MemoryFiles files;
  MemoryTasks tasks{ledger};
  MemoryGpu gpu;
  prometheus::Registry registry;
  metrics::WorkerProbe probe{registry, "encode", "enc", "h1"};
  std::vector<std::string> events;  // "claimed:<job>", "completed:<job>", ...
  // What the runtime does with a task (default: writes its output).
  std::function<Result<runtime::StageOutput>(const runtime::StageContext&)> body;
  std::unique_ptr<StageWorker> worker;

  Rig(Hooks hooks = {}, bool in_group = false, double stop_grace_s = 0) {
    body = [this](const runtime::StageContext& ctx) -> Result<runtime::StageOutput> {
      files.sha[ctx.output.string()] = "sha-" + ctx.spec->job_id();
      return runtime::StageOutput{"sha-" + ctx.spec->job_id(), 10};
    };
    std::unique_ptr<runtime::StageRuntime> rts =
        std::make_unique<FnEncode>([this](const runtime::StageContext& ctx) { return body(ctx); });
    auto on_event = hooks.on_event;
    hooks.on_event = [this, on_event](const std::string& ev, const pb::StageTask& t) {
      events.push_back(ev + ":" + t.job_id());
      if (on_event) on_event(ev, t);
    };
    Options o{&c, &c.pools[0], {}, "enc"};
    o.stop_grace_s = stop_grace_s;
    Ports ports;
    ports.tasks = &tasks;
    ports.ledger = &ledger;
    ports.files = &files;
    if (in_group) {
      ports.gpu = &gpu;
      ports.then_rank = 2;  // the group's sampler takes the job next
    }
    worker = StageWorker::over(o, std::move(ports), std::move(rts), probe, std::move(hooks));
  }
  // An encode task of job `job` (a spec that passes the submission's rules), queued.
  std::string task(const std::string& job) {
    const pb::StageTask t = test_support::stage_task(pb::STAGE_ENCODE, job);
    ledger.jobs[job].state = JobState::kQueued;
    return t.SerializeAsString();
  }
  void add(const std::string& id, const std::string& job) { tasks.add(id, task(job)); }
};

}  // namespace

TEST(StageWorker, TakesItsStreamInOrderAndHoldsEachLeaseOnlyWhileTheTaskRuns) {
  Rig rig;
  rig.add("1-0", "a");
  rig.add("2-0", "b");
  rig.add("3-0", "c");
  std::vector<std::set<std::string>> held_while_running;
  auto write = rig.body;
  rig.body = [&](const runtime::StageContext& ctx) {
    held_while_running.push_back(rig.tasks.held);
    return write(ctx);
  };
  for (int i = 0; i < 3; ++i) {
    auto r = rig.worker->step();
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    EXPECT_TRUE(*r);
  }
  auto idle = rig.worker->step();
  ASSERT_TRUE(idle.ok());
  EXPECT_FALSE(*idle);  // nothing left
  EXPECT_EQ(rig.tasks.taken_ids, (std::vector<std::string>{"1-0", "2-0", "3-0"}));
  ASSERT_EQ(held_while_running.size(), 3u);
  EXPECT_EQ(held_while_running[0], (std::set<std::string>{"1-0"}));
  EXPECT_EQ(held_while_running[2], (std::set<std::string>{"3-0"}));
  EXPECT_TRUE(rig.tasks.held.empty());
  EXPECT_TRUE(rig.ledger.pending.empty());  // every entry acked with its move
  for (const char* j : {"a", "b", "c"}) EXPECT_EQ(rig.ledger.jobs[j].state, JobState::kSample);
  ASSERT_EQ(rig.ledger.enqueued.size(), 3u);  // each job's sample task, in the same order
  pb::StageTask first;
  ASSERT_TRUE(first.ParseFromString(rig.ledger.enqueued[0].second));
  EXPECT_EQ(first.job_id(), "a");
  EXPECT_EQ(rig.events, (std::vector<std::string>{"claimed:a", "completed:a", "claimed:b",
                                                  "completed:b", "claimed:c", "completed:c"}));
  EXPECT_EQ(rig.worker->count(Outcome::kCompleted), 3);
}

TEST(StageWorker, APolicyThatSaysNoLeavesTheTaskQueuedAndWaitsInsteadOfSpinning) {
  bool yes = false;
  std::vector<std::chrono::milliseconds> waits;
  Rig rig;
  rig.tasks.policy.may_claim = [&] { return yes; };
  rig.tasks.policy.unconditional = false;
  rig.tasks.policy.idle_wait = [&](std::chrono::milliseconds d) { waits.push_back(d); };
  rig.add("1-0", "a");
  auto r = rig.worker->step();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(rig.tasks.asked, 1);
  EXPECT_EQ(rig.tasks.stream.size(), 1u);  // left for a pool that finishes it sooner
  EXPECT_TRUE(rig.tasks.taken_ids.empty());
  // One wait of block_ms/4 + 1 before the next ask (the board's: until a task arrives).
  EXPECT_EQ(waits, (std::vector<std::chrono::milliseconds>{std::chrono::milliseconds(11)}));
  yes = true;
  r = rig.worker->step();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_EQ(rig.ledger.jobs["a"].state, JobState::kSample);
  EXPECT_EQ(waits.size(), 1u);  // a yes waits for nothing
}

TEST(StageWorker, AGroupPoolTakesTheGpusOnlyForVisibleWorkAndHandsThemToTheJobsNextStage) {
  Rig rig({}, /*in_group=*/true);
  // Nothing visible: the GPUs are not even asked for (a pool never blocks the group idle).
  auto r = rig.worker->step();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(rig.gpu.acquires, 0);
  // Work, but another pool of the group runs: nothing is claimed.
  rig.add("1-0", "a");
  rig.gpu.other_holds = true;
  r = rig.worker->step();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(rig.gpu.acquires, 1);
  EXPECT_TRUE(rig.tasks.taken_ids.empty());
  EXPECT_TRUE(rig.gpu.released.empty());  // never held: nothing to let go
  // The GPUs free: the task runs with them, and they go to the group's sampler next.
  rig.gpu.other_holds = false;
  bool held_while_running = false;
  auto write = rig.body;
  rig.body = [&](const runtime::StageContext& ctx) {
    held_while_running = rig.gpu.held;
    return write(ctx);
  };
  r = rig.worker->step();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_TRUE(held_while_running);
  EXPECT_FALSE(rig.gpu.held);
  EXPECT_EQ(rig.gpu.released, (std::vector<int>{2}));
  // A failed attempt (retried): the GPUs are let go to whichever stage asks first.
  rig.add("2-0", "b");
  rig.body = [](const runtime::StageContext&) -> Result<runtime::StageOutput> {
    return make_error(errc::runtime::kGpu, "the encoder fell over");
  };
  r = rig.worker->step();
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_EQ(rig.worker->count(Outcome::kRetried), 1);
  EXPECT_EQ(rig.gpu.released, (std::vector<int>{2, 0}));
}

TEST(StageWorker, AnErrorUnderTheLoopRechecksItsOwnPendingAndGoesOn) {
  std::atomic<bool> stop{false};
  Hooks h;
  h.on_event = [&](const std::string& ev, const pb::StageTask&) {
    if (ev == "completed") stop = true;
  };
  Rig rig(h);
  rig.add("1-0", "a");
  rig.tasks.fail_next = make_error(errc::redis::kIo, "connection reset by peer");
  rig.worker->run(stop);  // returns once the task after the error completed
  EXPECT_EQ(rig.tasks.rechecks, 1);
  EXPECT_EQ(rig.tasks.taken_ids, (std::vector<std::string>{"1-0"}));
  EXPECT_EQ(rig.ledger.jobs["a"].state, JobState::kSample);
}

TEST(StageWorker, AtStopATaskClaimedAheadIsHandedBackAtOnce) {
  Rig rig;
  auto payload = rig.task("a");
  Taken ahead;
  ahead.entry.id = "7-0";
  ahead.entry.payload = payload;
  rig.tasks.ahead = std::move(ahead);
  rig.ledger.pending.insert("7-0");
  std::atomic<bool> stop{true};
  rig.worker->run(stop);
  EXPECT_EQ(rig.tasks.handed_back_ahead, 1);
  EXPECT_FALSE(rig.tasks.claimed_ahead());
  EXPECT_TRUE(rig.ledger.pending.empty());
  ASSERT_EQ(rig.tasks.stream.size(), 1u);  // claimable by the next sweep of any worker
  EXPECT_EQ(rig.tasks.stream.front().first, "7-0");
  EXPECT_EQ(rig.ledger.jobs["a"].state, JobState::kQueued);  // never started
}

TEST(StageWorker, ATaskStillRunningWhenTheStopGraceRunsOutIsHandedBackAndSaidSo) {
  std::atomic<bool> stop{false};
  // Grace 0.5 s, margin min(2 s, 20 %): the task is handed back 0.4 s after the stop.
  Rig rig({}, false, 0.5);
  rig.add("1-0", "a");
  bool saw_cancel = false;
  rig.body = [&](const runtime::StageContext& ctx) -> Result<runtime::StageOutput> {
    stop = true;  // SIGTERM arrives while the stage runs
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < until) {
      if (ctx.cancelled()) {
        saw_cancel = true;
        return make_error(errc::runtime::kCancelled, "stopped");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return make_error(errc::runtime::kNoOutput, "never told to stop");
  };
  const auto t0 = std::chrono::steady_clock::now();
  rig.worker->run(stop);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(saw_cancel);
  EXPECT_GE(took, 0.4);
  EXPECT_EQ(rig.worker->count(Outcome::kRetried), 1);
  ASSERT_TRUE(rig.ledger.retries.count("1-0"));
  EXPECT_EQ(rig.ledger.retries["1-0"], 0);  // claimable by another worker at once
  EXPECT_NE(rig.ledger.jobs["a"].handed_back.find("handed back by pool enc"), std::string::npos)
      << rig.ledger.jobs["a"].handed_back;
}

namespace {

class FnSample final : public runtime::StageRuntime {
 public:
  explicit FnSample(std::function<Result<runtime::StageOutput>(const runtime::StageContext&)> f)
      : f_(std::move(f)) {}
  Result<runtime::StageOutput> run(const runtime::StageContext& ctx) override { return f_(ctx); }

 private:
  std::function<Result<runtime::StageOutput>(const runtime::StageContext&)> f_;
};

double gauge(prometheus::Registry& reg, const std::string& name) {
  for (const auto& f : reg.Collect())
    if (f.name == name)
      for (const auto& m : f.metric) return m.gauge.value;
  return -1;
}

// A sample pool whose runtime counts no FLOPs (ComfyUI) and reports no peak: h3pipe_pool_mfu =
// the declared GFLOP (Options::declared_gflop, configs/gpus.json model_flops in the service) over
// run_s over the pool's peak from configs/gpus.json (Options::peak_gflops).  It read 0 on every GPU
// pool when only the runtime's reported figures counted.
double sampler_mfu(double peak_gflops, double* elapsed_s, std::vector<std::string>* asked) {
  config::Cluster c = test_support::stage_cluster();
  c.pools[1].runtime = config::RuntimeRef{"comfyui", {{"workflow", "templates/wan2.1_t2v.json"}}};
  MemoryLedger ledger;
  MemoryFiles files;
  MemoryTasks tasks{ledger};
  prometheus::Registry registry;
  metrics::WorkerProbe probe{registry, "sample", "samp", "h1"};
  std::unique_ptr<runtime::StageRuntime> rts =
      std::make_unique<FnSample>([&](const runtime::StageContext& ctx) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a measurable run_s
        files.sha[ctx.output.string()] = "sha-" + ctx.spec->job_id();
        return Result<runtime::StageOutput>(runtime::StageOutput{"sha-" + ctx.spec->job_id(), 10});
      });
  Options o{&c, &c.pools[1], {}, "samp"};
  o.peak_gflops = peak_gflops;
  o.declared_gflop = [asked](const std::string& settings, const pb::JobSpec& spec) {
    asked->push_back(settings + fmt::format(" {}x{}x{} {} steps", spec.width(), spec.height(),
                                            spec.frames(), spec.steps()));
    return 50.0;
  };
  Ports ports;
  ports.tasks = &tasks;
  ports.ledger = &ledger;
  ports.files = &files;
  auto worker = StageWorker::over(o, std::move(ports), std::move(rts), probe, {});
  const auto t0 = std::chrono::steady_clock::now();
  for (const char* job : {"a", "b"}) {  // b's run reports a's outcome (deferred reports)
    pb::StageTask t = test_support::stage_task(pb::STAGE_SAMPLE, job);
    files.sha["/art/r1/" + std::string(job) + "/cond.safetensors"] = "c";
    ledger.jobs[job].state = JobState::kSample;
    tasks.add(std::string(job == std::string("a") ? "1-0" : "2-0"), t.SerializeAsString());
    auto r = worker->step();
    EXPECT_TRUE(r.ok() && *r) << (r.ok() ? "idle" : r.error().to_string());
  }
  *elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(worker->count(Outcome::kCompleted), 2);
  return gauge(registry, "h3pipe_pool_mfu");
}

}  // namespace

TEST(StageWorker, TheLiveMfuOfAComfyUiPoolUsesTheDeclaredFlopsAndTheGpuTablesPeak) {
  double elapsed = 0;
  std::vector<std::string> asked;
  const double mfu = sampler_mfu(1000, &elapsed, &asked);
  ASSERT_FALSE(asked.empty());
  EXPECT_NE(asked[0].find("wan2.1_t2v.json"), std::string::npos) << asked[0];
  EXPECT_NE(asked[0].find("64x64x9 4 steps"), std::string::npos) << asked[0];
  // 50 GFLOP over a run of 0.05 s .. the whole test's time, at 1000 GFLOP/s peak.
  EXPECT_GT(mfu, 50 / elapsed / 1000 - 1e-9);
  EXPECT_LE(mfu, 50 / 0.05 / 1000 + 1e-9);
  // No peak (a pool whose GPU the table does not know, a runtime that reports none): no MFU.
  EXPECT_EQ(sampler_mfu(0, &elapsed, &asked), 0);
}
