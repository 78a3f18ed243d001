#include "common/runtime/comfyui_runtime.h"

#include <fmt/ranges.h>

#include <chrono>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/latent/latent.h"
#include "common/runtime/comfyui_client.h"
#include "common/runtime/comfyui_workflow.h"
#include "common/runtime/stage_output.h"

namespace h3pipe::runtime {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using comfyui::FileRef;
using comfyui::PromptState;
using config::StageKind;

constexpr int kMaxPollFailures = 5;   // consecutive failed polls before giving up
constexpr int kQueueCheckEvery = 10;  // polls between "is it still queued?" checks

struct ComfySettings {
  std::string url, device, client_id, input_dir, input_ref, upload_subfolder = "h3pipe";
  std::optional<comfyui::Workflow> workflow;
  double poll_ms = 500, timeout_s = 3600, request_timeout_s = 30;
  int connect_timeout_ms = 3000;
  bool fused = false, keep_history = false;
  std::uint64_t max_output_bytes = 0;
};

// "http://host:port/..." -> "host:port"; empty when the URL is not http(s).
std::string authority_of(const std::string& url) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (url.rfind(scheme, 0) != 0) continue;
    auto rest = url.substr(scheme.size());
    return rest.substr(0, rest.find('/'));
  }
  return {};
}

Result<ComfySettings> parse_settings(const FactoryArgs& a, StageKind stage) {
  std::string base = settings_path(a, stage);
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json& j = a.settings ? *a.settings : kEmpty;
  config::Errors e;
  ComfySettings s;
  {
    config::ObjectReader r(j, base, e);
    r.get("url", s.url, true);
    r.get("fused", s.fused);
    r.get("input_dir", s.input_dir);
    r.get("input_ref", s.input_ref);
    r.get("upload_subfolder", s.upload_subfolder);
    r.get("poll_ms", s.poll_ms, 1, 600000);
    r.get("timeout_s", s.timeout_s, 0.001, 1e7);
    r.get("connect_timeout_ms", s.connect_timeout_ms, 1, 600000);
    r.get("request_timeout_s", s.request_timeout_s, 0.001, 86400);
    r.get("client_id", s.client_id);
    r.get("device", s.device);
    r.get("keep_history", s.keep_history);
    const auto* workflow = r.raw("workflow");
    const auto* inject = r.raw("inject");
    const auto* output = r.raw("output");
    if (r.ok()) {
      if (!s.url.empty() && authority_of(s.url).empty())
        e.add(r.path("url"), fmt::format("\"{}\": expected http://host:port", s.url));
      if (s.fused && stage != StageKind::kEncode)
        e.add(r.path("fused"), "only the encode stage can be fused into the sample workflow");
      if (s.fused && (workflow || inject || output))
        e.add(r.path("fused"),
              "a fused encode queues no workflow: remove workflow, inject and output");
      if (!s.fused && !workflow)
        e.add(r.path("workflow"), "required but missing (a file path or an inline object)");
      if (!s.input_ref.empty() && s.input_ref != "path" && s.input_ref != "name")
        e.add(r.path("input_ref"),
              fmt::format("\"{}\": expected \"path\" or \"name\"", s.input_ref));
      if (s.input_ref == "path" && s.input_dir.empty())
        e.add(r.path("input_ref"),
              "\"path\" needs input_dir (an uploaded file has no path this runtime knows)");
      if (s.input_ref.empty()) s.input_ref = s.input_dir.empty() ? "name" : "path";
      if (!s.input_dir.empty() && !fs::is_directory(s.input_dir))
        e.add(r.path("input_dir"), fmt::format("\"{}\" is not a directory", s.input_dir));
      if (!s.fused && workflow) {
        s.workflow = comfyui::Workflow::parse(*workflow, inject, output, base, e);
        if (s.workflow && stage == StageKind::kEncode && s.workflow->uses("input"))
          e.add(base + "/inject/input", "the encode stage has no input artifact");
      }
    }
  }
  if (!e.empty())
    return make_error("runtime.settings", "comfyui runtime ({}): invalid settings:\n{}",
                      config::stage_name(stage), e.joined());
  while (!s.url.empty() && s.url.back() == '/') s.url.pop_back();
  if (s.device.empty()) s.device = "comfyui@" + authority_of(s.url);
  if (s.client_id.empty())
    s.client_id = "h3pipe-" + (a.pool ? a.pool->name : std::string("worker"));
  switch (stage) {
    case StageKind::kEncode:
      s.max_output_bytes = 1ull << 30;
      break;
    case StageKind::kSample:
      s.max_output_bytes = a.cluster ? a.cluster->limits.max_latent_bytes : (256ull << 20);
      break;
    case StageKind::kDecode:
      s.max_output_bytes = 16ull << 30;
      break;
  }
  return s;
}

const char* output_extension(StageKind s) {
  switch (s) {
    case StageKind::kEncode:
      return ".safetensors";
    case StageKind::kSample:
      return ".h3latent";
    case StageKind::kDecode:
      return ".mp4";
  }
  return "";
}

// Files this task put where the server reads them; removed when the task ends.
class StagedInputs final {
 public:
  ~StagedInputs() {
    std::error_code ec;
    for (const auto& p : paths_) fs::remove(p, ec);
  }
  void add(fs::path p) { paths_.push_back(std::move(p)); }

 private:
  std::vector<fs::path> paths_;
};

class ComfyRunner final {
 public:
  ComfyRunner(ComfySettings s, StageKind stage)
      : s_(std::move(s)),
        stage_(stage),
        client_(s_.url, http::Options{s_.connect_timeout_ms,
                                      static_cast<long>(s_.request_timeout_s * 1000), 64u << 20}) {}

  Result<StageOutput> run(const StageContext& ctx) {
    H3_TRY(prepare_output(ctx, stage_));
    if (s_.fused) return write_fused_marker(ctx);
    const auto& wf = *s_.workflow;
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(s_.timeout_s));
    StagedInputs staged;
    auto values = job_values(ctx);
    if (wf.uses("input")) {
      if (ctx.input.empty())
        return make_error("runtime.input", "comfyui {}: the task has no input artifact",
                          stage_name());
      auto v = stage_file(ctx.input, name_for(ctx, ctx.input.extension().string()), staged);
      if (!v.ok()) return v.error();
      values["input"] = *v;
    }
    if (wf.uses("reference_image") && !ctx.spec->reference_image().empty()) {
      fs::path ref = ctx.spec->reference_image();
      auto v = stage_file(ref, name_for(ctx, "_ref" + ref.extension().string()), staged);
      if (!v.ok()) return v.error();
      values["reference_image"] = *v;
    }

    auto id = client_.queue_prompt(wf.instantiate(values), s_.client_id);
    if (!id.ok()) return id.error();
    auto state = wait(*id, deadline, ctx);
    if (!state.ok()) return state.error();

    const FileRef* pick = nullptr;
    std::vector<std::string> listed;
    for (const auto& f : state->outputs) {
      listed.push_back(f.subfolder.empty() ? f.filename : f.subfolder + "/" + f.filename);
      if (pick) continue;
      if (!wf.output_node().empty()) {
        if (f.node_id == wf.output_node()) pick = &f;
      } else if (fs::path(f.filename).extension() == output_extension(stage_)) {
        pick = &f;
      }
    }
    if (!pick)
      return make_error(
          "runtime.comfyui.no_output",
          "ComfyUI server at {}: prompt {} finished without a {} output{} (outputs: {})", s_.url,
          *id, output_extension(stage_),
          wf.output_node().empty() ? "" : " from node " + wf.output_node(),
          listed.empty() ? "none" : fmt::format("{}", fmt::join(listed, ", ")));
    long left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    auto part = artifacts::part_path(ctx.output);
    auto got = client_.view(*pick, part, s_.max_output_bytes, std::max<long>(left_ms, 30000));
    if (!got.ok()) {
      std::error_code ec;
      fs::remove(part, ec);
      return got.error();
    }
    nlohmann::json settings = {
        {"url", s_.url},
        {"workflow", wf.source()},
        {"workflow_sha256", wf.sha256()},
        {"prompt_id", *id},
        {"output",
         pick->subfolder.empty() ? pick->filename : pick->subfolder + "/" + pick->filename},
        {"seconds", std::chrono::duration<double>(Clock::now() - start).count()}};
    auto out = commit_stage_output(stage_, ctx, s_.device, std::move(settings));
    if (!out.ok())
      return make_error(out.error().code, "ComfyUI server at {}: prompt {}: {}", s_.url, *id,
                        out.error().message);
    if (!s_.keep_history) client_.forget(*id);
    return out;
  }

 private:
  const char* stage_name() const { return config::stage_name(stage_); }

  std::string name_for(const StageContext& ctx, const std::string& suffix) const {
    return fmt::format("h3pipe_{}_{}_{}{}", ctx.run_id, ctx.spec->job_id(), stage_name(), suffix);
  }

  std::map<std::string, nlohmann::json> job_values(const StageContext& ctx) const {
    const auto& sp = *ctx.spec;
    std::map<std::string, nlohmann::json> v = {
        {"prompt", sp.prompt()},
        {"negative_prompt", sp.negative_prompt()},
        {"seed", sp.seed()},
        {"steps", sp.steps()},
        {"width", sp.width()},
        {"height", sp.height()},
        {"frames", sp.frames()},
        {"fps", sp.fps()},
        {"job_id", sp.job_id()},
        {"run_id", ctx.run_id},
        {"filename_prefix", fmt::format("h3pipe/{}/{}_{}", ctx.run_id, sp.job_id(), stage_name())},
    };
    for (const auto& [k, val] : sp.params()) v["params." + k] = val;
    return v;
  }

  // Puts a local file where the server reads it; returns the value the workflow gets.
  Result<std::string> stage_file(const fs::path& src, const std::string& name,
                                 StagedInputs& staged) {
    std::error_code ec;
    if (!fs::is_regular_file(src, ec))
      return make_error("runtime.input", "comfyui {}: input {} does not exist", stage_name(),
                        src.string());
    if (s_.input_dir.empty()) {
      auto f = client_.upload(src, name, s_.upload_subfolder);
      if (!f.ok()) return f.error();
      return f->subfolder.empty() ? f->filename : f->subfolder + "/" + f->filename;
    }
    // Copy then rename, so the server never reads a partial file.
    fs::path dest = fs::path(s_.input_dir) / name;
    fs::path tmp = dest;
    tmp += ".part";
    fs::copy_file(src, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(tmp, dest, ec);
    if (ec) {
      fs::remove(tmp, ec);
      return make_error("io.copy", "comfyui {}: cannot copy {} into input_dir {}", stage_name(),
                        src.string(), s_.input_dir);
    }
    staged.add(dest);
    return s_.input_ref == "name" ? name : fs::absolute(dest).string();
  }

  // Polls /history until the prompt finishes, fails, vanishes, the deadline passes or the task
  // is cancelled (the last two cancel it on the server).
  Result<PromptState> wait(const std::string& id, Clock::time_point deadline,
                           const StageContext& ctx) {
    int failures = 0;
    for (int polls = 1;; ++polls) {
      auto next = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double, std::milli>(s_.poll_ms));
      while (Clock::now() < next) {
        if (ctx.cancelled && ctx.cancelled()) {
          client_.cancel(id);
          return make_error("runtime.cancelled",
                            "cancelled; prompt {} removed from ComfyUI server at {}", id, s_.url);
        }
        if (Clock::now() >= deadline) {
          client_.cancel(id);
          return make_error(
              "runtime.timeout",
              "ComfyUI server at {}: prompt {} did not finish within {} s; it was cancelled",
              s_.url, id, s_.timeout_s);
        }
        std::this_thread::sleep_for(
            std::min<Clock::duration>(next - Clock::now(), std::chrono::milliseconds(50)));
      }
      auto st = client_.history(id);
      if (!st.ok()) {
        if (++failures >= kMaxPollFailures) return st.error();
        continue;
      }
      failures = 0;
      if (st->kind == PromptState::Kind::kPending && polls % kQueueCheckEvery == 0) {
        // Neither finished nor queued means the server lost it (a restart drops queue and history).
        auto queued = client_.in_queue(id);
        if (queued.ok() && !*queued) {
          st = client_.history(id);
          if (st.ok() && st->kind == PromptState::Kind::kPending)
            return make_error("runtime.comfyui.lost",
                              "ComfyUI server at {} no longer knows prompt {} (restarted?)", s_.url,
                              id);
          if (!st.ok()) continue;
        }
      }
      if (st->kind == PromptState::Kind::kError)
        return make_error("runtime.comfyui.execution", "ComfyUI server at {}: prompt {} failed: {}",
                          s_.url, id, st->error);
      if (st->kind == PromptState::Kind::kSuccess) return st;
    }
  }

  // The seeds ran encode and sampling in one workflow; encode then only leaves a marker that the
  // chain of custody (receipt hashes) can name.
  Result<StageOutput> write_fused_marker(const StageContext& ctx) {
    latent::TensorF32 t{{1}, {0.f}};
    std::map<std::string, std::string> meta = {
        {"runtime", "comfyui"},
        {"mode", "fused"},
        {"job", ctx.spec->job_id()},
        {"prompt_sha256", sha256_hex(ctx.spec->prompt())},
        {"note", "conditioning is computed inside the sample workflow"}};
    auto sha = latent::write_tensors(ctx.output, {{"fused", t}}, meta);
    if (!sha.ok()) return sha.error();
    std::error_code ec;
    StageOutput out;
    out.sha256 = *sha;
    out.bytes = fs::file_size(ctx.output, ec);
    out.device = s_.device;
    out.settings = {{"url", s_.url}, {"mode", "fused"}};
    return out;
  }

  ComfySettings s_;
  StageKind stage_;
  comfyui::Client client_;
};

class ComfyEncode final : public EncodeRuntime {
 public:
  explicit ComfyEncode(ComfySettings s) : r_(std::move(s), StageKind::kEncode) {}
  Result<StageOutput> encode(const StageContext& ctx) override { return r_.run(ctx); }

 private:
  ComfyRunner r_;
};

class ComfySample final : public SampleRuntime {
 public:
  explicit ComfySample(ComfySettings s) : r_(std::move(s), StageKind::kSample) {}
  Result<StageOutput> sample(const StageContext& ctx) override { return r_.run(ctx); }

 private:
  ComfyRunner r_;
};

class ComfyDecode final : public DecodeRuntime {
 public:
  explicit ComfyDecode(ComfySettings s) : r_(std::move(s), StageKind::kDecode) {}
  Result<StageOutput> decode(const StageContext& ctx) override { return r_.run(ctx); }

 private:
  ComfyRunner r_;
};

}  // namespace

Result<std::unique_ptr<EncodeRuntime>> make_comfyui_encode(const FactoryArgs& a) {
  auto s = parse_settings(a, StageKind::kEncode);
  if (!s.ok()) return s.error();
  return std::unique_ptr<EncodeRuntime>(new ComfyEncode(std::move(*s)));
}
Result<std::unique_ptr<SampleRuntime>> make_comfyui_sample(const FactoryArgs& a) {
  auto s = parse_settings(a, StageKind::kSample);
  if (!s.ok()) return s.error();
  return std::unique_ptr<SampleRuntime>(new ComfySample(std::move(*s)));
}
Result<std::unique_ptr<DecodeRuntime>> make_comfyui_decode(const FactoryArgs& a) {
  auto s = parse_settings(a, StageKind::kDecode);
  if (!s.ok()) return s.error();
  return std::unique_ptr<DecodeRuntime>(new ComfyDecode(std::move(*s)));
}

}  // namespace h3pipe::runtime
