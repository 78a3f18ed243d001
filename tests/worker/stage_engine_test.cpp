// The stage engine's rules without a Redis or a disk (label: unit): every outcome, with the
// ledger in memory applying the same transition table (state::judge) that Store::apply hands its
// Lua script (job_state_redis_test checks the two agree), files in memory
// (tests/support/fake_stage_ports.h) and a settable clock.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "common/queue/keys.h"
#include "common/state/job_state.h"
#include "common/state/receipts.h"
#include "common/worker/engine.h"
#include "common/worker/worker.h"
#include "tests/support/fake_stage_ports.h"

using namespace h3pipe;
using namespace h3pipe::worker;
using h3pipe::test_support::MemoryFiles;
using h3pipe::test_support::MemoryLedger;
using state::Applied;
using state::JobState;

namespace {

struct Rig {
  config::Cluster c = test_support::stage_cluster();
  MemoryLedger ledger;
  MemoryFiles files;
  long long now = 1'000'000;  // the injected clock, ms
  std::function<Result<runtime::StageOutput>(const runtime::StageContext&)> runtime;
  std::unique_ptr<StageEngine> engine;
  int runs = 0;

  explicit Rig(config::StageKind kind) {
    const config::Pool* pool = nullptr;
    for (const auto& p : c.pools)
      if (p.stage == kind) pool = &p;
    runtime = [this](const runtime::StageContext& ctx) -> Result<runtime::StageOutput> {
      files.sha[ctx.output.string()] = "sha-out";
      return runtime::StageOutput{"sha-out", 10};
    };
    Clock clock{[this] { return now; }, [this] { return now; }};
    Routing routing{[](const pb::StageTask&) { return std::string("h1"); }, nullptr};
    engine = std::make_unique<StageEngine>(
        EngineOptions{&c, pool}, ledger, files,
        [this](const runtime::StageContext& ctx) {
          ++runs;
          return runtime(ctx);
        },
        clock, routing);
  }
  // A task of job `job` at this stage, its job at `at`, claimed as entry `id`.
  Claimed claim(pb::Stage stage, const std::string& job, JobState at,
                const std::string& id = "1-0") {
    const pb::StageTask t = test_support::stage_task(stage, job);
    if (!ledger.jobs.count(job)) ledger.jobs[job].state = at;
    ledger.pending.insert(id);
    return {id, t.SerializeAsString()};
  }
};

std::string out_path(const runtime::StageContext& ctx) {
  return ctx.output.string();
}

}  // namespace

TEST(StageEngine, ACompletedEncodeAdvancesTheJobAndEnqueuesItsSampleInTheSameMove) {
  Rig rig(config::StageKind::kEncode);
  auto o = rig.engine->process(rig.claim(pb::STAGE_ENCODE, "j", JobState::kQueued), 0.5);
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(*o, Outcome::kCompleted);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kSample);
  ASSERT_EQ(rig.ledger.enqueued.size(), 1u);
  EXPECT_EQ(rig.ledger.enqueued[0].first, keys::stream("sample"));
  pb::StageTask next;
  ASSERT_TRUE(next.ParseFromString(rig.ledger.enqueued[0].second));
  EXPECT_EQ(next.stage(), pb::STAGE_SAMPLE);
  EXPECT_EQ(next.input_sha256(), "sha-out");
  EXPECT_EQ(next.enqueued_unix_ms(), rig.now);
  EXPECT_EQ(rig.ledger.jobs["j"].wrote, 1);
  EXPECT_EQ(rig.ledger.jobs["j"].history.size(), 1u);
  EXPECT_EQ(rig.engine->count(Outcome::kCompleted), 1);
  EXPECT_TRUE(rig.ledger.pending.empty());
}

TEST(StageEngine, AnOutputAlreadyPresentIsSkippedWithoutRunningTheRuntime) {
  Rig rig(config::StageKind::kSample);
  rig.files.sha["/art/r1/j/cond.safetensors"] = "c";
  auto claimed = rig.claim(pb::STAGE_SAMPLE, "j", JobState::kSample);
  // First run writes the latent; a redelivery of the same task (the ack was lost) finds it.
  ASSERT_EQ(*rig.engine->process(claimed, 0), Outcome::kCompleted);
  rig.ledger.jobs["j"].state = JobState::kSample;
  rig.ledger.pending.insert(claimed.entry_id);
  auto o = rig.engine->process(claimed, 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kSkipped);
  EXPECT_EQ(rig.runs, 1);
  EXPECT_EQ(rig.ledger.jobs["j"].wrote, 1);  // the skip wrote nothing
  EXPECT_EQ(rig.engine->count(Outcome::kSkipped), 1);
}

TEST(StageEngine, ACorruptOutputIsRemovedAndRedone) {
  Rig rig(config::StageKind::kEncode);
  auto claimed = rig.claim(pb::STAGE_ENCODE, "j", JobState::kEncode);
  rig.files.corrupt.insert("/art/r1/j/cond.safetensors");
  // The path is whatever paths::conditioning says; learn it from the runtime's context.
  std::string seen;
  rig.runtime = [&](const runtime::StageContext& ctx) -> Result<runtime::StageOutput> {
    seen = out_path(ctx);
    return runtime::StageOutput{"sha-new", 10};
  };
  rig.files.corrupt.clear();
  ASSERT_EQ(*rig.engine->process(claimed, 0), Outcome::kCompleted);
  rig.files.corrupt.insert(seen);
  rig.ledger.jobs["j"].state = JobState::kEncode;
  rig.ledger.pending.insert(claimed.entry_id);
  ASSERT_EQ(*rig.engine->process(claimed, 0), Outcome::kCompleted);
  EXPECT_EQ(rig.runs, 2);
  EXPECT_FALSE(rig.files.corrupt.count(seen));
}

TEST(StageEngine, AFailedAttemptIsRetriedWithDoublingBackoffThenDeadLettered) {
  Rig rig(config::StageKind::kEncode);
  rig.runtime = [](const runtime::StageContext&) -> Result<runtime::StageOutput> {
    return make_error(errc::io::kWrite, "disk hiccup");
  };
  auto claimed = rig.claim(pb::STAGE_ENCODE, "j", JobState::kQueued);
  std::vector<int> backoffs;
  for (int i = 0; i < 2; ++i) {
    auto o = rig.engine->process(claimed, 0);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(*o, Outcome::kRetried);
    backoffs.push_back(rig.ledger.retries[claimed.entry_id]);
  }
  EXPECT_EQ(backoffs, (std::vector<int>{100, 200}));
  EXPECT_EQ(rig.ledger.jobs["j"].error, "io.write: disk hiccup");
  auto o = rig.engine->process(claimed, 0);  // delivery 3 of max_deliveries 3
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kDeadLettered);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kFailed);
  ASSERT_EQ(rig.ledger.dead.size(), 1u);
  EXPECT_NE(rig.ledger.dead[0].find("encode failed 3 of 3 deliveries: io.write: disk hiccup"),
            std::string::npos)
      << rig.ledger.dead[0];
  EXPECT_EQ(rig.engine->count(Outcome::kRetried), 2);
  EXPECT_EQ(rig.engine->count(Outcome::kDeadLettered), 1);
}

TEST(StageEngine, APermanentRuntimeErrorIsDeadLetteredOnTheFirstDelivery) {
  Rig rig(config::StageKind::kEncode);
  rig.runtime = [](const runtime::StageContext&) -> Result<runtime::StageOutput> {
    return make_error(errc::runtime::kPermanentComfyuiRejected, "node 3: no such class");
  };
  auto o = rig.engine->process(rig.claim(pb::STAGE_ENCODE, "j", JobState::kQueued), 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kDeadLettered);
  EXPECT_EQ(rig.ledger.retries.size(), 0u);
  EXPECT_NE(rig.ledger.jobs["j"].error.find("failed permanently on delivery 1"), std::string::npos);
}

TEST(StageEngine, ADeliveryBeyondTheBudgetIsDeadLetteredWithTheLastError) {
  // A worker that died three times running it: no error of its own, the budget is spent.
  Rig rig(config::StageKind::kEncode);
  auto claimed = rig.claim(pb::STAGE_ENCODE, "j", JobState::kEncode);
  rig.ledger.jobs["j"].attempts = 3;
  auto o = rig.engine->process(claimed, 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kDeadLettered);
  EXPECT_EQ(rig.runs, 0);
  EXPECT_NE(rig.ledger.dead[0].find("the worker died while running it"), std::string::npos);
}

TEST(StageEngine, ACancelledRunCancelsTheJobWithItsReasonAndRunsNothing) {
  Rig rig(config::StageKind::kSample);
  rig.ledger.cancelled = true;
  auto o = rig.engine->process(rig.claim(pb::STAGE_SAMPLE, "j", JobState::kSample), 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kCancelled);
  EXPECT_EQ(rig.runs, 0);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kCancelled);
  EXPECT_EQ(rig.ledger.jobs["j"].error,
            "cancelled at sample: the run was cancelled (h3pipe cancel)");
  EXPECT_EQ(rig.engine->count(Outcome::kCancelled), 1);
}

TEST(StageEngine, CancellationReachesARunningStageAtMostOncePerPollIntervalOfTheInjectedClock) {
  Rig rig(config::StageKind::kSample);
  rig.files.sha["/art/r1/j/cond.safetensors"] = "c";
  int polls_before_cancel = -1;
  static_assert(kCancelPollMs == 250);
  rig.runtime = [&](const runtime::StageContext& ctx) -> Result<runtime::StageOutput> {
    // The runtime polls 10 times in 220 ms: the ledger is not asked (the start just asked).
    for (int i = 0; i < 10; ++i, rig.now += 22) EXPECT_FALSE(ctx.cancelled());
    EXPECT_EQ(rig.ledger.cancel_polls, 0);
    rig.now += 50;  // 270 ms in: one ask
    EXPECT_FALSE(ctx.cancelled());
    polls_before_cancel = rig.ledger.cancel_polls;
    rig.ledger.cancelled = true;
    EXPECT_FALSE(ctx.cancelled());  // asked again only an interval later
    rig.now += kCancelPollMs;
    EXPECT_TRUE(ctx.cancelled());
    return make_error(errc::runtime::kCancelled, "stopped");
  };
  auto o = rig.engine->process(rig.claim(pb::STAGE_SAMPLE, "j", JobState::kSample), 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(polls_before_cancel, 1);
  EXPECT_EQ(rig.ledger.cancel_polls, 2);
  EXPECT_EQ(*o, Outcome::kCancelled);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kCancelled);
}

TEST(StageEngine, ARunResumedBetweenTheStartAndTheCancelRunsItsTask) {
  // The start read the run's flag set; `resume` clears it before the cancel move, which then
  // does not apply: the task runs (resume after cancel lost 21 of 30 jobs this way).
  Rig rig(config::StageKind::kEncode);
  rig.ledger.cancelled = true;
  rig.ledger.after_start = [&] { rig.ledger.cancelled = false; };
  auto o = rig.engine->process(rig.claim(pb::STAGE_ENCODE, "j", JobState::kQueued), 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kCompleted);
  EXPECT_EQ(rig.runs, 1);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kSample);
  EXPECT_EQ(rig.engine->count(Outcome::kCancelled), 0);
}

TEST(StageEngine, AStaleTaskOfAJobNotAtItsStageIsRefusedAndDropped) {
  for (JobState at : {JobState::kDone, JobState::kFailed, JobState::kCancelled, JobState::kSample,
                      JobState::kNone}) {
    SCOPED_TRACE(state::job_state_name(at));
    Rig rig(config::StageKind::kEncode);
    auto o = rig.engine->process(rig.claim(pb::STAGE_ENCODE, "j", at), 0);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(*o, Outcome::kRefused);
    EXPECT_EQ(rig.runs, 0);
    EXPECT_EQ(rig.ledger.jobs["j"].state, at);  // untouched
    EXPECT_TRUE(rig.ledger.pending.empty());    // dropped
    EXPECT_EQ(rig.ledger.illegal[std::string(state::job_state_name(at)) + ">encode"], 1);
    EXPECT_EQ(rig.engine->count(Outcome::kRefused), 1);
  }
}

TEST(StageEngine, ADoneJobIsNeverFailedByALateDeadLetter) {
  // The job finished through another delivery while this one ran and failed for good.
  Rig rig(config::StageKind::kEncode);
  auto claimed = rig.claim(pb::STAGE_ENCODE, "j", JobState::kQueued);
  rig.runtime = [&](const runtime::StageContext&) -> Result<runtime::StageOutput> {
    rig.ledger.jobs["j"].state = JobState::kDone;
    return make_error(errc::runtime::kPermanentInput, "no");
  };
  auto o = rig.engine->process(claimed, 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kRefused);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kDone);
  EXPECT_TRUE(rig.ledger.dead.empty());
  EXPECT_EQ(rig.ledger.illegal["done>failed"], 1);
}

TEST(StageEngine, ASecondCompletionOfAStageKeepsItsRecordButEnqueuesNothing) {
  // A receiver delivered the latent and moved the job to decode before the sampler acked.
  Rig rig(config::StageKind::kSample);
  rig.files.sha["/art/r1/j/cond.safetensors"] = "c";
  auto claimed = rig.claim(pb::STAGE_SAMPLE, "j", JobState::kSample);
  rig.runtime = [&](const runtime::StageContext& ctx) -> Result<runtime::StageOutput> {
    rig.ledger.jobs["j"].state = JobState::kDecode;
    rig.files.sha[ctx.output.string()] = "l";
    return runtime::StageOutput{"l", 10};
  };
  auto o = rig.engine->process(claimed, 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kSkipped);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kDecode);
  EXPECT_TRUE(rig.ledger.enqueued.empty());
  EXPECT_EQ(rig.ledger.jobs["j"].history.size(), 1u);
}

TEST(StageEngine, ALeaseLostWhileRunningCommitsNothing) {
  Rig rig(config::StageKind::kEncode);
  auto claimed = rig.claim(pb::STAGE_ENCODE, "j", JobState::kQueued);
  rig.runtime = [&](const runtime::StageContext& ctx) -> Result<runtime::StageOutput> {
    rig.ledger.lost.insert(claimed.entry_id);
    EXPECT_TRUE(ctx.cancelled());
    return make_error(errc::runtime::kCancelled, "stopped");
  };
  auto o = rig.engine->process(claimed, 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kLeaseLost);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kEncode);
  EXPECT_TRUE(rig.ledger.enqueued.empty());
}

TEST(StageEngine, ALeaseLostBeforeTheCompletionDoesNotEnqueueTwice) {
  Rig rig(config::StageKind::kEncode);
  auto claimed = rig.claim(pb::STAGE_ENCODE, "j", JobState::kQueued);
  rig.runtime = [&](const runtime::StageContext&) -> Result<runtime::StageOutput> {
    rig.ledger.pending.erase(claimed.entry_id);  // another consumer took it over
    return runtime::StageOutput{"s", 10};
  };
  auto o = rig.engine->process(claimed, 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kLeaseLost);
  EXPECT_TRUE(rig.ledger.enqueued.empty());
}

TEST(StageEngine, AnUnparseableEntryIsDeadLettered) {
  Rig rig(config::StageKind::kEncode);
  rig.ledger.pending.insert("9-0");
  auto o = rig.engine->process({"9-0", "\xff\xff not a task"}, 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kDeadLettered);
  EXPECT_EQ(rig.ledger.dead, (std::vector<std::string>{"unparseable task payload"}));
}

TEST(StageEngine, AMissingInputIsRetriedAndADecodeInputOfAnotherProfileIsDeadLetteredAtOnce) {
  Rig rig(config::StageKind::kDecode);
  auto claimed = rig.claim(pb::STAGE_DECODE, "j", JobState::kDecode);
  auto o = rig.engine->process(claimed, 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kRetried);  // the latent may still arrive
  EXPECT_EQ(rig.runs, 0);
  rig.files.sha["/art/r1/j/latent.h3latent"] = "l";
  rig.files.fit = false;
  o = rig.engine->process(claimed, 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kDeadLettered);
  EXPECT_NE(rig.ledger.jobs["j"].error.find("decode input does not fit the job's latent profile"),
            std::string::npos);
  EXPECT_EQ(rig.runs, 0);
}

TEST(StageEngine, TheDecodeWritesTheReceiptThenFinishesTheJob) {
  Rig rig(config::StageKind::kDecode);
  rig.files.sha["/art/r1/j/latent.h3latent"] = "l";
  auto o = rig.engine->process(rig.claim(pb::STAGE_DECODE, "j", JobState::kDecode), 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kCompleted);
  EXPECT_EQ(rig.files.receipts, 1);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kDone);
  EXPECT_TRUE(rig.ledger.enqueued.empty());
  // The receipt goes into Redis with the completion (issue #34 P8: read from any host).
  EXPECT_EQ(rig.ledger.jobs["j"].receipt, R"({"jobId":"j"})");
}

TEST(StageEngine, AReceiptOverTheBoundStaysOnDiskOnlyAndTheJobStillFinishes) {
  Rig rig(config::StageKind::kDecode);
  rig.files.sha["/art/r1/j/latent.h3latent"] = "l";
  rig.files.receipt_text = std::string(state::kReceiptMaxBytes + 1, ' ');
  auto o = rig.engine->process(rig.claim(pb::STAGE_DECODE, "j", JobState::kDecode), 0);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, Outcome::kCompleted);
  EXPECT_EQ(rig.ledger.jobs["j"].state, JobState::kDone);
  EXPECT_EQ(rig.ledger.jobs["j"].receipt, "");
}

TEST(StageEngine, ALatentForAnotherHostIsRecordedBeforeTheAckAndAnnouncedAfterIt) {
  // A receiver that acted on the announcement before the sampler's completion could decode and
  // write the receipt without the sample record (seen across namespaces: 1 receipt of 12).
  Rig rig(config::StageKind::kSample);
  rig.files.sha["/art/r1/j/cond.safetensors"] = "c";
  std::vector<std::string> order;
  Routing routing{[](const pb::StageTask&) { return std::string("h2"); },
                  [&](const pb::StageTask& t, const std::filesystem::path&) -> Status {
                    order.push_back(std::string("outbox at ") +
                                    state::job_state_name(rig.ledger.jobs[t.job_id()].state));
                    return {};
                  },
                  [&](const pb::StageTask& t) -> Status {
                    order.push_back(std::string("nudge at ") +
                                    state::job_state_name(rig.ledger.jobs[t.job_id()].state));
                    return {};
                  }};
  Clock clock{[&] { return rig.now; }, [&] { return rig.now; }};
  const config::Pool* pool = &rig.c.pools[1];
  StageEngine engine(EngineOptions{&rig.c, pool}, rig.ledger, rig.files, rig.runtime, clock,
                     routing);
  auto o = engine.process(rig.claim(pb::STAGE_SAMPLE, "j", JobState::kSample), 0);
  ASSERT_TRUE(o.ok()) << o.error().message;
  EXPECT_EQ(*o, Outcome::kCompleted);
  EXPECT_EQ(order, (std::vector<std::string>{"outbox at sample", "nudge at transfer"}));
  EXPECT_EQ(rig.ledger.jobs["j"].history.size(), 1u);
}

TEST(StageDescriptors, OneRowPerStage) {
  using config::Artifact;
  using config::StageKind;
  ASSERT_EQ(config::stage_table().size(), 4u);
  EXPECT_EQ(config::find_stage(pb::STAGE_ENCODE)->name, "encode");
  EXPECT_EQ(config::find_stage(pb::STAGE_ENCODE)->reads, Artifact::kNone);
  EXPECT_EQ(config::describe_stage(StageKind::kSample).reads, Artifact::kConditioning);
  EXPECT_EQ(config::describe_stage(StageKind::kSample).writes, Artifact::kLatent);
  EXPECT_EQ(config::find_stage(pb::STAGE_DECODE)->writes, Artifact::kVideo);
  EXPECT_TRUE(config::find_stage(pb::STAGE_DECODE)->writes_receipt);
  EXPECT_FALSE(config::find_stage(pb::STAGE_SAMPLE)->writes_receipt);
  // Every pool stage round-trips through both enums and its name; transfer has no pool stage.
  for (auto k : {StageKind::kEncode, StageKind::kSample, StageKind::kDecode}) {
    const auto& d = config::describe_stage(k);
    EXPECT_EQ(config::find_stage(d.stage), &d);
    EXPECT_EQ(config::find_stage(d.name), &d);
    EXPECT_EQ(d.kind, k);
    EXPECT_TRUE(d.runtime);
    EXPECT_STREQ(config::stage_name(k), std::string(d.name).c_str());
  }
  const auto* transfer = config::find_stage("transfer");
  ASSERT_NE(transfer, nullptr);
  EXPECT_EQ(transfer->stage, pb::STAGE_TRANSFER);
  EXPECT_FALSE(transfer->kind.has_value());
  EXPECT_FALSE(transfer->runtime);
  EXPECT_EQ(config::find_stage(pb::STAGE_UNSPECIFIED), nullptr);
  EXPECT_EQ(config::find_stage("nope"), nullptr);
  EXPECT_STREQ(state::stage_key(pb::STAGE_TRANSFER), "transfer");
  EXPECT_STREQ(state::stage_key(pb::STAGE_UNSPECIFIED), "unknown");
  // The services' names (heartbeats) and the streams, as before the table.
  EXPECT_EQ(config::describe_stage(StageKind::kDecode).service, "decoder");
  EXPECT_EQ(stream_for(StageKind::kSample, "h1"), "h3pipe:stream:sample");
  EXPECT_EQ(stream_for(StageKind::kDecode, "h1"), "h3pipe:stream:decode@h1");
}
