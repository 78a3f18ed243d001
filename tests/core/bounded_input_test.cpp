// Files a user names by path go through one bounded reader (issue #22 item 4): a device, a FIFO, a
// directory or a file larger than its kind's cap is refused at once, exit 2, the reason naming the
// file; nothing hangs, nothing aborts.  The real h3pipe CLI and an h3pipe-decoder (label unit: no
// Redis, the refusal comes before any connection).  Every command runs under timeout(1), so a
// FIFO that blocks shows as rc 124, not as a hung test.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "common/config/config.h"
#include "common/core/bounded_file.h"
#include "tests/support/test_support.h"

namespace {
namespace fs = std::filesystem;

struct Bad {
  std::string name;
  std::string path;
  std::string reason;  // what the message must say
};

class BoundedInput : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path fifo = dir_.path() / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const fs::path sparse = dir_.path() / "sparse.bin";
    { std::ofstream(sparse).flush(); }
    fs::resize_file(sparse, 2147483648ull);  // sparse: no disk used
    fs::create_directories(dir_.path() / "folder");
    bad_ = {{"/dev/zero", "/dev/zero", "not a regular file (a character device)"},
            {"fifo", fifo.string(), "not a regular file (a FIFO)"},
            {"folder", (dir_.path() / "folder").string(), "not a regular file (a directory)"},
            {"sparse", sparse.string(), "2147483648 bytes, above the "}};
  }
  // Runs `h3pipe ARGS` (stderr folded in) with a 20 s guard.
  static std::pair<int, std::string> cli(const std::string& args) {
    return ts::sh("timeout 20 " + ts::bin("h3pipe") + " " + args + " 2>&1 </dev/null");
  }
  ts::TempDir dir_;
  std::vector<Bad> bad_;
};

TEST_F(BoundedInput, ReaderRefusesWhatIsNotABoundedRegularFile) {
  for (const auto& b : bad_) {
    auto r = h3pipe::read_bounded_file(b.path, {"a config", h3pipe::kMaxConfigFileBytes},
                                       "--config " + b.path);
    ASSERT_FALSE(r.ok()) << b.name;
    EXPECT_NE(r.error().message.find("--config " + b.path + ": " + b.reason), std::string::npos)
        << r.error().message;
  }
  auto big = h3pipe::read_bounded_file(bad_[3].path, {"a config", h3pipe::kMaxConfigFileBytes});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().code, h3pipe::errc::file::kTooLarge);
  EXPECT_NE(big.error().message.find("above the 16 MiB limit for a config"), std::string::npos)
      << big.error().message;
  // A regular file at the cap is read whole; one byte more is refused.
  const fs::path ok = dir_.path() / "ok.json";
  std::ofstream(ok) << std::string(1000, ' ');
  auto whole = h3pipe::read_bounded_file(ok, {"a config", 1000});
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  EXPECT_EQ(whole->size(), 1000u);
  EXPECT_FALSE(h3pipe::read_bounded_file(ok, {"a config", 999}).ok());
}

TEST_F(BoundedInput, ConfigLoaderRefusesDevicesFifosFoldersAndHugeFiles) {
  for (const auto& b : bad_) {
    auto c = h3pipe::config::load_file(b.path);
    ASSERT_FALSE(c.ok()) << b.name;
    EXPECT_NE(c.error().message.find(b.reason), std::string::npos) << c.error().message;
  }
}

TEST_F(BoundedInput, CliConfigExitsTwoNamingTheFile) {
  for (const auto& b : bad_) {
    auto [rc, out] = cli("--config " + b.path + " plan");
    EXPECT_EQ(rc, 2) << b.name << ": " << out;
    EXPECT_NE(out.find(b.path), std::string::npos) << out;
    EXPECT_NE(out.find(b.reason), std::string::npos) << out;
  }
}

TEST_F(BoundedInput, ServiceConfigExitsTwoNamingTheFile) {
  for (const auto& b : bad_) {
    auto [rc, out] = ts::sh("timeout 20 " + ts::bin("h3pipe-decoder") + " --pool dec --config " +
                            b.path + " 2>&1 </dev/null");
    EXPECT_EQ(rc, 2) << b.name << ": " << out;
    EXPECT_NE(out.find(b.reason), std::string::npos) << out;
  }
}

TEST_F(BoundedInput, BatchFileExitsTwoNamingTheFile) {
  for (const auto& b : bad_) {
    auto [rc, out] = cli("--state-dir " + (dir_.path() / "state").string() + " run " + b.path);
    EXPECT_EQ(rc, 2) << b.name << ": " << out;
    EXPECT_NE(out.find(b.path + ": " + b.reason), std::string::npos) << out;
  }
}

TEST_F(BoundedInput, LatentInspectExitsTwoNamingTheFile) {
  for (const auto& b : bad_) {
    for (const char* json : {"", " --json"}) {
      auto [rc, out] = cli("--state-dir " + (dir_.path() / "state").string() + " latent inspect " +
                           b.path + json);
      EXPECT_EQ(rc, 2) << b.name << ": " << out;
      EXPECT_NE(out.find(b.path + ": " + b.reason), std::string::npos) << out;
    }
  }
}

TEST_F(BoundedInput, HostMapAndWorkflowFilesAreBoundedToo) {
  const std::string fifo = bad_[1].path;
  auto [rc1, out1] = cli("config-adapt " + fifo);
  EXPECT_EQ(rc1, 2) << out1;
  EXPECT_NE(out1.find(fifo + ": not a regular file (a FIFO)"), std::string::npos) << out1;
  auto [rc2, out2] = cli("comfyui split " + fifo + " -o " + (dir_.path() / "split").string());
  EXPECT_EQ(rc2, 2) << out2;
  EXPECT_NE(out2.find("not a regular file (a FIFO)"), std::string::npos) << out2;
}

}  // namespace
