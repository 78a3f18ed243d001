// Every runtime that reads a job's referenceImage opens it at the time of use, once, beneath
// limits.input_roots (common/runtime/inputs.h; issue #22 item 1):
//   - a relative path is the file under the root, never a same-named file in the service's
//     working directory (the test runs from a directory holding a garbage "ref.png");
//   - a file swapped for a symlink after submission (which passed spec::validate) is refused on
//     the next attempt with runtime.permanent.input naming the path, and nothing outside is read.
// Builtin (decodes from the descriptor), sim (hashes the bytes), exec (the command gets a private
// copy).  The comfyui runtime's upload is covered in
// tests/runtime/comfyui_recovery_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "common/artifacts/artifacts.h"
#include "common/config/config.h"
#include "common/core/error_codes.h"
#include "common/latent/latent.h"
#include "common/runtime/builtin_runtime.h"
#include "common/runtime/exec_runtime.h"
#include "common/runtime/sim_runtime.h"
#include "common/runtime/stage_output.h"
#include "common/spec/spec.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;

namespace {

// A PNG of one colour, written by Python's zlib (no image library needed).
void write_png(const fs::path& p, int r, int g, int b) {
  const std::string py = fmt::format(
      "import struct,zlib\n"
      "w=h=16\n"
      "raw=b''.join(b'\\x00'+bytes([{},{},{}])*w for _ in range(h))\n"
      "c=lambda t,d: struct.pack('>I',len(d))+t+d+struct.pack('>I',zlib.crc32(t+d)&0xffffffff)\n"
      "open('{}','wb').write(b'\\x89PNG\\r\\n\\x1a\\n'+c(b'IHDR',struct.pack('>IIBBBBB',w,h,8,2,0,"
      "0,0))"
      "+c(b'IDAT',zlib.compress(raw))+c(b'IEND',b''))\n",
      r, g, b, p.string());
  const fs::path script = p.string() + ".py";
  std::ofstream(script) << py;
  ASSERT_EQ(ts::sh("/usr/bin/python3 " + script.string()).first, 0);
  fs::remove(script);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class RuntimeInputs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = d_.path() / "inputs";
    fs::create_directories(root_);
    fs::create_directories(d_.path() / "outside");
    fs::create_directories(d_.path() / "cwd");
    write_png(root_ / "ref.png", 200, 30, 30);
    write_png(d_.path() / "outside" / "secret.png", 30, 30, 200);
    // What a path opened relative to the working directory would read instead.
    std::ofstream(d_.path() / "cwd" / "ref.png") << "not the root's file, not an image";
    old_cwd_ = fs::current_path();
    fs::current_path(d_.path() / "cwd");
    pool_.name = "enc";
    pool_.host = "local";
    pool_.stage = config::StageKind::kEncode;
    cluster_.pools.push_back(pool_);
    cluster_.artifact_root = d_.path() / "artifacts";
    cluster_.output_root = d_.path() / "outputs";
    cluster_.limits.input_roots = {root_};
    spec_.set_job_id("job-1");
    spec_.set_prompt("a kite");
    spec_.set_width(64);
    spec_.set_height(64);
    spec_.set_frames(9);
    spec_.set_fps(24);
    spec_.set_steps(2);
  }
  void TearDown() override { fs::current_path(old_cwd_); }

  runtime::FactoryArgs args(const nlohmann::json& settings) {
    settings_ = settings;
    return {&cluster_, &cluster_.pools[0], &settings_, 7};
  }
  runtime::StageContext ctx(const std::string& job = "job-1") {
    runtime::StageContext c;
    c.run_id = "run-1";
    c.spec = &spec_;
    c.job_class = "default";
    c.output = cluster_.artifact_root / "run-1" / job / "conditioning.safetensors";
    c.root = cluster_.artifact_root;
    return c;
  }
  // The submission check passes, then the file is replaced by a symlink to one outside.
  void swap_in_symlink() {
    ASSERT_TRUE(spec::validate(spec_, cluster_).empty());
    fs::remove(root_ / "ref.png");
    fs::create_symlink(d_.path() / "outside" / "secret.png", root_ / "ref.png");
  }
  void expect_refused(const Result<runtime::StageOutput>& out) {
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error().code, errc::runtime::kPermanentInput.id) << out.error().to_string();
    EXPECT_TRUE(errc::is_permanent(out.error().code));
    EXPECT_NE(out.error().message.find((root_ / "ref.png").string()), std::string::npos)
        << out.error().message;
    EXPECT_NE(out.error().message.find("symlink"), std::string::npos) << out.error().message;
  }

  ts::TempDir d_;
  fs::path root_, old_cwd_;
  config::Pool pool_;
  config::Cluster cluster_;
  nlohmann::json settings_ = nlohmann::json::object();
  pb::JobSpec spec_;
};

const nlohmann::json kTinyModel = {{"width", 32},      {"depth", 1},       {"heads", 2},
                                   {"text_layers", 1}, {"cond_tokens", 8}, {"threads", 1}};

TEST_F(RuntimeInputs, BuiltinEncodeReadsARelativeReferenceBeneathTheRootNotTheCwd) {
  auto rt = runtime::make_builtin_encode(args(kTinyModel));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  spec_.set_reference_image("ref.png");
  ASSERT_TRUE(spec::validate(spec_, cluster_).empty());
  auto rel = (*rt)->run(ctx("rel"));
  ASSERT_TRUE(rel.ok()) << rel.error().to_string();
  spec_.set_reference_image((root_ / "ref.png").string());
  auto abs = (*rt)->run(ctx("abs"));
  ASSERT_TRUE(abs.ok()) << abs.error().to_string();
  EXPECT_EQ(rel->sha256, abs->sha256) << "the relative path is the root's file";
}

TEST_F(RuntimeInputs, BuiltinEncodeRefusesASymlinkSwappedInAfterSubmission) {
  auto rt = runtime::make_builtin_encode(args(kTinyModel));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  for (std::string ref : {(root_ / "ref.png").string(), std::string("ref.png")}) {
    SCOPED_TRACE(ref);
    spec_.set_reference_image(ref);
    if (!fs::is_symlink(root_ / "ref.png")) swap_in_symlink();
    expect_refused((*rt)->run(ctx()));
  }
}

TEST_F(RuntimeInputs, SimEncodeReadsTheReferenceBytesBeneathTheRoot) {
  auto rt = runtime::make_sim_encode(args(nlohmann::json::object()));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto none = (*rt)->run(ctx("none"));
  ASSERT_TRUE(none.ok()) << none.error().to_string();
  spec_.set_reference_image("ref.png");
  auto rel = (*rt)->run(ctx("rel"));
  ASSERT_TRUE(rel.ok()) << rel.error().to_string();
  spec_.set_reference_image((root_ / "ref.png").string());
  auto abs = (*rt)->run(ctx("abs"));
  ASSERT_TRUE(abs.ok()) << abs.error().to_string();
  EXPECT_EQ(rel->sha256, abs->sha256);
  EXPECT_NE(rel->sha256, none->sha256) << "the reference's bytes are in the conditioning";
  swap_in_symlink();
  expect_refused((*rt)->run(ctx("swapped")));
}

// The command copies FIXTURE to the output and REFERENCE's bytes to $REPORT.
constexpr const char* kExecScript = R"PY(
import os, shutil, sys
out, ref = sys.argv[1], sys.argv[2]
with open(ref, "rb") as f, open(os.environ["REPORT"], "wb") as r:
    r.write(f.read())
shutil.copyfile(os.environ["FIXTURE"], out)
)PY";

TEST_F(RuntimeInputs, ExecGetsACopyOfTheFileBeneathTheRootNeverThePath) {
  const fs::path script = d_.path() / "enc.py", fixture = d_.path() / "fixture.safetensors",
                 report = d_.path() / "report.bin";
  std::ofstream(script) << kExecScript;
  latent::TensorF32 t{{1, 4, 8}, std::vector<float>(32, 0.5f)};
  ASSERT_TRUE(latent::write_tensors(fixture, {{"cond", t}}, {}).ok());
  nlohmann::json settings = {
      {"command", {"/usr/bin/python3", script.string(), "{output}", "{reference_image}"}},
      {"env", {{"FIXTURE", fixture.string()}, {"REPORT", report.string()}}},
      {"timeout_s", 30}};
  auto rt = runtime::make_exec_encode(args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  spec_.set_reference_image("ref.png");
  auto out = (*rt)->run(ctx());
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(slurp(report), slurp(root_ / "ref.png")) << "the command read the root's file";
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(ctx().output.parent_path()))
    left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"conditioning.safetensors",
                                            "conditioning.safetensors.sha256"}))
      << "the private copy is gone";
  fs::remove(report);
  swap_in_symlink();
  expect_refused((*rt)->run(ctx("swapped")));
  EXPECT_FALSE(fs::exists(report)) << "the command never ran";
}

// Issue #22 item 11: inputs no retry can change fail permanently (dead-lettered on the first
// delivery, not retried queue.max_deliveries times): a conditioning whose header length is over
// the limit, an output folder behind a planted symlink.
TEST_F(RuntimeInputs, InputsThatCanNeverSucceedArePermanent) {
  const fs::path cond = d_.path() / "huge_header.safetensors";
  {
    std::ofstream f(cond, std::ios::binary);
    const std::uint64_t n = 2u << 20;  // 2 MiB of header claimed
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
    f << "{\"cond\": {}}";
  }
  cluster_.pools[0].stage = config::StageKind::kSample;
  auto smp = runtime::make_sim_sample(args(nlohmann::json::object()));
  ASSERT_TRUE(smp.ok()) << smp.error().to_string();
  auto c = ctx();
  c.input = cond;
  c.output = cluster_.artifact_root / "run-1" / "job-1" / "latent.h3latent";
  auto out = (*smp)->run(c);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, errc::latent::kHeaderTooLarge.id) << out.error().to_string();
  EXPECT_TRUE(errc::is_permanent(out.error().code));
  EXPECT_NE(out.error().message.find(cond.string()), std::string::npos) << out.error().message;

  fs::create_directories(cluster_.artifact_root);
  fs::create_directory_symlink(d_.path() / "outside", cluster_.artifact_root / "run-2");
  auto p = ctx();
  p.run_id = "run-2";
  p.output = cluster_.artifact_root / "run-2" / "job-1" / "conditioning.safetensors";
  auto st = runtime::prepare_output(p, config::StageKind::kEncode);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, errc::path::kSymlink.id) << st.error().to_string();
  EXPECT_TRUE(errc::is_permanent(st.error().code));
}

// Issue #22 item 11: a jobClass the cluster does not define is refused at submission with the
// classes it does define (the CLI prints it as FILE:LINE: jobClass: ...;
// tests/e2e/forged_task_e2e_test).
TEST_F(RuntimeInputs, AnUnknownJobClassIsRefusedWithTheKnownClasses) {
  for (const char* name : {"hd", "sd"}) {
    config::JobClass jc;
    jc.name = name;
    cluster_.classes.push_back(jc);
  }
  auto b = spec::parse_batch(
      "{\"jobId\":\"a\",\"prompt\":\"p\",\"jobClass\":\"hd\"}\n"
      "{\"jobId\":\"b\",\"prompt\":\"p\",\"jobClass\":\"xl\"}\n"
      "{\"jobId\":\"c\",\"prompt\":\"p\",\"jobClass\":\"default\"}\n",
      cluster_);
  ASSERT_EQ(b.errors.size(), 1u);
  EXPECT_EQ(b.errors[0].line, 2u);
  EXPECT_EQ(b.errors[0].error.to_string(),
            "jobClass: \"xl\" is not a job class of this cluster (known: default, hd, sd)");
  // The stage workers apply the same rule to a task's spec (spec::Check::kTask).
  pb::JobSpec s = spec_;
  s.set_job_class("xl");
  EXPECT_EQ(spec::validate(s, cluster_, spec::Check::kTask).size(), 1u);
}

}  // namespace
