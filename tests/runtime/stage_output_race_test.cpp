// Unit: every execution of a stage streams its output into its own temporary (issue #35 D6
// residual).  Two executions of one task (a retry beside a worker presumed dead that is still
// alive, a re-delivery) run the exec runtime on the same output at once, each command writing
// half its bytes, pausing, then the rest: before, both wrote the one shared NAME.part, so the
// first to commit took the other's half-written file (or the other wrote its tail into the
// published output after its sidecar) and the second failed with no output.  Now both succeed,
// the output is one execution's bytes whole and its sidecar vouches for them, and no temporary
// is left.  A writer killed -9 mid-stream leaves NAME.p<pid>-<hex>.part; the next execution of
// that output removes it when it starts, whether it then succeeds or fails, and never a live
// writer's.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/runtime/exec_runtime.h"
#include "common/runtime/stage_output.h"
#include "tests/support/runtime_test_util.h"

namespace h3pipe::runtime {
namespace {
using namespace h3pipe::runtime::testing;
using config::StageKind;
using Clock = std::chrono::steady_clock;

// Copies FIXTURE to argv[2] (the output's temporary) in two halves, PAUSE seconds apart, through
// one descriptor, as a slow tool streaming its result does; or fails.
constexpr const char* kHalves = R"PY(
import os, sys, time
mode, out = sys.argv[1], sys.argv[2]
if mode == "fail":
    sys.exit(3)
data = open(os.environ["FIXTURE"], "rb").read()
with open(out, "wb") as f:
    f.write(data[: len(data) // 2])
    f.flush()
    time.sleep(float(os.environ["PAUSE"]))
    f.write(data[len(data) // 2 :])
)PY";

class StageOutputRace : public ::testing::Test {
 protected:
  void SetUp() override {
    script_ = dir_.path() / "halves.py";
    write_text(script_, kHalves);
    out_ = dir_.path() / "run-1" / "job-1" / "latent.h3latent";
  }
  nlohmann::json settings(const std::string& mode, const fs::path& fixture, double pause) const {
    return {{"command", {"/usr/bin/python3", script_.string(), mode, "{output}"}},
            {"timeout_s", 30},
            {"env", {{"FIXTURE", fixture.string()}, {"PAUSE", fmt::format("{}", pause)}}}};
  }
  fs::path fixture(const std::string& name, float bias) const {
    latent::Latent l = latent_for(spec_);
    for (auto& v : l.video) v += bias;  // same size, different bytes (another GPU's result)
    const fs::path p = dir_.path() / name;
    EXPECT_TRUE(latent::write_latent(p, l).ok());
    return p;
  }

  TempDir dir_;
  fs::path script_, out_;
  pb::JobSpec spec_ = small_spec();
};

TEST_F(StageOutputRace, TwoExecutionsOfOneTaskEachStreamIntoTheirOwnTemporary) {
  const fs::path fa = fixture("a.h3latent", 0.f), fb = fixture("b.h3latent", 0.5f);
  const std::string bytes_a = read_text(fa), bytes_b = read_text(fb);
  ASSERT_NE(bytes_a, bytes_b);
  ClusterFixture c(StageKind::kSample);
  // A pauses long between its halves; B starts once A's first half is on disk and finishes
  // (and commits) while A is still writing.
  const auto sa = settings("halves", fa, 1.0), sb = settings("halves", fb, 0.05);
  auto ra = make_exec_sample(c.args(sa));
  auto rb = make_exec_sample(c.args(sb));
  ASSERT_TRUE(ra.ok() && rb.ok());
  Result<StageOutput> oa = Error{"unset", "unset"}, ob = Error{"unset", "unset"};
  std::thread ta([&] { oa = (*ra)->run(context(spec_, {}, out_)); });
  const auto deadline = Clock::now() + std::chrono::seconds(15);
  while (temporaries_of(out_).empty() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_FALSE(temporaries_of(out_).empty()) << "A never started writing";
  std::thread tb([&] { ob = (*rb)->run(context(spec_, {}, out_)); });
  ta.join();
  tb.join();
  ASSERT_TRUE(oa.ok()) << "A: " << oa.error().to_string();
  ASSERT_TRUE(ob.ok()) << "B: " << ob.error().to_string();
  const std::string published = read_text(out_);
  EXPECT_TRUE(published == bytes_a || published == bytes_b)
      << "the output is neither execution's bytes whole (" << published.size() << " bytes)";
  auto v = artifacts::verify(out_);
  ASSERT_TRUE(v.ok()) << v.error().to_string();
  EXPECT_EQ(oa->sha256, *v);
  EXPECT_EQ(ob->sha256, *v);
  EXPECT_NE(oa->reused, ob->reused) << "exactly one execution published, the other reused";
  EXPECT_EQ(temporaries_of(out_), std::vector<std::string>{});
}

// A writer killed -9 while it streams (its temporary named by the same call every runtime
// uses); a live writer's temporary beside it (this process's own).
TEST_F(StageOutputRace, AKilledWritersTemporaryGoesWithTheNextExecutionALiveOnesStays) {
  fs::create_directories(out_.parent_path());
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t writer = ::fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {
    const fs::path p = artifacts::own_part_path(out_);
    write_text(p, "the first half of a latent");
    const std::string s = p.string();
    (void)!::write(fds[1], s.data(), s.size());
    ::close(fds[1]);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char buf[4096];
  const ssize_t n = ::read(fds[0], buf, sizeof buf);
  ::close(fds[0]);
  ASSERT_GT(n, 0);
  const fs::path dead(std::string(buf, static_cast<std::size_t>(n)));
  ASSERT_EQ(::kill(writer, SIGKILL), 0);
  int st = 0;
  ASSERT_EQ(::waitpid(writer, &st, 0), writer);
  ASSERT_TRUE(fs::exists(dead));
  EXPECT_EQ(dead.filename().string().rfind(fmt::format("latent.h3latent.p{}-", writer), 0), 0u)
      << dead;
  const fs::path live = artifacts::own_part_path(out_);  // ours: a writer still at work
  write_text(live, "still being written");

  // The next execution fails (its command exits 3), yet the dead writer's temporary is gone.
  ClusterFixture c(StageKind::kSample);
  const fs::path fa = fixture("a.h3latent", 0.f);
  const auto fail = settings("fail", fa, 0);
  auto out = (*make_exec_sample(c.args(fail)))->run(context(spec_, {}, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_FALSE(fs::exists(dead)) << dead << " outlived its killed writer";
  EXPECT_TRUE(fs::exists(live));
  // And one that succeeds publishes its own, leaving the live writer's alone.
  const auto ok = settings("halves", fa, 0);
  out = (*make_exec_sample(c.args(ok)))->run(context(spec_, {}, out_));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(artifacts::verify(out_).ok());
  EXPECT_EQ(temporaries_of(out_), std::vector<std::string>{live.filename().string()});
}

// commit_own_part publishes only a temporary of the output it names.
TEST(StageOutputTemporaries, CommitOwnPartRefusesAnotherOutputsOrFoldersFile) {
  TempDir d;
  const artifacts::Root root(d.path());
  fs::create_directories(d.path() / "x");
  const fs::path out = d.path() / "x" / "out.bin";
  for (const fs::path& bad :
       {artifacts::own_part_path(d.path() / "x" / "other.bin"),
        artifacts::own_part_path(d.path() / "out.bin"), fs::path(artifacts::part_path(out)),
        d.path() / "x" / "out.bin.sha256.p1-00000000000000aa.part"}) {
    write_text(bad, "bytes");
    auto r = artifacts::commit_own_part(root, out, bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, "path.escape") << r.error().to_string();
    EXPECT_FALSE(fs::exists(out));
  }
  const fs::path mine = artifacts::own_part_path(out);
  EXPECT_NE(mine, artifacts::own_part_path(out)) << "a new name on every call";
  write_text(mine, "bytes");
  auto r = artifacts::commit_own_part(root, out, mine);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(read_text(out), "bytes");
  EXPECT_FALSE(fs::exists(mine));
}

}  // namespace
}  // namespace h3pipe::runtime
