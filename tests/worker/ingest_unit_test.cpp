// Submission ingest's rules over its port in memory (label: unit; MemoryIntake in
// tests/support/fake_stage_ports.h): what a submission becomes (a job and its encode task, a
// failed job with the reason, a refusal beside the run, nothing when it is the same job again)
// and that an error under it acknowledges nothing.  Over Redis it runs in redis_acl_test (the
// encoder's ACL user) and in every e2e test.
#include <gtest/gtest.h>

#include "common/worker/worker.h"
#include "tests/support/fake_stage_ports.h"

using namespace h3pipe;
using h3pipe::test_support::MemoryIntake;

namespace {

const char* kSpec = R"({"jobId": "fox", "prompt": "a fox", "width": 64, "height": 64,
                        "frames": 9, "fps": 24, "steps": 4})";

struct Rig {
  config::Cluster c = test_support::stage_cluster();
  MemoryIntake intake;
  std::unique_ptr<worker::Ingest> ingest = worker::Ingest::over(c, intake);
  // One step that handled a submission.
  void step() {
    auto r = ingest->step();
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    ASSERT_TRUE(*r);
  }
  // The i-th failed job is `job` of `run`, its reason containing `says`.
  void expect_rejected(std::size_t i, const std::string& run, const std::string& job,
                       const std::string& says) {
    ASSERT_LT(i, intake.rejected.size());
    const auto& [r, j, why] = intake.rejected[i];
    EXPECT_EQ(r, run);
    EXPECT_EQ(j, job);
    EXPECT_NE(why.find(says), std::string::npos) << why;
  }
};

}  // namespace

TEST(Ingest, AValidSubmissionBecomesAJobAndItsEncodeTask) {
  Rig rig;
  rig.intake.submit("1-0", "r1", kSpec);
  rig.step();
  ASSERT_EQ(rig.intake.encode_tasks.size(), 1u);
  pb::StageTask t;
  ASSERT_TRUE(t.ParseFromString(rig.intake.encode_tasks[0]));
  EXPECT_EQ(t.run_id(), "r1");
  EXPECT_EQ(t.job_id(), "fox");
  EXPECT_EQ(t.stage(), pb::STAGE_ENCODE);
  EXPECT_EQ(t.spec().prompt(), "a fox");
  EXPECT_GT(t.enqueued_unix_ms(), 0);
  EXPECT_TRUE(rig.intake.jobs.count("r1/fox"));
  EXPECT_TRUE(rig.intake.rejected.empty());
  EXPECT_EQ(rig.intake.acked, (std::vector<std::string>{"1-0"}));
  auto idle = rig.ingest->step();
  ASSERT_TRUE(idle.ok());
  EXPECT_FALSE(*idle);  // nothing more
}

TEST(Ingest, ASubmissionWithoutARunOrWithAnEscapingRunIsAFailedJobUnderInvalidRuns) {
  Rig rig;
  rig.intake.submit("1-0", std::nullopt, kSpec);
  rig.intake.submit("2-0", "../etc", kSpec);
  rig.step();
  rig.step();
  ASSERT_EQ(rig.intake.rejected.size(), 2u);
  rig.expect_rejected(0, "invalid-runs", "sub-1-0", "run: the submission has no run field");
  rig.expect_rejected(1, "invalid-runs", "sub-2-0",
                      "run: must not start with '.' (got \"../etc\")");
  EXPECT_TRUE(rig.intake.encode_tasks.empty());
  EXPECT_EQ(rig.intake.acked, (std::vector<std::string>{"1-0", "2-0"}));
}

TEST(Ingest, ASpecThatDoesNotValidateIsAFailedJobThatNamesTheField) {
  Rig rig;
  rig.intake.submit("1-0", "r1", R"({"jobId": "fox", "prompt": "a fox", "width": 63})");
  rig.intake.submit("2-0", "r1", std::nullopt);
  rig.step();
  rig.step();
  ASSERT_EQ(rig.intake.rejected.size(), 2u);
  rig.expect_rejected(0, "r1", "fox", "width: 63 is not a multiple of 16");
  rig.expect_rejected(1, "r1", "sub-2-0", "spec: the submission has no spec field");
  EXPECT_TRUE(rig.intake.encode_tasks.empty());
}

// Issue #35 D12: a field given twice (the queue reports it, Entry::repeated) is refused with the
// field named, never read last-wins; a run given twice is no run to file the failure under.
TEST(Ingest, ASubmissionWithAFieldGivenTwiceIsAFailedJobNamingTheField) {
  Rig rig;
  rig.intake.submit("1-0", "r1", kSpec);
  rig.intake.submissions.back().repeated = {"spec"};
  rig.intake.submit("2-0", "r1", kSpec);
  rig.intake.submissions.back().repeated = {"run"};
  rig.step();
  rig.step();
  ASSERT_EQ(rig.intake.rejected.size(), 2u);
  rig.expect_rejected(0, "r1", "sub-1-0",
                      "spec: the submission has the field spec more than once; exactly one "
                      "expected (XADD h3pipe:submit * run RUN spec JSON)");
  rig.expect_rejected(1, "invalid-runs", "sub-2-0", "run: the submission has the field run more");
  EXPECT_TRUE(rig.intake.encode_tasks.empty());
  EXPECT_TRUE(rig.intake.jobs.empty());
  EXPECT_EQ(rig.intake.acked, (std::vector<std::string>{"1-0", "2-0"}));
}

TEST(Ingest, TheSameJobAgainIsNothingAndAnotherSpecUnderItsIdIsRefusedBesideTheRun) {
  Rig rig;
  rig.intake.submit("1-0", "r1", kSpec);
  rig.intake.submit("2-0", "r1", kSpec);  // the same again: idempotent
  rig.intake.submit("3-0", "r1",
                    R"({"jobId": "fox", "prompt": "another fox", "width": 64, "height": 64,
                        "frames": 9, "fps": 24, "steps": 4})");
  rig.step();
  const std::string stored = rig.intake.jobs["r1/fox"];
  rig.step();
  rig.step();
  EXPECT_EQ(rig.intake.encode_tasks.size(), 1u);
  EXPECT_TRUE(rig.intake.rejected.empty());  // never a failed pseudo-job beside the real one
  ASSERT_EQ(rig.intake.refused.size(), 1u);
  EXPECT_EQ(rig.intake.refused[0].first, "r1");
  EXPECT_EQ(rig.intake.refused[0].second.submission, "3-0");
  EXPECT_EQ(rig.intake.refused[0].second.job_id, "fox");
  EXPECT_NE(rig.intake.refused[0].second.reason.find("already exists in run r1 with another spec"),
            std::string::npos);
  EXPECT_EQ(rig.intake.jobs["r1/fox"], stored);  // the existing job left as it is
  EXPECT_EQ(rig.intake.acked, (std::vector<std::string>{"1-0", "2-0", "3-0"}));
}

TEST(Ingest, AnErrorUnderItAcknowledgesNothingSoTheSubmissionComesBack) {
  Rig rig;
  rig.intake.submit("1-0", "r1", kSpec);
  rig.intake.fail_accept = make_error(errc::redis::kIo, "connection reset by peer");
  auto r = rig.ingest->step();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "redis.io");
  EXPECT_TRUE(rig.intake.acked.empty());  // still pending: the queue hands it out again
  EXPECT_TRUE(rig.intake.jobs.empty());
  EXPECT_TRUE(rig.intake.rejected.empty());
}

TEST(Ingest, TheLoopExportsTheDeadLetterCountWhileItRuns) {
  Rig rig;
  rig.intake.dead = 4;
  std::atomic<bool> stop{false};
  long long seen = -1;
  rig.ingest->on_dead_letters([&](long long n) {
    seen = n;
    stop = true;
  });
  rig.ingest->run(stop);
  EXPECT_EQ(seen, 4);
}
