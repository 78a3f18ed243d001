// A job's referenceImage is read only from limits.input_roots: under a root as written or looked
// up beneath the roots, never through a symlink, never /proc, /sys, a device, a FIFO or a
// directory; the check at submission (spec::validate, which both the CLI batch and the Redis
// submission stream use) names the field and the reason.  The config default is
// <state_dir>/inputs.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "common/config/config.h"
#include "common/spec/input_file.h"
#include "common/spec/spec.h"
#include "tests/support/temp_dir.h"

namespace h3pipe {
namespace {
namespace fs = std::filesystem;

class InputRoots : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_ / "inputs";
    fs::create_directories(root_ / "sub");
    std::ofstream(root_ / "sub" / "ref.png") << "png bytes";
    std::ofstream(dir_ / "outside.png") << "secret";
  }

  std::string refused(const std::string& path, std::vector<fs::path> roots = {}) {
    if (roots.empty()) roots = {root_};
    auto f = spec::open_input(roots, path);
    if (f.ok()) return "opened";
    EXPECT_EQ(f.error().code, "input.refused");
    return f.error().message;
  }

  test_support::TempDir tmp_{"h3pipe-input-roots"};
  fs::path dir_ = tmp_.path(), root_;
};

TEST_F(InputRoots, AFileUnderARootOpensByAbsoluteOrRelativePath) {
  auto abs = spec::open_input({dir_ / "elsewhere", root_}, (root_ / "sub" / "ref.png").string());
  ASSERT_TRUE(abs.ok()) << abs.error().to_string();
  EXPECT_EQ(abs->size, 9u);
  auto rel = spec::open_input({dir_ / "elsewhere", root_}, "sub/ref.png");
  ASSERT_TRUE(rel.ok()) << rel.error().to_string();
  char buf[3] = {};
  ASSERT_EQ(::pread(rel->fd.get(), buf, 3, 0), 3);
  EXPECT_EQ(std::string(buf, 3), "png");
}

TEST_F(InputRoots, EverythingElseIsRefusedWithTheReason) {
  fs::create_symlink(dir_ / "outside.png", root_ / "link.png");
  fs::create_symlink("/etc", root_ / "etc");
  ASSERT_EQ(::mkfifo((root_ / "pipe").c_str(), 0600), 0);
  EXPECT_EQ(refused("/etc/shadow"),
            "/etc/shadow is not under an input root (limits.input_roots: " + root_.string() + ")");
  EXPECT_EQ(refused((dir_ / "outside.png").string()).find("is not under an input root"),
            (dir_ / "outside.png").string().size() + 1);
  EXPECT_NE(
      refused((root_ / "link.png").string()).find("goes through a symlink below the input root"),
      std::string::npos);
  EXPECT_NE(refused("etc/passwd").find("goes through a symlink"), std::string::npos);
  EXPECT_NE(refused((root_ / ".." / "outside.png").string()).find(".."), std::string::npos);
  EXPECT_NE(refused("../outside.png").find(".."), std::string::npos);
  EXPECT_NE(refused((root_ / "pipe").string()).find("is not a regular file (a FIFO)"),
            std::string::npos);
  EXPECT_NE(refused((root_ / "sub").string()).find("is not a regular file (a directory)"),
            std::string::npos);
  EXPECT_NE(refused("/proc/version", {"/proc"}).find("lies on /proc or /sys"), std::string::npos);
  EXPECT_NE(refused("/dev/null", {"/dev"}).find("is not a regular file (a device)"),
            std::string::npos);
  EXPECT_NE(refused("missing.png").find("is in no input root"), std::string::npos);
  EXPECT_NE(refused((root_ / "missing.png").string()).find("cannot be opened below the input root"),
            std::string::npos);
  EXPECT_NE(refused(std::string("a\0b", 3)).find("NUL"), std::string::npos);
  auto none = spec::open_input({}, (root_ / "sub" / "ref.png").string());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(
      none.error().message.find("reference images are disabled here (limits.input_roots is [])"),
      std::string::npos);
}

TEST_F(InputRoots, SubmissionNamesTheFieldAndTheReason) {
  config::Limits limits;
  limits.input_roots = {root_};
  auto ok = spec::parse_batch(R"({"jobId":"a","prompt":"p","referenceImage":")" +
                                  (root_ / "sub/ref.png").string() + "\"}\n",
                              limits);
  EXPECT_TRUE(ok.errors.empty()) << ok.errors[0].error.to_string();
  auto bad =
      spec::parse_batch(R"({"jobId":"b","prompt":"p","referenceImage":"/etc/shadow"})", limits);
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].error.field, "referenceImage");
  EXPECT_EQ(bad.errors[0].error.reason,
            "/etc/shadow is not under an input root (limits.input_roots: " + root_.string() + ")");
}

// The voice sample (ref2va) and the last frame (first/last-frame templates) are job inputs
// confined exactly as the reference image: each refused path names its own field.
TEST_F(InputRoots, TheVoiceAndTheLastFrameAreConfinedTheSameWay) {
  config::Limits limits;
  limits.input_roots = {root_};
  std::ofstream(root_ / "voice.wav") << "RIFF";
  auto ok = spec::parse_batch(R"({"jobId":"a","prompt":"p","referenceAudio":"voice.wav",)"
                              R"("lastFrameImage":")" +
                                  (root_ / "sub/ref.png").string() + "\"}\n",
                              limits);
  EXPECT_TRUE(ok.errors.empty()) << ok.errors[0].error.to_string();
  ASSERT_EQ(ok.specs.size(), 1u);
  EXPECT_EQ(ok.specs[0].reference_audio(), "voice.wav");
  EXPECT_EQ(ok.specs[0].last_frame_image(), (root_ / "sub/ref.png").string());
  const std::string why =
      "/etc/shadow is not under an input root (limits.input_roots: " + root_.string() + ")";
  for (const std::string field : {"referenceAudio", "lastFrameImage"}) {
    SCOPED_TRACE(field);
    auto bad =
        spec::parse_batch(R"({"jobId":"b","prompt":"p",")" + field + R"(":"/etc/shadow"})", limits);
    ASSERT_EQ(bad.errors.size(), 1u);
    EXPECT_EQ(bad.errors[0].error.field, field);
    EXPECT_EQ(bad.errors[0].error.reason, why);
    auto escape = spec::parse_batch(
        R"({"jobId":"c","prompt":"p",")" + field + R"(":"../outside.png"})", limits);
    ASSERT_EQ(escape.errors.size(), 1u);
    EXPECT_EQ(escape.errors[0].error.field, field);
  }
}

// The smallest valid cluster config, with `extra` merged in.
nlohmann::json cluster(nlohmann::json extra) {
  auto j = nlohmann::json::parse(R"({"hosts": [{"name": "local"}], "pools": [
      {"name": "enc", "host": "local", "stage": "encode"}, {"name": "s", "host": "local", "stage": "sample"},
      {"name": "d", "host": "local", "stage": "decode"}]})");
  j.merge_patch(extra);
  return j;
}

TEST_F(InputRoots, TheConfigDefaultIsTheStateDirsInputsAndAnEmptyListAllowsNone) {
  auto c = config::parse(cluster({{"state_dir", dir_.string()}}), dir_);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->limits.input_roots, std::vector<fs::path>({dir_ / "inputs"}));
  auto set = config::parse(cluster({{"limits", {{"input_roots", {"imgs", "/srv/refs"}}}}}), dir_);
  ASSERT_TRUE(set.ok()) << set.error().to_string();
  EXPECT_EQ(set->limits.input_roots, std::vector<fs::path>({dir_ / "imgs", "/srv/refs"}));
  auto none =
      config::parse(cluster({{"limits", {{"input_roots", nlohmann::json::array()}}}}), dir_);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->limits.input_roots.empty());
  auto bad = config::parse(cluster({{"limits", {{"input_roots", "imgs"}}}}), dir_);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("/limits/input_roots"), std::string::npos)
      << bad.error().message;
}

}  // namespace
}  // namespace h3pipe
