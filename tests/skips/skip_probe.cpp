// A GoogleTest binary with h3pipe's main (tests/support/gtest_main.cpp) whose cases pass, skip,
// fail or crash as H3PIPE_SKIP_PROBE says; skip_report_test.py runs it directly and under ctest.
// Not a ctest test itself.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <string>

namespace {

std::string mode() {
  const char* m = std::getenv("H3PIPE_SKIP_PROBE");
  return m ? m : "pass";
}

}  // namespace

TEST(Probe, Passes) {
  EXPECT_EQ(1 + 1, 2);
}

TEST(Probe, MaySkipFailOrCrash) {
  const std::string m = mode();
  if (m == "skip") GTEST_SKIP() << "needs root: the probe's allowed reason";
  if (m == "skip_other") GTEST_SKIP() << "/usr/bin/redis-sentinel missing";
  if (m == "fail_and_skip") ADD_FAILURE() << "a real failure";
  if (m == "crash") std::raise(SIGSEGV);
}

TEST(Probe, SkipsBesideAFailure) {
  if (mode() == "fail_and_skip") GTEST_SKIP() << "needs root: beside a failure";
}
