// The exec runtime: a stage runs a small script as its command (success for each stage, non-zero
// exit, timeout with its process group killed, missing output, invalid output, cancellation,
// bounded stderr) and settings are validated at construction with their config path.
#include "common/runtime/exec_runtime.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/runtime/subprocess.h"
#include "tests/support/runtime_test_util.h"

namespace h3pipe::runtime {
namespace {
using namespace h3pipe::runtime::testing;
using config::StageKind;
using Clock = std::chrono::steady_clock;

constexpr const char* kPython = "/usr/bin/python3";

// A command script: writes what MODE says to argv[2] (the .part), reports on stderr.
constexpr const char* kWriter = R"PY(
import json, os, shutil, sys, time
mode, out = sys.argv[1], sys.argv[2]
if mode == "copy":                      # copy FIXTURE (a ready artifact) to the output
    shutil.copyfile(os.environ["FIXTURE"], out)
elif mode == "spec":                    # check the placeholders, then copy FIXTURE
    spec = json.loads(sys.argv[3])
    assert spec["jobId"] == sys.argv[4] == os.environ["H3PIPE_JOB_ID"], (spec, sys.argv)
    assert sys.argv[5] == "run-1" == os.environ["H3PIPE_RUN_ID"]
    assert os.environ["H3PIPE_OUTPUT"] == out and os.environ["EXTRA"] == "job=" + sys.argv[4]
    # The exec runtime does not stage the voice or the last frame: never an unconfined path.
    assert "referenceAudio" not in spec and "lastFrameImage" not in spec, spec
    shutil.copyfile(os.environ["FIXTURE"], out)
elif mode == "mp4":                     # the job's movie (small_spec: 64x64, 9 frames, sound)
    import subprocess
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "color=c=gray:s=64x64:r=24",
                    "-f", "lavfi", "-i", "anullsrc=r=48000:cl=stereo", "-frames:v", "9", "-c:v", "libx264",
                    "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", "-f", "mp4", out], check=True)
elif mode == "garbage":
    with open(out, "wb") as f:
        f.write(b"this is not a tensor file at all")
elif mode == "fail":
    for i in range(50):
        print(f"progress line {i}", file=sys.stderr)
    print("RuntimeError: CUDA out of memory on device 0", file=sys.stderr)
    sys.exit(3)
elif mode == "flood":
    sys.stderr.write("x" * (8 << 20) + "\nlast words\n")
    sys.exit(1)
elif mode == "spawn_and_hang":          # leaves a grandchild in its process group
    import subprocess
    child = subprocess.Popen(["/bin/sleep", "60"])
    with open(out + ".childpid", "w") as f:
        f.write(str(child.pid))
    print("hanging", file=sys.stderr, flush=True)
    time.sleep(60)
)PY";

class ExecRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    script_ = dir_.path() / "writer.py";
    write_text(script_, kWriter);
    out_ = dir_.path() / "run-1" / "job-1" / "artifact";
  }

  // settings {"command": [python, writer.py, mode, "{output}", extra...], ...}
  nlohmann::json command(const std::string& mode, std::vector<std::string> extra = {}) {
    nlohmann::json cmd = {kPython, script_.string(), mode, "{output}"};
    for (auto& e : extra) cmd.push_back(e);
    return {{"command", cmd}, {"timeout_s", 20}};
  }

  TempDir dir_;
  fs::path script_, out_;
  pb::JobSpec spec_ = small_spec();
};

bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  // A zombie (not yet reaped by init in a container) is gone for our purpose.
  std::string stat = read_text(fmt::format("/proc/{}/stat", pid));
  auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z';
}

TEST_F(ExecRuntimeTest, SampleCopiesAValidLatentAndCommitsIt) {
  auto fixture = dir_.path() / "fixture.h3latent";
  ASSERT_TRUE(latent::write_latent(fixture, latent_for(spec_)).ok());
  auto settings = command("copy");
  settings["env"] = {{"FIXTURE", fixture.string()}};
  settings["device"] = "cuda:0";
  ClusterFixture c(StageKind::kSample);
  auto rt = make_exec_sample(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(context(spec_, dir_.path() / "cond.safetensors", out_));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  auto verified = artifacts::verify(out_);
  ASSERT_TRUE(verified.ok()) << verified.error().to_string();
  EXPECT_EQ(*verified, out->sha256);
  EXPECT_EQ(out->bytes, fs::file_size(out_));
  EXPECT_EQ(out->device, "cuda:0");
  EXPECT_EQ(out->settings["exit_code"], 0);
  EXPECT_EQ(out->settings["env_keys"], nlohmann::json({"FIXTURE"}));
  EXPECT_EQ(temporaries_of(out_), std::vector<std::string>{});
}

TEST_F(ExecRuntimeTest, EncodeGetsSpecJsonAndIdsThroughPlaceholdersAndEnv) {
  auto fixture = dir_.path() / "cond.safetensors";
  latent::TensorF32 t{{1, 4, 8}, std::vector<float>(32, 0.5f)};
  ASSERT_TRUE(latent::write_tensors(fixture, {{"cond", t}}, {}).ok());
  auto settings = command("spec", {"{spec_json}", "{job_id}", "{run_id}"});
  settings["env"] = {{"FIXTURE", fixture.string()}, {"EXTRA", "job={job_id}"}};
  spec_.set_reference_audio("/etc/passwd");  // a forged task: the exec command never sees them
  spec_.set_last_frame_image("../last.png");
  ClusterFixture c(StageKind::kEncode);
  auto rt = make_exec_encode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(context(spec_, {}, out_));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(artifacts::verify(out_).ok());
}

TEST_F(ExecRuntimeTest, DecodeAcceptsAnMp4) {
  auto latent_in = dir_.path() / "in.h3latent";
  ASSERT_TRUE(latent::write_latent(latent_in, latent_for(spec_)).ok());
  ClusterFixture c(StageKind::kDecode);
  auto settings = command("mp4", {"{input}"});
  auto rt = make_exec_decode(c.args(settings));
  ASSERT_TRUE(rt.ok()) << rt.error().to_string();
  auto out = (*rt)->run(context(spec_, latent_in, out_));
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(artifacts::verify(out_).ok());
}

TEST_F(ExecRuntimeTest, NonZeroExitFailsWithTheTailOfStderr) {
  ClusterFixture c(StageKind::kSample);
  auto settings = command("fail");
  auto rt = make_exec_sample(c.args(settings));
  ASSERT_TRUE(rt.ok());
  auto out = (*rt)->run(context(spec_, {}, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.exec.exit");
  EXPECT_NE(out.error().message.find("status 3"), std::string::npos) << out.error().message;
  EXPECT_NE(out.error().message.find("CUDA out of memory on device 0"), std::string::npos);
  EXPECT_NE(out.error().message.find("progress line 49"), std::string::npos);
  EXPECT_FALSE(fs::exists(out_));
  EXPECT_EQ(temporaries_of(out_), std::vector<std::string>{});
}

TEST_F(ExecRuntimeTest, TimeoutKillsTheWholeProcessGroup) {
  ClusterFixture c(StageKind::kSample);
  auto settings = command("spawn_and_hang");
  settings["timeout_s"] = 1.0;
  settings["kill_grace_s"] = 0.5;
  auto rt = make_exec_sample(c.args(settings));
  ASSERT_TRUE(rt.ok());
  auto t0 = Clock::now();
  auto out = (*rt)->run(context(spec_, {}, out_));
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.timeout");
  EXPECT_NE(out.error().message.find("hanging"), std::string::npos) << out.error().message;
  EXPECT_LT(secs, 5.0);
  // The command wrote OUTPUT.childpid beside its output, this execution's own temporary.
  fs::path pidfile;
  for (const auto& e : fs::directory_iterator(out_.parent_path()))
    if (e.path().filename().string().ends_with(".part.childpid")) pidfile = e.path();
  ASSERT_FALSE(pidfile.empty());
  pid_t child = std::stoi(read_text(pidfile));
  auto deadline = Clock::now() + std::chrono::seconds(5);
  while (!process_gone(child) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(process_gone(child)) << "grandchild " << child << " survived the timeout";
}

TEST_F(ExecRuntimeTest, MissingOutputFails) {
  ClusterFixture c(StageKind::kSample);
  nlohmann::json settings = {{"command", {"/bin/true", "{output}"}}};
  auto rt = make_exec_sample(c.args(settings));
  ASSERT_TRUE(rt.ok());
  // A stale .part from a crashed attempt must not pass for this attempt's output.
  fs::create_directories(out_.parent_path());
  ASSERT_TRUE(latent::write_latent(artifacts::part_path(out_), latent_for(spec_)).ok());
  auto out = (*rt)->run(context(spec_, {}, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.exec.no_output");
  EXPECT_FALSE(fs::exists(out_));
}

TEST_F(ExecRuntimeTest, InvalidOutputIsRejectedForEachStage) {
  for (auto stage : {StageKind::kEncode, StageKind::kSample, StageKind::kDecode}) {
    ClusterFixture c(stage);
    auto settings = command("garbage");
    auto ctx = context(spec_, stage == StageKind::kEncode ? fs::path() : dir_.path() / "in", out_);
    Result<StageOutput> out = Error{"unset", "unset"};
    if (stage == StageKind::kEncode) out = (*make_exec_encode(c.args(settings)))->run(ctx);
    if (stage == StageKind::kSample) out = (*make_exec_sample(c.args(settings)))->run(ctx);
    if (stage == StageKind::kDecode) out = (*make_exec_decode(c.args(settings)))->run(ctx);
    ASSERT_FALSE(out.ok()) << config::stage_name(stage);
    EXPECT_EQ(out.error().code, "runtime.invalid_output") << out.error().to_string();
    EXPECT_FALSE(fs::exists(out_));
    EXPECT_EQ(temporaries_of(out_), std::vector<std::string>{});
  }
}

TEST_F(ExecRuntimeTest, TheLatentMustFitTheJobsProfile) {
  auto other = small_spec();
  other.set_width(128);
  auto fixture = dir_.path() / "wrong.h3latent";
  ASSERT_TRUE(latent::write_latent(fixture, latent_for(other)).ok());
  ClusterFixture c(StageKind::kSample);
  auto settings = command("copy");
  settings["env"] = {{"FIXTURE", fixture.string()}};
  auto strict = (*make_exec_sample(c.args(settings)))->run(context(spec_, {}, out_));
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.error().code, "runtime.invalid_output");
  EXPECT_NE(
      strict.error().message.find("latent metadata says job 128x64x9@24, the job is 64x64x9@24"),
      std::string::npos)
      << strict.error().message;
  // A Wan 2.1 job (64x64, 9 = 4k+1 frames) takes a Wan latent and refuses the builtin one.
  const auto& wan = *latent::find_builtin_profile("wan2.1");
  auto wan_file = dir_.path() / "wan.h3latent";
  ASSERT_TRUE(latent::write_latent(wan_file, latent::make_latent(wan, {64, 64, 9, 24})).ok());
  auto ctx = context(spec_, {}, out_);
  ctx.latent_profile = wan;
  settings["env"] = {{"FIXTURE", wan_file.string()}};
  auto ok = (*make_exec_sample(c.args(settings)))->run(ctx);
  EXPECT_TRUE(ok.ok()) << ok.error().to_string();
  fs::remove(out_);
  fs::remove(artifacts::sidecar_path(out_));
  auto builtin_file = dir_.path() / "builtin.h3latent";
  ASSERT_TRUE(latent::write_latent(builtin_file, latent_for(spec_)).ok());
  settings["env"] = {{"FIXTURE", builtin_file.string()}};
  auto bad = (*make_exec_sample(c.args(settings)))->run(ctx);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("profile wan2.1"), std::string::npos) << bad.error().message;
  // The old escape hatch is gone: an unknown key.
  settings["check_geometry"] = false;
  auto rt = make_exec_sample(c.args(settings));
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.error().message.find("check_geometry: unknown key"), std::string::npos)
      << rt.error().message;
}

TEST_F(ExecRuntimeTest, CancellationStopsTheCommand) {
  ClusterFixture c(StageKind::kDecode);
  nlohmann::json settings = {{"command", {"/bin/sleep", "30"}}, {"kill_grace_s", 0.2}};
  auto rt = make_exec_decode(c.args(settings));
  ASSERT_TRUE(rt.ok());
  auto ctx = context(spec_, dir_.path() / "in", out_);
  auto t0 = Clock::now();
  ctx.cancelled = [t0] { return Clock::now() - t0 > std::chrono::milliseconds(200); };
  auto out = (*rt)->run(ctx);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code, "runtime.cancelled");
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 3.0);
}

TEST_F(ExecRuntimeTest, StderrIsBoundedInMemoryAndInTheReason) {
  ClusterFixture c(StageKind::kSample);
  auto settings = command("flood");
  auto out = (*make_exec_sample(c.args(settings)))->run(context(spec_, {}, out_));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.error().message.find("last words"), std::string::npos);
  EXPECT_LT(out.error().message.size(), 3000u);
}

TEST(ExecSettingsTest, ErrorsNameTheSettingsPath) {
  struct Case {
    nlohmann::json settings;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {{{"command", {"/bin/true"}}, {"timeout", 5}},
       "/stages/sample/runtime/settings/timeout: unknown key"},
      {nlohmann::json::object(), "/stages/sample/runtime/settings/command: required but missing"},
      {{{"command", nlohmann::json::array()}},
       "/stages/sample/runtime/settings/command: must not be empty"},
      {{{"command", {"/bin/true", "{inptu}"}}},
       "/stages/sample/runtime/settings/command/1: unknown placeholder {inptu}"},
      {{{"command", {"/bin/true", "{output"}}},
       "/stages/sample/runtime/settings/command/1: unclosed"},
      {{{"command", {"no-such-program-h3pipe"}}},
       "/stages/sample/runtime/settings/command/0: \"no-such-program-h3pipe\" is not an executable "
       "file on PATH"},
      {{{"command", {"/bin/true"}}, {"env", {{"A", 1}}}},
       "/stages/sample/runtime/settings/env/A: expected a string"},
      {{{"command", {"/bin/true"}}, {"timeout_s", -1}},
       "/stages/sample/runtime/settings/timeout_s: -1 is out of range"},
  };
  ClusterFixture c(StageKind::kSample);
  for (const auto& k : cases) {
    auto rt = make_exec_sample(c.args(k.settings));
    ASSERT_FALSE(rt.ok()) << k.settings.dump();
    EXPECT_EQ(rt.error().code, "runtime.settings");
    EXPECT_NE(rt.error().message.find(k.expect), std::string::npos) << rt.error().message;
  }
}

TEST(ExecSettingsTest, EncodeHasNoInputAndPoolOverridesNameThePool) {
  ClusterFixture enc(StageKind::kEncode);
  nlohmann::json s = {{"command", {"/bin/true", "{input}"}}};
  auto rt = make_exec_encode(enc.args(s));
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.error().message.find("/stages/encode/runtime/settings/command/1"),
            std::string::npos);

  ClusterFixture pool(StageKind::kDecode, /*pool_override=*/true);
  nlohmann::json bad = {{"command", {"/bin/true"}}, {"timeout_s", "soon"}};
  auto d = make_exec_decode(pool.args(bad));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("/pools/0/runtime/settings/timeout_s: expected a number"),
            std::string::npos)
      << d.error().message;
}

TEST(SubprocessTest, TailTextKeepsWholeLinesFromTheEnd) {
  EXPECT_EQ(tail_text("a\nb\nc\n", 100), "a\nb\nc");
  EXPECT_EQ(tail_text("line one\nline two\nline three", 12), "...line three");
}

TEST(SubprocessTest, SpawnFailureNamesTheProgram) {
  SpawnOptions o;
  o.argv = {"/nonexistent/h3pipe-prog"};
  o.env = merged_environment({});
  auto r = spawn_and_wait(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "exec.spawn");
  EXPECT_NE(r.error().message.find("/nonexistent/h3pipe-prog"), std::string::npos);
}

}  // namespace
}  // namespace h3pipe::runtime
