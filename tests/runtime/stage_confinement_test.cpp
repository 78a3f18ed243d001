// Unit: the writers of the stages and of the transfer service create files only below their
// configured roots (issue #7 item 7).  A symlink planted inside the output tree and pointing
// outside makes the stage (or the transfer step) fail with a path.* error that names the path,
// and nothing is written outside: not the output, not its .part, not its sidecar.
//   - sim encode / sample (write_once below the artifact root) and decode (libav writes the
//     .part by path: prepare_output checks the folder below the output root first);
//   - prepare_output, which every external runtime (exec, comfyui, builtin) calls before its
//     writer opens the .part by path;
//   - the transfer receiver's PartFile (the inbox), the sender's outbox records and the
//     same-host handoff.
// The same calls without the symlink succeed, so the failure is the confinement.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "common/artifacts/artifacts.h"
#include "common/config/config.h"
#include "common/latent/latent.h"
#include "common/runtime/sim_runtime.h"
#include "common/runtime/stage_output.h"
#include "common/transfer/disk.h"
#include "common/transfer/outbox.h"
#include "common/transfer/sender.h"
#include "tests/support/test_support.h"

using namespace h3pipe;
namespace fs = std::filesystem;

namespace {

class Confinement : public ::testing::Test {
 protected:
  void SetUp() override {
    artifacts_ = d_.path() / "artifacts";
    outputs_ = d_.path() / "outputs";
    outside_ = d_.path() / "outside";
    fs::create_directories(artifacts_);
    fs::create_directories(outputs_);
    fs::create_directories(outside_);
    std::ofstream(outside_ / "secret") << "keep";
    pool_.name = "p";
    pool_.host = "h";
    cluster_.artifact_root = artifacts_;
    cluster_.output_root = outputs_;
    spec_.set_job_id("j");
    spec_.set_prompt("a cat");
    spec_.set_width(64);
    spec_.set_height(64);
    spec_.set_frames(9);
    spec_.set_fps(12);
    spec_.set_steps(2);
  }
  // Plants ROOT/RUN -> outside (the attacker's symlink inside the tree).
  void plant(const fs::path& root, const std::string& run) {
    fs::create_directories(root);
    fs::create_directory_symlink(outside_, root / run);
  }
  // Only the planted secret is outside, unchanged.
  void expect_outside_untouched() {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(outside_))
      names.push_back(e.path().lexically_relative(outside_).string());
    EXPECT_EQ(names, std::vector<std::string>{"secret"});
    std::ifstream in(outside_ / "secret");
    std::string s;
    in >> s;
    EXPECT_EQ(s, "keep");
  }
  runtime::StageContext ctx(const std::string& run, const fs::path& output,
                            const fs::path& input = {}) {
    runtime::StageContext c;
    c.run_id = run;
    c.spec = &spec_;
    c.job_class = "default";
    c.output = output;
    c.input = input;
    return c;
  }
  runtime::FactoryArgs args() { return {&cluster_, &pool_, &settings_, 1}; }
  fs::path write_latent(const std::string& run) {
    latent::Latent l = latent::make_latent(latent::builtin_profile(), {64, 64, 9, 12});
    l.video.assign(l.geometry.video_elems(), 0.25f);
    fs::path p = artifacts_ / run / "j" / "latent.h3latent";
    EXPECT_TRUE(latent::write_latent(p, l).ok());
    return p;
  }

  ts::TempDir d_;
  fs::path artifacts_, outputs_, outside_;
  config::Cluster cluster_;
  config::Pool pool_;
  nlohmann::json settings_ = nlohmann::json::object();
  pb::JobSpec spec_;
};

void expect_refused(const Error& e, const std::string& path_part) {
  EXPECT_EQ(e.code.rfind("path.", 0), 0u) << e.to_string();
  EXPECT_NE(e.message.find(path_part), std::string::npos)
      << "the error names the path: " << e.message;
}

TEST_F(Confinement, SimDecodeRefusesASymlinkedRunFolderAndWritesNothingOutside) {
  auto dec = runtime::make_sim_decode(args());
  ASSERT_TRUE(dec.ok());
  const fs::path latent = write_latent("good");
  auto ok = (*dec)->run(ctx("good", outputs_ / "good" / "j.mp4", latent));
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(artifacts::verify(outputs_ / "good" / "j.mp4").value(), ok->sha256);

  plant(outputs_, "bad");
  auto r = (*dec)->run(ctx("bad", outputs_ / "bad" / "j.mp4", latent));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "path.symlink") << r.error().to_string();
  expect_refused(r.error(), "bad");
  expect_outside_untouched();
}

TEST_F(Confinement, SimEncodeAndSampleRefuseASymlinkedFolderBelowTheArtifactRoot) {
  auto enc = runtime::make_sim_encode(args());
  auto smp = runtime::make_sim_sample(args());
  ASSERT_TRUE(enc.ok() && smp.ok());
  auto cond = (*enc)->run(ctx("good", artifacts_ / "good" / "j" / "cond.safetensors"));
  ASSERT_TRUE(cond.ok()) << cond.error().to_string();
  auto lat = (*smp)->run(ctx("good", artifacts_ / "good" / "j" / "latent.h3latent",
                             artifacts_ / "good" / "j" / "cond.safetensors"));
  ASSERT_TRUE(lat.ok()) << lat.error().to_string();

  // The run folder, and (another run) the job folder, are symlinks to outside.
  plant(artifacts_, "bad");
  fs::create_directories(artifacts_ / "bad2");
  fs::create_directory_symlink(outside_, artifacts_ / "bad2" / "j");
  for (const std::string run : {"bad", "bad2"}) {
    SCOPED_TRACE(run);
    auto e = (*enc)->run(ctx(run, artifacts_ / run / "j" / "cond.safetensors"));
    ASSERT_FALSE(e.ok());
    expect_refused(e.error(), run);
    auto s = (*smp)->run(ctx(run, artifacts_ / run / "j" / "latent.h3latent",
                             artifacts_ / "good" / "j" / "cond.safetensors"));
    ASSERT_FALSE(s.ok());
    expect_refused(s.error(), run);
  }
  expect_outside_untouched();
}

TEST_F(Confinement, PrepareOutputRefusesSymlinksBeforeAnExternalWriterOpensThePart) {
  // What exec / comfyui / builtin call before their writer opens ctx.output's .part by path.
  ASSERT_TRUE(
      runtime::prepare_output(ctx("ok", outputs_ / "ok" / "j.mp4"), config::StageKind::kDecode)
          .ok());
  EXPECT_TRUE(fs::is_directory(outputs_ / "ok"));
  plant(outputs_, "bad");
  std::ofstream(outside_ / "j.mp4.part") << "stale";  // must not be removed through the link
  auto s =
      runtime::prepare_output(ctx("bad", outputs_ / "bad" / "j.mp4"), config::StageKind::kDecode);
  ASSERT_FALSE(s.ok());
  expect_refused(s.error(), "bad");
  EXPECT_TRUE(fs::exists(outside_ / "j.mp4.part"));
  fs::remove(outside_ / "j.mp4.part");
  // A symlinked job folder below the artifact root (encode/sample layout).
  fs::create_directories(artifacts_ / "r");
  fs::create_directory_symlink(outside_, artifacts_ / "r" / "j");
  auto t = runtime::prepare_output(ctx("r", artifacts_ / "r" / "j" / "latent.h3latent"),
                                   config::StageKind::kSample);
  ASSERT_FALSE(t.ok());
  expect_refused(t.error(), "j");
  // The root the runtime derives is the configured one (or ctx.root when the worker sets it).
  EXPECT_EQ(runtime::output_target(ctx("r", artifacts_ / "r" / "j" / "latent.h3latent"),
                                   config::StageKind::kSample)
                .root.path,
            artifacts_);
  EXPECT_EQ(runtime::output_target(ctx("r", outputs_ / "r" / "j.mp4"), config::StageKind::kDecode)
                .root.path,
            outputs_);
  expect_outside_untouched();
}

TEST_F(Confinement, TransferInboxOutboxAndLocalHandoffStayBelowTheirRoots) {
  const std::string data(1000, 'x');
  Sha256 h;
  h.update(data.data(), data.size());
  const std::string sha = h.hex_digest();
  // Receiver: the inbox (artifact root) with a symlinked run folder.
  {
    Sha256 hasher;
    std::uint64_t have = 0;
    auto ok = transfer::PartFile::open(artifacts_ / "r" / "j" / "latent.h3latent", data.size(), sha,
                                       &hasher, &have, false, artifacts_);
    ASSERT_TRUE(ok.ok()) << ok.error().to_string();
    plant(artifacts_, "bad");
    auto f = transfer::PartFile::open(artifacts_ / "bad" / "j" / "latent.h3latent", data.size(),
                                      sha, &hasher, &have, false, artifacts_);
    ASSERT_FALSE(f.ok());
    expect_refused(f.error(), "bad");
  }
  // Sender: outbox records below the outbox.
  const fs::path outbox = d_.path() / "outbox";
  pb::StageTask t;
  t.set_run_id("r");
  t.set_job_id("j");
  ASSERT_TRUE(transfer::record_task(outbox, t).ok());
  EXPECT_TRUE(fs::exists(outbox / "r" / "j.task"));
  plant(outbox, "bad");
  t.set_run_id("bad");
  auto rec = transfer::record_task(outbox, t);
  ASSERT_FALSE(rec.ok());
  expect_refused(rec.error(), "bad");
  // Same-host handoff into a local root with a symlinked run folder.
  const fs::path src = artifacts_ / "src" / "j" / "latent.h3latent";
  ASSERT_TRUE(artifacts::write_atomic(src, data).ok());
  const fs::path local = d_.path() / "local";
  auto good = transfer::local_handoff(src, local / "r" / "j" / "latent.h3latent", local);
  ASSERT_TRUE(good.ok()) << good.error().to_string();
  plant(local, "bad");
  auto bad = transfer::local_handoff(src, local / "bad" / "j" / "latent.h3latent", local);
  ASSERT_FALSE(bad.ok());
  expect_refused(bad.error(), "bad");
  expect_outside_untouched();
}

// Not confinement, but the same sim runtimes: their profile time covers the whole stage and the
// output is published last, as a real runtime's is.  A stage cancelled (its worker killed) once
// its work is written but before its profile time is up leaves no output and no .part, so a
// re-delivery redoes it instead of finding it done.
TEST_F(Confinement, SimStagesPublishAtTheEndOfTheirProfileTime) {
  config::Profile long_stage;
  long_stage.seconds = 30;
  pool_.profiles["default"] = long_stage;
  auto enc = runtime::make_sim_encode(args());
  auto smp = runtime::make_sim_sample(args());
  auto dec = runtime::make_sim_decode(args());
  ASSERT_TRUE(enc.ok() && smp.ok() && dec.ok());
  // Any temporary of the output: the shared NAME.part a runtime streams into, or the commit's own
  // NAME.<token>.part (issue #35 D6) that the hold runs beside.
  auto temporaries_of = [](const fs::path& out) {
    std::vector<fs::path> found;
    std::error_code ec;
    const std::string prefix = out.filename().string() + ".";
    for (const auto& e : fs::directory_iterator(out.parent_path(), ec)) {
      const std::string n = e.path().filename().string();
      if (n.starts_with(prefix) && n.ends_with(".part")) found.push_back(e.path());
    }
    return found;
  };
  auto cancel_once_written = [&](runtime::StageContext c) {
    const fs::path out = c.output;
    // The work is done: only the hold is left.
    c.cancelled = [out, &temporaries_of] { return !temporaries_of(out).empty(); };
    return c;
  };
  // Inputs for sample and decode, written directly (a sim encode would take its 30 s).
  const fs::path cond_in = artifacts_ / "in" / "j" / "cond.safetensors";
  latent::TensorF32 t{{1, 77, 256}, std::vector<float>(77 * 256, 0.1f)};
  ASSERT_TRUE(artifacts::write_atomic(cond_in, latent::serialize_tensors({{"cond", t}}, {})).ok());
  const fs::path latent_in = write_latent("in");

  const fs::path cond = artifacts_ / "r" / "j" / "cond.safetensors";
  const fs::path lat = artifacts_ / "r" / "j" / "latent.h3latent";
  const fs::path mp4 = outputs_ / "r" / "j.mp4";
  auto e = (*enc)->run(cancel_once_written(ctx("r", cond)));
  auto s = (*smp)->run(cancel_once_written(ctx("r", lat, cond_in)));
  auto d = (*dec)->run(cancel_once_written(ctx("r", mp4, latent_in)));
  for (const auto* r : {&e, &s, &d}) {
    ASSERT_FALSE(r->ok());
    EXPECT_EQ(r->error().code, "runtime.cancelled") << r->error().to_string();
  }
  for (const fs::path& p : {cond, lat, mp4}) {
    EXPECT_FALSE(fs::exists(p)) << p << " published before the end of its profile time";
    EXPECT_TRUE(temporaries_of(p).empty()) << p << ": a temporary left behind";
    EXPECT_FALSE(fs::exists(artifacts::sidecar_path(p))) << p;
  }
}

}  // namespace
