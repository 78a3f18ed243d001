// Unit: a read-only or full folder (issue #14).  The writers of artifacts, receipts and MP4s fail
// with an io.* error naming the path and the errno text, and no .part (data or sidecar) outlives
// the attempt.  The folders are small tmpfs mounts (mount(2) needs CAP_SYS_ADMIN: root in CI;
// without it the tests skip and say why).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/artifacts/artifacts.h"
#include "common/config/config.h"
#include "common/latent/latent.h"
#include "common/runtime/sim_runtime.h"
#include "tests/support/small_fs.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;

namespace {

// Every file below `dir` whose name ends in .part.
std::vector<std::string> parts_below(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".part") out.push_back(e.path().lexically_relative(dir).string());
  return out;
}

void expect_io_error(const Error& e, const fs::path& path, const char* errno_text) {
  EXPECT_EQ(e.code.rfind("io.", 0), 0u) << e.to_string();
  EXPECT_NE(e.message.find(path.string()), std::string::npos) << "names the path: " << e.message;
  EXPECT_NE(e.message.find(errno_text), std::string::npos) << "names the errno: " << e.message;
}

constexpr std::size_t kPage = 4096;
const std::string kReceipt(3000, 'r');  // one page of data

}  // namespace

TEST(IoErrors, AFullFolderFailsTheWriteAndLeavesNoPart) {
  ts::SmallFs small(16 * kPage);
  H3_REQUIRE_SMALL_FS(small);
  const artifacts::Root root(small.path());
  fs::create_directories(small.path() / "run");
  small.fill(0);
  const fs::path receipt = small.path() / "run" / "j.pipeline.json";
  auto w = artifacts::write_atomic(root, receipt, kReceipt);
  ASSERT_FALSE(w.ok());
  expect_io_error(w.error(), artifacts::part_path(receipt), "No space left on device");
  EXPECT_EQ(parts_below(small.path()), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(receipt));
}

// The data fits, its sidecar does not: neither .part stays (both did), for the receipt's
// write_atomic and a stage output's write_once.
TEST(IoErrors, ASidecarThatDoesNotFitLeavesNeitherPart) {
  ts::SmallFs small(16 * kPage);
  H3_REQUIRE_SMALL_FS(small);
  const artifacts::Root root(small.path());
  fs::create_directories(small.path() / "run");
  small.fill(kPage);
  const fs::path receipt = small.path() / "run" / "j.pipeline.json";
  auto w = artifacts::write_atomic(root, receipt, kReceipt);
  ASSERT_FALSE(w.ok());
  expect_io_error(w.error(), receipt.string() + ".sha256.part", "No space left on device");
  EXPECT_EQ(parts_below(small.path()), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(receipt));

  const fs::path out = small.path() / "run" / "j" / "cond.safetensors";
  fs::create_directories(out.parent_path());
  auto once = artifacts::write_once(
      root, out, {reinterpret_cast<const std::uint8_t*>(kReceipt.data()), kReceipt.size()});
  ASSERT_FALSE(once.ok());
  // A stage output's sidecar goes through a temporary of its own, NAME.sha256.<token>.part.
  expect_io_error(once.error(), out.string() + ".sha256.", "No space left on device");
  EXPECT_EQ(parts_below(small.path()), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".sha256"))
      << "no sidecar for an output that is not there";
}

TEST(IoErrors, AReadOnlyFolderFailsTheWriteNamingPathAndErrno) {
  ts::SmallFs small(16 * kPage);
  H3_REQUIRE_SMALL_FS(small);
  fs::create_directories(small.path() / "run");
  ASSERT_TRUE(small.read_only()) << std::strerror(errno);
  const fs::path receipt = small.path() / "run" / "j.pipeline.json";
  auto w = artifacts::write_atomic(artifacts::Root(small.path()), receipt, kReceipt);
  ASSERT_FALSE(w.ok());
  expect_io_error(w.error(), artifacts::part_path(receipt), "Read-only file system");
  EXPECT_EQ(parts_below(small.path()), std::vector<std::string>{});
}

// The decoder's MP4 writer (libav, by path) in a folder that fills up mid-file.
TEST(IoErrors, TheDecoderInAFullFolderFailsWithTheErrnoAndLeavesNoPart) {
  ts::SmallFs small(8 * kPage);
  H3_REQUIRE_SMALL_FS(small);
  ts::TempDir d;
  config::Cluster cluster;
  cluster.artifact_root = d.path() / "artifacts";
  cluster.output_root = small.path();
  config::Pool pool;
  pool.name = "dec";
  pool.host = "h";
  nlohmann::json settings = nlohmann::json::object();
  pb::JobSpec spec;
  spec.set_job_id("j");
  spec.set_prompt("a cat");
  spec.set_width(256);
  spec.set_height(256);
  spec.set_frames(33);
  spec.set_fps(12);
  spec.set_steps(2);
  latent::Latent l = latent::make_latent(latent::builtin_profile(), {256, 256, 33, 12});
  for (std::size_t i = 0; i < l.video.size(); ++i)
    l.video[i] = static_cast<float>((i * 7919) % 1000) / 500.0f - 1;
  const fs::path input = cluster.artifact_root / "run" / "j" / "latent.h3latent";
  ASSERT_TRUE(latent::write_latent(input, l).ok());
  runtime::FactoryArgs args{&cluster, &pool, &settings, 1};
  auto dec = runtime::make_sim_decode(args);
  ASSERT_TRUE(dec.ok());
  runtime::StageContext ctx;
  ctx.run_id = "run";
  ctx.spec = &spec;
  ctx.job_class = "default";
  ctx.input = input;
  ctx.output = small.path() / "run" / "j.mp4";
  ctx.root = small.path();
  auto r = (*dec)->run(ctx);
  ASSERT_FALSE(r.ok()) << "the MP4 should not fit in 32 KiB";
  // It names the file it was writing: this execution's own temporary (NAME.p<pid>-<hex>.part).
  EXPECT_NE(r.error().message.find(ctx.output.string() + fmt::format(".p{}-", ::getpid())),
            std::string::npos)
      << r.error().to_string();
  EXPECT_NE(r.error().message.find("No space left on device"), std::string::npos)
      << r.error().to_string();
  EXPECT_EQ(parts_below(small.path()), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(ctx.output));
}
