// The main() of every h3pipe_add_test binary (cmake/H3pipeHelpers.cmake), in place of
// GTest::gtest_main: a GTEST_SKIP is a skip to ctest, not a pass.  When no test failed and at
// least one skipped, the binary prints one line per skipped test,
//   H3PIPE_SKIP: Suite.Name: <the reason given to GTEST_SKIP>
// and exits 77 (the test's SKIP_RETURN_CODE): ctest then reports the binary "Skipped", and
// scripts/test.sh lists the lines and, under CI=true, fails on a reason that
// tests/skip_allowlist.txt does not allow.  A failure exits 1 as before, skipped tests or not; a
// crash is a signal, never 77.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {

// The skip's message on one line (GTest prefixes nothing; a multi-line reason is joined).
std::string reason_of(const testing::TestResult& r) {
  std::string why;
  for (int i = 0; i < r.total_part_count(); ++i) {
    const auto& part = r.GetTestPartResult(i);
    if (!part.skipped()) continue;
    std::string m = part.message();
    for (char& c : m)
      if (c == '\n' || c == '\r') c = ' ';
    if (!why.empty()) why += "; ";
    why += m;
  }
  while (!why.empty() && why.back() == ' ') why.pop_back();
  return why.empty() ? "(no reason given)" : why;
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const auto* u = testing::UnitTest::GetInstance();
  if (rc != 0 || u->skipped_test_count() == 0) return rc;
  std::fflush(stdout);
  for (int s = 0; s < u->total_test_suite_count(); ++s) {
    const auto* suite = u->GetTestSuite(s);
    for (int t = 0; t < suite->total_test_count(); ++t) {
      const auto* info = suite->GetTestInfo(t);
      if (info->should_run() && info->result()->Skipped())
        std::printf("H3PIPE_SKIP: %s.%s: %s\n", suite->name(), info->name(),
                    reason_of(*info->result()).c_str());
    }
    // A skip in SetUpTestSuite marks the suite's own result.
    if (suite->ad_hoc_test_result().Skipped())
      std::printf("H3PIPE_SKIP: %s: %s\n", suite->name(),
                  reason_of(suite->ad_hoc_test_result()).c_str());
  }
  std::printf("H3PIPE_SKIP: %d of %d tests skipped, %d passed: exit 77 (ctest: Skipped)\n",
              u->skipped_test_count(), u->test_to_run_count(), u->successful_test_count());
  std::fflush(stdout);
  return 77;
}
