// Unit: atomic artifacts.  A writer killed mid-write leaves nothing under the final name.
#include "common/artifacts/artifacts.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;

TEST(Artifacts, WriteAtomicWritesSidecarAndVerifies) {
  ts::TempDir d;
  auto p = d.path() / "x" / "out.bin";
  auto sha = artifacts::write_atomic(p, std::string_view("hello"));
  ASSERT_TRUE(sha.ok());
  EXPECT_EQ(*sha, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  EXPECT_FALSE(fs::exists(artifacts::part_path(p)));
  auto v = artifacts::verify(p);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, *sha);
}

TEST(Artifacts, VerifyDetectsTamperingAndMissingSidecar) {
  ts::TempDir d;
  auto p = d.path() / "out.bin";
  ASSERT_TRUE(artifacts::write_atomic(p, std::string_view("hello")).ok());
  { std::ofstream(p) << "jello"; }
  EXPECT_EQ(artifacts::verify(p).error().code, "artifact.mismatch");
  fs::remove(artifacts::sidecar_path(p));
  EXPECT_EQ(artifacts::verify(p).error().code, "artifact.no_sidecar");
  EXPECT_EQ(artifacts::verify(d.path() / "nope").error().code, "artifact.missing");
}

TEST(Artifacts, WriterKilledMidWriteLeavesNothingUnderTheFinalName) {
  ts::TempDir d;
  auto p = d.path() / "big.bin";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    // Child: stream a .part the way libav and the transfer receiver do, then get killed before
    // commit.
    std::ofstream out(artifacts::part_path(p), std::ios::binary);
    std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 8; ++i) out.write(chunk.data(), chunk.size());
    out.flush();
    (void)::write(ready[1], "r", 1);
    for (;;) ::pause();
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(fs::exists(p));
  EXPECT_TRUE(fs::exists(artifacts::part_path(p)));
  // Fresh: it may be a live writer's (another process sharing the root), so it stays.
  EXPECT_EQ(artifacts::sweep_parts(d.path(), std::chrono::hours(24)), 0u);
  EXPECT_TRUE(fs::exists(artifacts::part_path(p)));
  // Untouched for longer than the age given: crash garbage, removed.
  fs::last_write_time(artifacts::part_path(p),
                      fs::file_time_type::clock::now() - std::chrono::hours(25));
  EXPECT_EQ(artifacts::sweep_parts(d.path(), std::chrono::hours(24)), 1u);
  EXPECT_FALSE(fs::exists(artifacts::part_path(p)));
}

TEST(Artifacts, CommitPartRejectsUnexpectedContent) {
  ts::TempDir d;
  auto p = d.path() / "l.bin";
  { std::ofstream(artifacts::part_path(p)) << "bytes"; }
  auto r = artifacts::commit_part(p, std::string(64, 'a'));
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(artifacts::part_path(p)));
}

TEST(Artifacts, IdsNeverLeaveTheirFolder) {
  for (const char* bad : {"", "..", "../x", "/abs", "a/b", ".hidden"})
    EXPECT_FALSE(artifacts::validate_id("id", bad).ok()) << bad;
  EXPECT_FALSE(artifacts::validate_id("id", std::string("a\0b", 3)).ok());
  EXPECT_FALSE(artifacts::validate_id("id", std::string(129, 'a')).ok());
  EXPECT_TRUE(artifacts::validate_id("id", "job-01.v2_x").ok());
}

// Stage outputs are written once: a second execution's commit keeps the first output.
TEST(Artifacts, CommitNeverReplacesACommittedOutput) {
  ts::TempDir d;
  auto p = d.path() / "out.bin";
  { std::ofstream(artifacts::part_path(p)) << "first"; }
  bool reused = true;
  auto first = artifacts::commit_part(p, {}, &reused);
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_FALSE(reused);
  { std::ofstream(artifacts::part_path(p)) << "second, different"; }
  auto second = artifacts::commit_part(p, {}, &reused);
  ASSERT_TRUE(second.ok()) << second.error().message;
  EXPECT_TRUE(reused);
  EXPECT_EQ(*second, *first);
  EXPECT_FALSE(fs::exists(artifacts::part_path(p)));
  std::ifstream in(p);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "first");
  EXPECT_TRUE(artifacts::verify(p).ok());

  auto q = d.path() / "once.bin";
  auto w1 = artifacts::write_once(q, std::string_view("one"), &reused);
  ASSERT_TRUE(w1.ok());
  EXPECT_FALSE(reused);
  auto w2 = artifacts::write_once(q, std::string_view("two"), &reused);
  ASSERT_TRUE(w2.ok());
  EXPECT_TRUE(reused);
  EXPECT_EQ(*w2, *w1);
}

// A final name without a valid sidecar is not silently adopted by a commit.
TEST(Artifacts, CommitOverAnUnverifiableOutputFailsLoudly) {
  ts::TempDir d;
  auto p = d.path() / "out.bin";
  { std::ofstream(p) << "stray"; }
  { std::ofstream(artifacts::part_path(p)) << "fresh"; }
  auto r = artifacts::commit_part(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "artifact.exists");
  EXPECT_NE(r.error().message.find("out.bin"), std::string::npos);
}
