#include "common/runtime/comfyui_runtime.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include "common/artifacts/artifacts.h"
#include "common/artifacts/safe_path.h"
#include "common/core/sha256.h"
#include "common/latent/latent.h"
#include "common/runtime/comfyui_client.h"
#include "common/runtime/comfyui_progress.h"
#include "common/runtime/comfyui_settings.h"
#include "common/runtime/comfyui_workflow.h"
#include "common/runtime/stage_output.h"
#include "common/spec/input_file.h"

namespace h3pipe::runtime {
namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using comfyui::FileRef;
using comfyui::PromptLocation;
using comfyui::PromptState;
using config::StageKind;

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

// The file kinds a stage's output check can accept: the sample stage also takes core
// SaveLatent's .latent (docs/latent.md), the decode stage any ISO BMFF movie.
bool acceptable_extension(StageKind s, const fs::path& ext) {
  if (ext == output_extension(s)) return true;
  if (s == StageKind::kSample) return ext == ".latent";
  if (s == StageKind::kDecode) return ext == ".mov" || ext == ".m4v";
  return false;
}

std::string shown(const FileRef& f) {
  return f.subfolder.empty() ? f.filename : f.subfolder + "/" + f.filename;
}

// Files this task put where the server reads them (input_dir); removed when the task ends.
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

// Copies `size` bytes from fd to dest through dest.part (the server never sees a partial file).
Status copy_fd(int fd, std::uint64_t size, const fs::path& dest) {
  fs::path tmp = dest;
  tmp += ".part";
  artifacts::UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!out) return make_error(errc::io::kCopy, "open {}: {}", tmp.string(), std::strerror(errno));
  std::vector<char> buf(1 << 20);
  std::uint64_t off = 0;
  while (off < size) {
    ssize_t n = ::pread(fd, buf.data(), std::min<std::uint64_t>(buf.size(), size - off),
                        static_cast<off_t>(off));
    std::string why;
    if (n < 0)
      why = fmt::format("reading the source: {}", std::strerror(errno));
    else if (n == 0)
      why = "the source ended early";
    else if (ssize_t w = ::write(out.get(), buf.data(), static_cast<std::size_t>(n)); w != n)
      why = std::strerror(w < 0 ? errno : ENOSPC);  // a short write: the device is full
    if (!why.empty()) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return make_error(errc::io::kCopy, "copying into {}: {}", tmp.string(), why);
    }
    off += static_cast<std::uint64_t>(n);
  }
  out.reset();
  std::error_code ec;
  fs::rename(tmp, dest, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return make_error(errc::io::kCopy, "rename {} to {}: {}", tmp.string(), dest.string(), why);
  }
  return {};
}

// Job inputs beyond the reference image, injected by name (comfyui_workflow.h).
struct ExtraInput {
  const char* key;    // the template's inject key
  const char* field;  // the spec's JSON field, for messages
  const char* suffix;
  const std::string& (pb::JobSpec::*get)() const;
};
const ExtraInput kExtraInputs[] = {
    {"reference_audio", "referenceAudio", "_voice", &pb::JobSpec::reference_audio},
    {"last_frame_image", "lastFrameImage", "_last", &pb::JobSpec::last_frame_image}};

class ComfyRunner final {
 public:
  ComfyRunner(comfyui::Settings s, StageKind stage)
      : s_(std::move(s)),
        stage_(stage),
        client_(s_.url, http::Options{s_.connect_timeout_ms,
                                      static_cast<long>(s_.request_timeout_s * 1000), 64u << 20}) {}

  Result<StageOutput> run(const StageContext& job_ctx) {
    auto part = prepare_output(job_ctx, stage_);  // this execution's own temporary
    if (!part.ok()) return part.error();
    StageContext ctx = job_ctx;
    ctx.output_part = *part;  // where finish() downloads the output
    if (s_.fused) return write_fused_marker(ctx);
    const bool has_ref = !ctx.spec->reference_image().empty();
    std::string key;
    const comfyui::Workflow* wf = comfyui::choose(s_, ctx.job_class, has_ref, &key);
    if (auto bad = check_template(ctx, wf, key, has_ref); !bad.ok()) return bad.error();
    auto start = Clock::now();
    auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(s_.timeout_s));
    StagedInputs staged;
    auto values = job_values(ctx);
    if (wf->uses("input")) {
      if (ctx.input.empty())
        return make_error(errc::runtime::kInput, "comfyui {}: the task has no input artifact",
                          stage_name());
      if (feeds_stock_latent_loader(*wf)) {
        auto v = stage_comfy_latent(ctx, staged);
        if (!v.ok()) return v.error();
        values["input"] = *v;
      } else {
        spec::InputFile in;
        in.fd = artifacts::UniqueFd(::open(ctx.input.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
        std::error_code ec;
        in.size = fs::file_size(ctx.input, ec);
        if (!in.fd || ec)
          return make_error(errc::runtime::kInput, "comfyui {}: input {} cannot be read",
                            stage_name(), ctx.input.string());
        const std::string name = name_for(ctx, ctx.input.extension().string());
        auto v = stage_file(in, ctx.input.string(), name, staged);
        if (!v.ok()) return v.error();
        values["input"] = *v;
        // The node pack's loader checks the file against the .sha256 beside it
        // (docs/latent.md): the sidecar goes along, naming the staged file.
        if (auto side = stage_sidecar(ctx.input, name, staged); !side.ok()) return side.error();
      }
    }
    if (has_ref && wf->uses("reference_image")) {
      // Read only from the input roots, the way submission checked it (a job naming /etc/shadow
      // never reaches the server).
      const auto& ref = ctx.spec->reference_image();
      auto in = spec::open_input(s_.input_roots, ref);
      if (!in.ok())
        return make_error(errc::runtime::kPermanentInput, "comfyui {}: referenceImage {}",
                          stage_name(), in.error().message);
      auto v =
          stage_file(*in, ref, name_for(ctx, "_ref" + fs::path(ref).extension().string()), staged);
      if (!v.ok()) return v.error();
      values["reference_image"] = *v;
    }
    // The voice sample and the last frame (ref2va, first/last-frame templates): the same roots,
    // the same staging, each under its own name.
    for (const auto& in : kExtraInputs) {
      const std::string& path = (ctx.spec->*in.get)();
      if (path.empty() || !wf->uses(in.key)) continue;
      auto f = spec::open_input(s_.input_roots, path);
      if (!f.ok())
        return make_error(errc::runtime::kPermanentInput, "comfyui {}: {} {}", stage_name(),
                          in.field, f.error().message);
      auto v = stage_file(*f, path, name_for(ctx, in.suffix + fs::path(path).extension().string()),
                          staged);
      if (!v.ok()) return v.error();
      values[in.key] = *v;
    }

    progress_.open(s_.url, s_.client_id, static_cast<int>(s_.connect_timeout_ms),
                   static_cast<bool>(ctx.preview));  // steps and previews (#37, #38)
    // A restarted worker finds what an earlier attempt queued instead of queueing it again.
    std::string id, adopted_from;
    for (long long a = std::max<long long>(ctx.attempt, 1); a >= 1 && id.empty(); --a) {
      std::string earlier = prompt_id(ctx, a);
      auto loc = client_.locate(earlier);
      if (!loc.ok()) return loc.error();
      if (loc->kind == PromptLocation::Kind::kQueued ||
          loc->kind == PromptLocation::Kind::kRunning) {
        id = adopted_from = earlier;
      } else if (loc->kind == PromptLocation::Kind::kDone) {
        if (loc->state.kind == PromptState::Kind::kSuccess) {
          auto out = finish(ctx, *wf, key, earlier, loc->state, start, deadline, true);
          if (out.ok() || out.error().code != errc::runtime::kComfyuiFetch) return out;
        }
        forget(earlier);  // failed, or its output is gone: this attempt runs afresh
      }
    }
    if (!adopted_from.empty()) {
      auto state = wait(id, deadline, ctx);
      // An adopted prompt that was interrupted (the attempt that queued it timed out and
      // cancelled it) is replaced by this attempt's own.
      if (state.ok() || state.error().code != errc::runtime::kComfyuiInterrupted) {
        if (!state.ok()) return state.error();
        return finish(ctx, *wf, key, id, *state, start, deadline, true);
      }
      id.clear();
    }
    id = prompt_id(ctx, std::max<long long>(ctx.attempt, 1));
    comfyui::Submission sub{s_.client_id, id, wf->execution_targets()};
    auto queued = client_.queue_prompt(wf->instantiate(values, id), sub);
    if (!queued.ok()) return with_hint(queued.error());
    id = *queued;
    auto state = wait(id, deadline, ctx);
    if (!state.ok()) return state.error();
    return finish(ctx, *wf, key, id, *state, start, deadline, false);
  }

 private:
  const char* stage_name() const { return config::stage_name(stage_); }

  std::string prompt_id(const StageContext& ctx, long long attempt) const {
    return comfyui::prompt_id_for(ctx.run_id, ctx.spec->job_id(), stage_name(), attempt);
  }

  std::string name_for(const StageContext& ctx, const std::string& suffix) const {
    return fmt::format("h3pipe_{}_{}_{}{}", ctx.run_id, ctx.spec->job_id(), stage_name(), suffix);
  }

  Status check_template(const StageContext& ctx, const comfyui::Workflow* wf,
                        const std::string& key, bool has_ref) const {
    const std::string& job = ctx.spec->job_id();
    if (!wf)
      return make_error(errc::runtime::kPermanentComfyuiTemplate,
                        "comfyui {}: no template for job {} (class {}, {}); configure "
                        "templates.default",
                        stage_name(), job, ctx.job_class,
                        has_ref ? "with a referenceImage" : "no referenceImage");
    // A template without reference_image for a job with one is fine (the encode stage may have
    // consumed the image already); the reverse would load the template's placeholder image.
    if (!has_ref && wf->uses("reference_image"))
      return make_error(errc::runtime::kPermanentComfyuiTemplate,
                        "comfyui {}: job {} has no referenceImage but template \"{}\" needs one "
                        "(it injects reference_image); give text-only jobs their own template "
                        "(templates.default, with the image-to-video one under "
                        "templates.reference)",
                        stage_name(), job, key);
    // Without the job's file the template would load its own placeholder (voice.wav,
    // last_frame.png) and make a video the job did not ask for.
    for (const auto& in : kExtraInputs)
      if (wf->uses(in.key) && (ctx.spec->*in.get)().empty())
        return make_error(errc::runtime::kPermanentComfyuiTemplate,
                          "comfyui {}: job {} has no {} but template \"{}\" needs one (it "
                          "injects {}); give the job its {}",
                          stage_name(), job, in.field, key, in.key, in.field);
    return {};
  }

  Error with_hint(Error e) const {
    if (e.code == errc::runtime::kPermanentComfyuiTooLarge && s_.input_dir.empty())
      e.message +=
          "; give the stage an input_dir on a folder the server reads (its input/ or a shared "
          "mount) so large latents are copied instead of uploaded";
    return e;
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
        {"latent_profile", ctx.latent_profile.name},
    };
    for (const auto& [k, val] : sp.params()) v["params." + k] = val;
    return v;
  }

  // Puts a file (open at in.fd) where the server reads it; returns the value the workflow gets.
  // `subfolder` overrides upload_subfolder; `by_name` makes the workflow value the bare name
  // (a combo of the input folder's files, like LoadLatent's).
  Result<std::string> stage_file(const spec::InputFile& in, const std::string& what,
                                 const std::string& name, StagedInputs& staged,
                                 std::optional<std::string> subfolder = std::nullopt,
                                 bool by_name = false) {
    if (s_.input_dir.empty()) {
      if (in.size > s_.max_upload_bytes)
        return with_hint(
            make_error(errc::runtime::kPermanentComfyuiTooLarge,
                       "comfyui {}: {} is {} bytes, above max_upload_bytes {} (the server's "
                       "--max-upload-size)",
                       stage_name(), what, in.size, s_.max_upload_bytes));
      auto f = client_.upload(in.fd.get(), in.size, name, subfolder.value_or(s_.upload_subfolder));
      if (!f.ok()) return with_hint(f.error());
      return shown(*f);
    }
    fs::path dest = fs::path(s_.input_dir) / name;
    if (auto st = copy_fd(in.fd.get(), in.size, dest); !st.ok())
      return make_error(errc::io::kCopy, "comfyui {}: cannot copy {} into input_dir {}: {}",
                        stage_name(), what, s_.input_dir, st.error().message);
    staged.add(dest);
    return by_name || s_.input_ref == "name" ? name : fs::absolute(dest).string();
  }

  // The decode template feeds the latent to core LoadLatent (stock nodes, a video-only model).
  static bool feeds_stock_latent_loader(const comfyui::Workflow& wf) {
    auto t = wf.targets().find("input");
    if (t == wf.targets().end()) return false;
    for (const auto& target : t->second)
      if (wf.graph()[target.node_id].value("class_type", "") == "LoadLatent") return true;
    return false;
  }

  // Core LoadLatent reads ComfyUI's own .latent (tensor latent_tensor) from the top of the input
  // folder, by name: the job's latent goes there in that form (converted from .h3latent when
  // needed; docs/latent.md).  A profile with audio cannot: core's LATENT has no audio.
  Result<std::string> stage_comfy_latent(const StageContext& ctx, StagedInputs& staged) {
    const latent::Expected want = runtime::expected_latent(ctx);
    auto l = latent::read_latent(ctx.input, &want);
    if (!l.ok()) return l.error();
    auto bytes = latent::serialize_comfy(*l);
    if (!bytes.ok())
      return make_error(errc::runtime::kPermanentInput,
                        "comfyui {}: core LoadLatent cannot take this job's latent ({}); use "
                        "H3LoadLatent from h3pipe's node pack",
                        stage_name(), bytes.error().message);
    spec::InputFile f;
    f.fd = artifacts::UniqueFd(::memfd_create("h3pipe-latent", MFD_CLOEXEC));
    if (!f.fd ||
        ::write(f.fd.get(), bytes->data(), bytes->size()) != static_cast<ssize_t>(bytes->size()) ||
        ::lseek(f.fd.get(), 0, SEEK_SET) != 0)
      return make_error(errc::io::kWrite, "comfyui {}: cannot stage {}", stage_name(),
                        ctx.input.string());
    f.size = bytes->size();
    const std::string name = name_for(ctx, ".latent");
    auto v = stage_file(f, ctx.input.string(), name, staged, /*subfolder=*/"", /*by_name=*/true);
    if (!v.ok()) return v.error();
    return *v;
  }

  // Stages `<name>.sha256` holding the input's digest (from its own sidecar, which the worker
  // verified) beside the staged input.  No local sidecar: nothing to send.
  Status stage_sidecar(const fs::path& input, const std::string& name, StagedInputs& staged) {
    const std::string sha = artifacts::read_sidecar(input);
    if (sha.empty()) return {};
    const std::string line = sha + "  " + name + "\n";
    spec::InputFile side;
    side.fd = artifacts::UniqueFd(::memfd_create("h3pipe-sidecar", MFD_CLOEXEC));
    if (!side.fd ||
        ::write(side.fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
        ::lseek(side.fd.get(), 0, SEEK_SET) != 0)
      return make_error(errc::io::kWrite, "comfyui {}: cannot stage the sidecar of {}",
                        stage_name(), input.string());
    side.size = line.size();
    auto v = stage_file(side, input.string() + ".sha256", name + ".sha256", staged);
    if (!v.ok()) return v.error();
    return {};
  }

  void forget(const std::string& id) {
    if (!s_.keep_history) client_.forget(id);
  }

  // Removes a file the prompt wrote from the server's output folder, when this host sees it
  // (output_dir, a shared mount); the names come from the server, so never beyond that folder.
  void remove_output(const FileRef& f, std::vector<std::string>& problems) const {
    if (s_.output_dir.empty() || f.type != "output") return;
    if (f.filename.empty() || f.filename.find('/') != std::string::npos || f.filename == "." ||
        f.filename == "..") {
      problems.push_back(fmt::format("{}: not a plain file name", shown(f)));
      return;
    }
    auto dir = artifacts::open_dir_beneath(s_.output_dir, f.subfolder, false);
    if (!dir.ok()) {
      problems.push_back(fmt::format("{}: {}", shown(f), dir.error().message));
      return;
    }
    if (::unlinkat(dir->get(), f.filename.c_str(), 0) != 0 && errno != ENOENT)
      problems.push_back(fmt::format("{}: unlink failed", shown(f)));
    // The node pack's save nodes write a .sha256 beside their file and list only the file.
    const std::string side = f.filename + ".sha256";
    if (::unlinkat(dir->get(), side.c_str(), 0) != 0 && errno != ENOENT)
      problems.push_back(fmt::format("{}.sha256: unlink failed", shown(f)));
  }

  // The artifact among the files a prompt lists: from the `output` node when one is named (its
  // file of the stage's kind first), else the file of the stage's kind from the most final node
  // (Workflow::output_rank); ties keep the server's order.
  const FileRef* pick_output(const comfyui::Workflow& wf, const PromptState& st) const {
    const FileRef* pick = nullptr;
    std::tuple<int, int, int> best{};
    for (const auto& f : st.outputs) {
      bool kind = fs::path(f.filename).extension() == output_extension(stage_);
      if (!wf.output_node().empty() ? f.node_id != wf.output_node() : !kind) continue;
      auto [final_, depth] = wf.output_rank(f.node_id);
      std::tuple<int, int, int> rank{kind ? 1 : 0, final_, depth};
      if (!pick || rank > best) {
        pick = &f;
        best = rank;
      }
    }
    return pick;
  }

  Result<StageOutput> finish(const StageContext& ctx, const comfyui::Workflow& wf,
                             const std::string& key, const std::string& id, const PromptState& st,
                             Clock::time_point start, Clock::time_point deadline, bool adopted) {
    std::vector<std::string> cleanup;
    struct Cleanup {
      std::function<void()> f;
      ~Cleanup() { f(); }
    } done{[&] {
      for (const auto& f : st.outputs) remove_output(f, cleanup);
      forget(id);
    }};
    const FileRef* pick = pick_output(wf, st);
    if (!pick) {
      std::vector<std::string> listed;
      for (const auto& f : st.outputs) listed.push_back(shown(f));
      return make_error(
          errc::runtime::kComfyuiNoOutput,
          "ComfyUI server at {}: prompt {} finished without a {} output{} (outputs: {})", s_.url,
          id, output_extension(stage_),
          wf.output_node().empty() ? "" : " from node " + wf.output_node(),
          listed.empty() ? "none" : fmt::format("{}", fmt::join(listed, ", ")));
    }
    // A named output node whose file is not of the stage's kind (a WEBP where an MP4 is due) is
    // the template's fault: every retry would fetch the same kind of file.
    if (!acceptable_extension(stage_, fs::path(pick->filename).extension()))
      return make_error(
          errc::runtime::kPermanentComfyuiTemplate,
          "ComfyUI server at {}: output node {} wrote {}, not a {} file; name the node "
          "that writes the {} (settings `output`)",
          s_.url, pick->node_id, shown(*pick), output_extension(stage_), stage_name());
    long left_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    const fs::path& part = ctx.output_part;
    auto got = client_.view(*pick, part, s_.max_output_bytes, std::max<long>(left_ms, 30000));
    if (!got.ok()) {
      std::error_code ec;
      fs::remove(part, ec);
      return got.error();
    }
    nlohmann::json settings = {
        {"url", s_.url},
        {"template", key},
        {"workflow", wf.source()},
        {"workflow_sha256", wf.sha256()},
        {"prompt_id", id},
        {"attempt", ctx.attempt},
        {"adopted", adopted},
        {"output", shown(*pick)},
        {"seconds", std::chrono::duration<double>(Clock::now() - start).count()}};
    if (const auto* p = progress_.preview_stats(id); p && p->frames > 0)
      settings["previews"] = comfyui::to_json(*p);  // #38: what the previews cost
    auto out = commit_stage_output(stage_, ctx, part, s_.device, std::move(settings));
    if (!out.ok())
      return rephrase(out.error(), "ComfyUI server at {}: prompt {}: {}", s_.url, id,
                      out.error().message);
    done.f();
    done.f = [] {};
    if (!cleanup.empty()) out->settings["cleanup_errors"] = cleanup;
    return out;
  }

  // Polls the prompt until it finishes, fails, is lost, the deadline passes or the task is
  // cancelled (the last two cancel it on the server).  Lost: the server answers but knows the
  // prompt neither as queued, running nor done (it restarted), decided on the first poll that
  // sees it so; an unreachable server is waited for up to unreachable_s.
  Result<PromptState> wait(const std::string& id, Clock::time_point deadline,
                           const StageContext& ctx) {
    std::optional<Clock::time_point> down_since;
    for (;;) {
      auto next = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double, std::milli>(s_.poll_ms));
      while (Clock::now() < next) {
        if (ctx.cancelled && ctx.cancelled()) {
          client_.cancel(id);
          return make_error(errc::runtime::kCancelled,
                            "cancelled; prompt {} removed from ComfyUI server at {}", id, s_.url);
        }
        if (Clock::now() >= deadline) {
          client_.cancel(id);
          return make_error(
              errc::runtime::kTimeout,
              "ComfyUI server at {}: prompt {} did not finish within {} s; it was cancelled",
              s_.url, id, s_.timeout_s);
        }
        progress_.pump(next, id, ctx.progress, ctx.preview);  // at most 50 ms
      }
      auto loc = client_.locate(id);
      if (!loc.ok()) {
        if (!down_since) down_since = Clock::now();
        double down = std::chrono::duration<double>(Clock::now() - *down_since).count();
        if (down >= s_.unreachable_s)
          return rephrase(loc.error(), "{} (for {:.0f} s while prompt {} was waited on)",
                          loc.error().message, down, id);
        continue;
      }
      down_since.reset();
      switch (loc->kind) {
        case PromptLocation::Kind::kQueued:
        case PromptLocation::Kind::kRunning:
          continue;
        case PromptLocation::Kind::kUnknown:
          return make_error(errc::runtime::kComfyuiLost,
                            "ComfyUI server at {} no longer knows prompt {}: neither queued, "
                            "running nor in its history (it restarted, or the prompt was deleted)",
                            s_.url, id);
        case PromptLocation::Kind::kDone:
          if (loc->state.kind == PromptState::Kind::kError) {
            forget(id);
            // A node pack failure carries its code: the task fails with it, and so with the
            // catalogue's retry class for it.  A NaN/Inf latent at a save node is the sampler's
            // result for this job: every retry makes it again.
            if (loc->state.error_code == errc::latent::kNonfinite.id)
              return make_error(errc::runtime::kPermanentNonfinite,
                                "ComfyUI server at {}: prompt {} failed at {}", s_.url, id,
                                loc->state.error);
            if (const ErrorCode* c = errc::find(loc->state.error_code);
                c && !loc->state.interrupted)
              return Error{std::string(c->id),
                           fmt::format("ComfyUI server at {}: prompt {} failed at {}", s_.url, id,
                                       loc->state.error_detail)};
            return make_error(loc->state.interrupted ? errc::runtime::kComfyuiInterrupted
                                                     : errc::runtime::kComfyuiExecution,
                              "ComfyUI server at {}: prompt {} failed: {}", s_.url, id,
                              loc->state.error);
          }
          progress_.drain(id, ctx.progress, ctx.preview);  // its last steps
          return std::move(loc->state);
      }
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
    return write_stage_output(stage_, ctx, latent::serialize_tensors({{"fused", t}}, meta),
                              s_.device, {{"url", s_.url}, {"mode", "fused"}});
  }

  comfyui::Settings s_;
  StageKind stage_;
  comfyui::Client client_;
  comfyui::ProgressFollower progress_;
};

template <class Rt>
Result<std::unique_ptr<Rt>> make_runner(const FactoryArgs& a, StageKind stage) {
  auto s = comfyui::parse_settings(a, stage);
  if (!s.ok()) return s.error();
  return std::unique_ptr<Rt>(new RunnerRuntime<ComfyRunner>(std::move(*s), stage));
}

}  // namespace

Result<std::unique_ptr<StageRuntime>> make_comfyui_encode(const FactoryArgs& a) {
  return make_runner<StageRuntime>(a, StageKind::kEncode);
}
Result<std::unique_ptr<StageRuntime>> make_comfyui_sample(const FactoryArgs& a) {
  return make_runner<StageRuntime>(a, StageKind::kSample);
}
Result<std::unique_ptr<StageRuntime>> make_comfyui_decode(const FactoryArgs& a) {
  return make_runner<StageRuntime>(a, StageKind::kDecode);
}

}  // namespace h3pipe::runtime
