// Unit: every file a service creates resolves under its configured root (issue #7 item 7).
// Each hostile path is refused with a named error and nothing appears outside the root; every
// case runs with both resolvers (openat2 where the kernel has it, and the O_NOFOLLOW walk).
#include "common/artifacts/safe_path.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "common/artifacts/artifacts.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
using namespace h3pipe::artifacts;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A root with a sibling "outside" folder holding a file an attacker would like to overwrite.
class Beneath : public ::testing::TestWithParam<Resolver> {
 protected:
  void SetUp() override {
    if (GetParam() == Resolver::kOpenat2 && !openat2_available())
      GTEST_SKIP() << "openat2 is not available on this kernel; the walk covers it";
    root = d.path() / "root";
    outside = d.path() / "outside";
    fs::create_directories(root);
    fs::create_directories(outside);
    std::ofstream(outside / "secret") << "keep";
  }
  // Nothing but the planted secret may exist outside, and it keeps its content.
  void expect_outside_untouched() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(outside))
      names.push_back(e.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"secret"});
    EXPECT_EQ(slurp(outside / "secret"), "keep");
  }
  std::string open_code(const fs::path& rel, int flags = O_WRONLY | O_CREAT | O_TRUNC) {
    auto fd = open_beneath(root, rel, flags, 0644, GetParam());
    if (fd.ok()) {
      ::close(*fd);
      return "ok";
    }
    EXPECT_FALSE(fd.error().message.empty());
    return fd.error().code;
  }
  ts::TempDir d;
  fs::path root, outside;
};

TEST_P(Beneath, CreatesFilesAndDirectoriesBelowTheRoot) {
  ASSERT_TRUE(mkdirs_beneath(root, "run-1/job-1", GetParam()).ok());
  ASSERT_TRUE(mkdirs_beneath(root, "run-1/job-1", GetParam()).ok());  // existing is fine
  EXPECT_EQ(open_code("run-1/job-1/out.bin"), "ok");
  EXPECT_TRUE(fs::is_regular_file(root / "run-1" / "job-1" / "out.bin"));
  auto dir = open_dir_beneath(root, "run-1", false, GetParam());
  ASSERT_TRUE(dir.ok()) << dir.error().to_string();
}

TEST_P(Beneath, RefusesDotDotAbsoluteNulAndOverlongPaths) {
  EXPECT_EQ(open_code("../outside/pwned"), "path.dotdot");
  EXPECT_EQ(open_code("a/../../outside/pwned"), "path.dotdot");
  EXPECT_EQ(open_code("./x"), "path.dotdot");
  EXPECT_EQ(open_code((outside / "pwned").string()), "path.absolute");
  EXPECT_EQ(open_code(std::string("job\0/../../outside/pwned", 24)), "path.nul");
  EXPECT_EQ(open_code(std::string(256, 'j')), "path.too_long");
  std::string deep;
  for (int i = 0; i < 40; ++i) deep += std::string(120, 'd') + "/";
  EXPECT_EQ(open_code(deep + "f"), "path.too_long");
  EXPECT_EQ(open_code(""), "path.empty");
  EXPECT_EQ(open_code("//"), "path.absolute");
  EXPECT_EQ(mkdirs_beneath(root, "../outside/made", GetParam()).error().code, "path.dotdot");
  EXPECT_EQ(mkdirs_beneath(root, outside / "made", GetParam()).error().code, "path.absolute");
  expect_outside_untouched();
  EXPECT_TRUE(fs::is_empty(root));
}

TEST_P(Beneath, RefusesASymlinkedDirectoryPointingOutside) {
  fs::create_directory_symlink(outside, root / "run-1");
  EXPECT_EQ(open_code("run-1/pwned"), "path.symlink");
  EXPECT_EQ(open_code("run-1/secret"), "path.symlink");
  EXPECT_EQ(open_code("run-1/secret", O_RDONLY), "path.symlink");  // no reading through it either
  auto mk = mkdirs_beneath(root, "run-1/job-1", GetParam());
  ASSERT_FALSE(mk.ok());
  EXPECT_EQ(mk.error().code, "path.symlink") << mk.error().message;
  EXPECT_NE(mk.error().message.find("symlink"), std::string::npos);
  // A symlink deeper in the tree, and one to a directory inside the root, are refused too.
  fs::create_directories(root / "run-2");
  fs::create_directory_symlink(root / "run-2", root / "alias");
  EXPECT_EQ(open_code("alias/x"), "path.symlink");
  fs::create_directory_symlink("../../outside", root / "run-2" / "job");
  EXPECT_EQ(open_code("run-2/job/pwned"), "path.symlink");
  expect_outside_untouched();
}

TEST_P(Beneath, RefusesASymlinkedFinalFilePointingOutside) {
  fs::create_symlink(outside / "secret", root / "out.bin");
  EXPECT_EQ(open_code("out.bin"), "path.symlink");
  EXPECT_EQ(open_code("out.bin", O_WRONLY | O_CREAT | O_EXCL), "path.symlink");
  // A dangling symlink would make O_CREAT create its target outside the root.
  fs::create_symlink(outside / "planted", root / "dangling");
  EXPECT_EQ(open_code("dangling"), "path.symlink");
  expect_outside_untouched();
}

TEST_P(Beneath, ASymlinkedRootIsTrustedConfiguration) {
  fs::path real = d.path() / "real";
  fs::create_directories(real);
  fs::create_directory_symlink(real, d.path() / "via-link");
  auto fd = open_beneath(d.path() / "via-link", "f", O_WRONLY | O_CREAT, 0644, GetParam());
  ASSERT_TRUE(fd.ok()) << fd.error().to_string();
  ::close(*fd);
  EXPECT_TRUE(fs::exists(real / "f"));
}

INSTANTIATE_TEST_SUITE_P(Resolvers, Beneath, ::testing::Values(Resolver::kOpenat2, Resolver::kWalk),
                         [](const auto& info) {
                           return info.param == Resolver::kWalk ? "walk" : "openat2";
                         });

TEST(RelativeBeneath, SplitsOnlyPathsLexicallyBelowTheRoot) {
  EXPECT_EQ(*relative_beneath("/data/art", "/data/art/r/j/x"), fs::path("r/j/x"));
  EXPECT_EQ(*relative_beneath("/data/art/", "/data/art//r/x"), fs::path("r/x"));
  EXPECT_EQ(*relative_beneath("/data/art", "r/x"), fs::path("r/x"));
  EXPECT_EQ(relative_beneath("/data/art", "/data/artwork/x").error().code, "path.not_beneath");
  EXPECT_EQ(relative_beneath("/data/art", "/data/art").error().code, "path.not_beneath");
  EXPECT_EQ(relative_beneath("/data/art", "/etc/passwd").error().code, "path.not_beneath");
  EXPECT_EQ(relative_beneath("/data/art", "/data/art/r/../../../etc/passwd").error().code,
            "path.dotdot");
}

// The artifact writers with a Root: the same refusals, through write_atomic / commit_part / verify.
class ArtifactsUnderRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    root = d.path() / "artifacts";
    outside = d.path() / "outside";
    fs::create_directories(outside);
    std::ofstream(outside / "secret") << "keep";
  }
  void expect_outside_untouched() {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator(outside))
      n += e.path().filename() == "secret" ? 0 : 1;
    EXPECT_EQ(n, 0u) << "something was created outside the root";
    EXPECT_EQ(slurp(outside / "secret"), "keep");
  }
  ts::TempDir d;
  fs::path root, outside;
};

TEST_F(ArtifactsUnderRoot, WritesCommitsAndVerifiesBelowTheRoot) {
  Root r(root);
  auto sha =
      write_atomic(r, root / "run-1" / "job-1" / "cond.safetensors", std::string_view("hello"));
  ASSERT_TRUE(sha.ok()) << sha.error().to_string();
  EXPECT_EQ(*sha, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  EXPECT_EQ(*verify(r, root / "run-1" / "job-1" / "cond.safetensors"), *sha);
  EXPECT_EQ(*verify(r, "run-1/job-1/cond.safetensors"), *sha);  // relative to the root
  EXPECT_EQ(read_sidecar(r, "run-1/job-1/cond.safetensors"), *sha);
  ASSERT_TRUE(make_dirs(r, root / "run-1" / "job-2").ok());
  { std::ofstream(root / "run-1" / "job-2" / "latent.h3latent.part") << "hello"; }
  auto c = commit_part(r, root / "run-1" / "job-2" / "latent.h3latent", *sha);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(verify(r, root / "run-1" / "nope" / "x").error().code, "artifact.missing");
}

TEST_F(ArtifactsUnderRoot, RefusesHostileIdsAndPathsWithNothingCreatedOutside) {
  Root r(root);
  auto code = [&](const fs::path& p) {
    auto w = write_atomic(r, p, std::string_view("x"));
    return w.ok() ? std::string("ok") : w.error().code;
  };
  EXPECT_EQ(code(root / ".." / "outside" / "pwned"), "path.dotdot");
  EXPECT_EQ(code(root / "run" / ".." / ".." / "outside" / "pwned"), "path.dotdot");
  EXPECT_EQ(code(outside / "pwned"), "path.not_beneath");
  EXPECT_EQ(code("../outside/pwned"), "path.dotdot");
  EXPECT_EQ(code(root / std::string("job\0x", 5) / "out"), "path.nul");
  EXPECT_EQ(code(root / std::string(300, 'j') / "out"), "path.too_long");
  EXPECT_EQ(code(root / "run" / std::string(250, 'j')),
            "path.too_long");  // no room for .sha256.part
  EXPECT_EQ(make_dirs(r, outside / "d").error().code, "path.not_beneath");
  expect_outside_untouched();
}

TEST_F(ArtifactsUnderRoot, RefusesSymlinksPlantedInTheTree) {
  Root r(root);
  fs::create_directories(root);
  // A run directory that is a symlink to somewhere else.
  fs::create_directory_symlink(outside, root / "run-1");
  auto w = write_atomic(r, root / "run-1" / "job-1" / "cond.safetensors", std::string_view("x"));
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code, "path.symlink") << w.error().message;
  EXPECT_EQ(make_dirs(r, root / "run-1" / "job-1").error().code, "path.symlink");
  EXPECT_EQ(verify(r, root / "run-1" / "secret").error().code, "path.symlink");
  // A final file that is a symlink to a file outside: never read as a verified output ...
  fs::create_directories(root / "run-2");
  fs::create_symlink(outside / "secret", root / "run-2" / "out.mp4");
  EXPECT_EQ(verify(r, root / "run-2" / "out.mp4").error().code, "path.symlink");
  EXPECT_EQ(verify(root / "run-2" / "out.mp4").error().code,
            "path.symlink");  // the legacy overload too
  // ... and writing replaces the link itself (rename), never the file it points to.
  ASSERT_TRUE(write_atomic(r, root / "run-2" / "out.mp4", std::string_view("new")).ok());
  EXPECT_FALSE(fs::is_symlink(root / "run-2" / "out.mp4"));
  EXPECT_EQ(slurp(root / "run-2" / "out.mp4"), "new");
  // A .part planted as a symlink: commit_part refuses to hash or rename it.
  fs::create_symlink(outside / "secret", root / "run-2" / "lat.h3latent.part");
  auto c = commit_part(r, root / "run-2" / "lat.h3latent");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, "path.symlink");
  EXPECT_FALSE(fs::exists(root / "run-2" / "lat.h3latent"));
  // write_atomic unlinks a planted .part / .sha256.part symlink instead of writing through it.
  fs::create_symlink(outside / "planted", root / "run-2" / "r.json.part");
  fs::create_symlink(outside / "planted2", root / "run-2" / "r.json.sha256.part");
  ASSERT_TRUE(write_atomic(r, root / "run-2" / "r.json", std::string_view("{}")).ok());
  expect_outside_untouched();
}

TEST(ArtifactsLegacy, OverloadsWithoutARootStillWorkAndNeverFollowTheirOwnNames) {
  ts::TempDir d;
  std::ofstream(d.path() / "target") << "keep";
  fs::create_symlink(d.path() / "target", d.path() / "x.part");
  ASSERT_TRUE(write_atomic(d.path() / "sub" / "x", std::string_view("a")).ok());
  ASSERT_TRUE(write_atomic(d.path() / "x", std::string_view("b")).ok());
  EXPECT_EQ(slurp(d.path() / "target"), "keep");
  EXPECT_TRUE(verify(d.path() / "x").ok());
  EXPECT_EQ(verify(d.path() / "missing" / "x").error().code, "artifact.missing");
}

}  // namespace
