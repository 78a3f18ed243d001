// Unit: a stage output and its sidecar are published as one step per execution (issue #35 D6).
// Two executions of one stage that write different bytes to the same output (GPU nondeterminism,
// a forged second task) race to commit it, on threads started together: whichever wins, the
// final file's sidecar vouches for the final file, both executions report its hash, and no
// temporary is left.  Before the fix the sidecar was written by name before the no-replace
// rename and both used one NAME.part: the loser's sidecar (or bytes) ended up beside the
// winner's output.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> temporaries_below(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".part") out.push_back(e.path().filename().string());
  return out;
}

// Runs a(i) and b(i) on two threads released together, for each of `rounds` outputs.
template <class A, class B>
void race(int rounds, A a, B b) {
  for (int i = 0; i < rounds; ++i) {
    std::atomic<int> ready{0};
    auto go = [&](auto& f) {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      f(i);
    };
    std::thread ta([&] { go(a); });
    std::thread tb([&] { go(b); });
    ta.join();
    tb.join();
  }
}

}  // namespace

TEST(PublishOnce, TwoExecutionsWritingDifferentBytesLeaveAnOutputItsSidecarVouchesFor) {
  ts::TempDir d;
  const artifacts::Root root(d.path());
  constexpr int kRounds = 150;
  int a_won = 0, b_won = 0;
  std::vector<std::string> failures;
  auto body = [&](const std::string& who, int i, bool* reused, Result<std::string>* out) {
    // Different bytes, different lengths: each execution's own.
    const std::string bytes =
        who + std::string(4096 + (who == "A" ? 0 : 333), who[0]) + std::to_string(i);
    *out = artifacts::write_once(
        root, d.path() / "run" / ("out-" + std::to_string(i) + ".bin"),
        {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, reused);
  };
  std::vector<Result<std::string>> ra(kRounds, std::string()), rb(kRounds, std::string());
  std::vector<char> ua(kRounds), ub(kRounds);
  race(
      kRounds,
      [&](int i) {
        bool u = false;
        body("A", i, &u, &ra[i]);
        ua[i] = u;
      },
      [&](int i) {
        bool u = false;
        body("B", i, &u, &rb[i]);
        ub[i] = u;
      });
  for (int i = 0; i < kRounds; ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    const fs::path out = d.path() / "run" / ("out-" + std::to_string(i) + ".bin");
    // Both executions succeed (before the fix the shared NAME.part made one fail, or publish the
    // other's bytes); whatever happened, the output must be what its sidecar says.
    EXPECT_TRUE(ra[i].ok()) << ra[i].error().to_string();
    EXPECT_TRUE(rb[i].ok()) << rb[i].error().to_string();
    const std::string content = slurp(out);
    const std::string actual = sha256_hex(content.data(), content.size());
    EXPECT_EQ(artifacts::read_sidecar(out), actual) << "the sidecar vouches for the other bytes";
    auto v = artifacts::verify(out);
    EXPECT_TRUE(v.ok()) << (v.ok() ? "" : v.error().to_string());
    if (!ra[i].ok() || !rb[i].ok()) continue;
    EXPECT_EQ(*ra[i], actual) << "A reports a hash that is not the output's";
    EXPECT_EQ(*rb[i], actual) << "B reports a hash that is not the output's";
    EXPECT_NE(ua[i], ub[i]) << "exactly one execution published, the other reused";
    (content[0] == 'A' ? a_won : b_won)++;
  }
  EXPECT_EQ(temporaries_below(d.path()), std::vector<std::string>{});
  std::cout << "A won " << a_won << ", B won " << b_won << " of " << kRounds << "\n";
}

// A commit cut short between its data's rename and its sidecar's (a crash there) is completed by
// the next attempt from the pending sidecar that vouches for the bytes; a stray file with no
// such evidence is never adopted.
TEST(PublishOnce, ACommitCutBetweenItsRenamesIsCompletedByTheNextAttempt) {
  ts::TempDir d;
  const fs::path out = d.path() / "cond.bin";
  const std::string bytes = "conditioning bytes";
  const std::string hex = sha256_hex(bytes.data(), bytes.size());
  { std::ofstream(out, std::ios::binary) << bytes; }
  { std::ofstream(out.string() + ".sha256.00000000deadbeef.part") << hex << "  cond.bin\n"; }
  bool reused = false;
  auto again = artifacts::write_once(out, std::string_view("other bytes"), &reused);
  ASSERT_TRUE(again.ok()) << again.error().to_string();
  EXPECT_TRUE(reused);
  EXPECT_EQ(*again, hex);
  EXPECT_TRUE(artifacts::verify(out).ok());
  EXPECT_EQ(slurp(out), bytes);
  // A stray with a pending sidecar for other bytes: refused as before.
  const fs::path stray = d.path() / "stray.bin";
  { std::ofstream(stray, std::ios::binary) << "stray"; }
  { std::ofstream(stray.string() + ".sha256.00000000deadbeef.part") << hex << "  stray.bin\n"; }
  auto refused = artifacts::write_once(stray, std::string_view("fresh"), &reused);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, "artifact.exists");
}

// A writer killed -9 between the rename to its own temporary and the publish leaves
// NAME.p<pid>-<hex>.part and its pending sidecar; the next commit of that name removes them (the
// chaos harness counts every .part left), while a live writer's temporaries and anything not in
// the temporaries' form stay.
TEST(PublishOnce, TheNextCommitRemovesWhatAKilledWriterLeftAndNothingElse) {
  ts::TempDir d;
  const artifacts::Root root(d.path());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);  // reaped: its pid names no process now
  auto touch = [&](const std::string& name) { std::ofstream(d.path() / name) << "x"; };
  const std::string dead = fmt::format("p{}-00000000000000aa", child);
  const std::string live = fmt::format("p{}-00000000000000bb", ::getppid());
  for (const auto& n : {"out.bin." + dead + ".part", "out.bin.sha256." + dead + ".part",
                        "out.bin." + live + ".part", "out.bin.sha256." + live + ".part",
                        std::string("out.bin.part"), std::string("other.bin." + dead + ".part")})
    touch(n);
  ASSERT_TRUE(artifacts::write_once(
                  root, d.path() / "out.bin",
                  std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>("hello"), 5))
                  .ok());
  auto left = temporaries_below(d.path());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left,
            (std::vector<std::string>{"other.bin." + dead + ".part", "out.bin." + live + ".part",
                                      "out.bin.part", "out.bin.sha256." + live + ".part"}));
  EXPECT_TRUE(artifacts::verify(d.path() / "out.bin").ok());
}
