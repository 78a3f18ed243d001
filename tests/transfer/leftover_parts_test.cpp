// Issue #35 D6 in the transfer's own writers: an outbox record is written to this execution's own
// temporary (JOB.task.p<pid>-<hex>.part), and what a killed writer left (its pid gone) is removed
// by the next record of the job and by the sender's outbox scan; a live writer's temporary, and
// one too young to judge, stay.  On the receiver, a killed attempt's NAME.part beside a latent
// that is complete goes with the next offer of it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>

#include "common/transfer/outbox.h"
#include "tests/transfer/loopback_fixture.h"

namespace h3pipe::transfer {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Loopback;
using testing::make_latent_task;
using testing::TempDir;
using testing::wait_until;

// A pid that ran here and no longer exists: a child that exited and was reaped.
long dead_pid() {
  const pid_t p = ::fork();
  if (p == 0) ::_exit(0);
  int st = 0;
  ::waitpid(p, &st, 0);
  return p;
}

fs::path plant(const fs::path& dir, const std::string& name, bool old) {
  const fs::path p = dir / name;
  FILE* f = std::fopen(p.c_str(), "wb");
  std::fputs("half a record", f);
  std::fclose(f);
  if (old) {
    const auto t = fs::file_time_type::clock::now() - 2h;
    fs::last_write_time(p, t);
  }
  return p;
}

std::vector<std::string> names(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(OutboxTemporaries, ADeadWritersTemporaryGoesWithTheNextRecordAndTheScan) {
  TempDir dir;
  const fs::path outbox = dir.path() / "outbox", run = outbox / "run1";
  pb::StageTask t;
  t.set_run_id("run1");
  t.set_job_id("j");
  ASSERT_TRUE(record_task(outbox, t).ok());
  EXPECT_EQ(names(run), std::vector<std::string>{"j.task"}) << "no temporary left behind";

  const std::string dead = fmt::format("j.task.p{}-00112233445566ff.part", dead_pid());
  const std::string live = fmt::format("j.task.p{}-0123456789abcdef.part", ::getpid());
  const std::string young = fmt::format("j.task.p{}-fedcba9876543210.part", dead_pid());
  const std::string other = fmt::format("k.task.p{}-aaaaaaaaaaaaaaaa.part", dead_pid());
  plant(run, dead, true);
  plant(run, live, true);           // its writer runs (this process): it stays
  plant(run, young, false);         // too young to judge (another pid namespace?): it stays
  plant(run, other, true);          // another job's: the next record of j leaves it
  plant(run, "j.task.part", true);  // the older shared name, from before the change
  plant(run, "unrelated.part", true);
  ASSERT_TRUE(record_task(outbox, t).ok());
  EXPECT_EQ(names(run), (std::vector<std::string>{"j.task", live, young, other, "unrelated.part"}))
      << "the record's dead temporaries went, nothing else";

  // The sender's scan sweeps every run folder.
  std::vector<Error> problems;
  auto tasks = scan_outbox(outbox, &problems);
  EXPECT_EQ(tasks.size(), 1u);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(names(run), (std::vector<std::string>{"j.task", live, young, "unrelated.part"}));
}

TEST(OutboxTemporaries, TwoWritersOfOneRecordNeverShareATemporary) {
  TempDir dir;
  const fs::path outbox = dir.path() / "outbox";
  pb::StageTask t;
  t.set_run_id("run1");
  t.set_job_id("j");
  // Concurrent writers (a sampler and the transfer service record the same task): each renames
  // its own complete temporary, so the record is always one whole StageTask.
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int w = 0; w < 4; ++w)
    writers.emplace_back([&] {
      for (int i = 0; i < 50; ++i)
        if (!record_task(outbox, t).ok()) ++failures;
    });
  for (auto& th : writers) th.join();
  EXPECT_EQ(failures.load(), 0);
  auto tasks = scan_outbox(outbox);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].job_id(), "j");
  EXPECT_EQ(names(outbox / "run1"), std::vector<std::string>{"j.task"});
}

TEST_F(Loopback, AKilledAttemptsPartBesideACompleteLatentGoesWithTheNextOffer) {
  start_receiver(receiver_options());
  start_sender(sender_options(keys_.client));
  auto task = make_latent_task(dir_.path() / "A", "run1", "j", 100 * 1000, "B");
  sender_->submit(task);
  ASSERT_TRUE(wait_until([&] { return sent_count() == 1; }, 20s));
  const fs::path b = dir_.path() / "B/run1/j/latent.h3latent";
  plant(b.parent_path(), "latent.h3latent.part", false);
  plant(b.parent_path(), "latent.h3latent.sha256.part", false);
  // The latent offered again (a sender restarted before it removed the record): complete, so
  // nothing is sent, and the leftovers beside it go.
  sender_.reset();
  auto o = sender_options(keys_.client);
  ASSERT_TRUE(record_task(o.outbox, task).ok());
  start_sender(o);
  ASSERT_TRUE(wait_until([&] { return sent_count() == 2; }, 20s));
  EXPECT_EQ(sent_[1].bytes_sent, 0u);
  EXPECT_FALSE(fs::exists(artifacts::part_path(b)));
  EXPECT_FALSE(fs::exists(artifacts::part_path(artifacts::sidecar_path(b))));
  EXPECT_TRUE(artifacts::verify(b).ok());
  EXPECT_EQ(durable_calls(), 1);
}

}  // namespace
}  // namespace h3pipe::transfer
