#include "common/runtime/exec_runtime.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/artifacts/artifacts.h"
#include "common/core/json_reader.h"
#include "common/runtime/inputs.h"
#include "common/runtime/stage_output.h"
#include "common/runtime/subprocess.h"
#include "common/spec/spec.h"

namespace h3pipe::runtime {
namespace {
namespace fs = std::filesystem;
using config::StageKind;

constexpr std::size_t kReasonTailBytes = 2000;

// Every placeholder and how a task fills it in; one table (docs/design.md, convention 15).
struct Placeholder {
  std::string_view name;
  std::string (*value)(const StageContext& ctx, StageKind stage);
};

std::string stage_text(StageKind s) {
  return config::stage_name(s);
}

const std::array<Placeholder, 16> kPlaceholders = {{
    {"input", [](const StageContext& c, StageKind) { return c.input.string(); }},
    {"output", [](const StageContext& c, StageKind) { return c.output_part.string(); }},
    {"spec_json", [](const StageContext& c, StageKind) { return spec::to_json(*c.spec); }},
    {"job_id", [](const StageContext& c, StageKind) { return c.spec->job_id(); }},
    {"run_id", [](const StageContext& c, StageKind) { return c.run_id; }},
    {"stage", [](const StageContext&, StageKind s) { return stage_text(s); }},
    {"conditioning", [](const StageContext& c, StageKind) { return c.conditioning.string(); }},
    {"reference_image", [](const StageContext& c, StageKind) { return c.spec->reference_image(); }},
    {"prompt", [](const StageContext& c, StageKind) { return c.spec->prompt(); }},
    {"negative_prompt", [](const StageContext& c, StageKind) { return c.spec->negative_prompt(); }},
    {"width", [](const StageContext& c, StageKind) { return std::to_string(c.spec->width()); }},
    {"height", [](const StageContext& c, StageKind) { return std::to_string(c.spec->height()); }},
    {"frames", [](const StageContext& c, StageKind) { return std::to_string(c.spec->frames()); }},
    {"fps", [](const StageContext& c, StageKind) { return std::to_string(c.spec->fps()); }},
    {"steps", [](const StageContext& c, StageKind) { return std::to_string(c.spec->steps()); }},
    {"seed", [](const StageContext& c, StageKind) { return std::to_string(c.spec->seed()); }},
}};

// A template string split into literal text and placeholder references, parsed once.
struct Template {
  struct Piece {
    std::string text;
    const Placeholder* ph = nullptr;  // null = literal
  };
  std::vector<Piece> pieces;

  std::string expand(const StageContext& ctx, StageKind stage) const {
    std::string s;
    for (const auto& p : pieces) s += p.ph ? p.ph->value(ctx, stage) : p.text;
    return s;
  }
};

std::string known_placeholders() {
  std::string s;
  for (const auto& p : kPlaceholders) s += (s.empty() ? "{" : ", {") + std::string(p.name) + "}";
  return s;
}

Template parse_template(const std::string& s, const std::string& path, StageKind stage,
                        config::Errors& e) {
  Template t;
  std::string lit;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if ((c == '{' || c == '}') && i + 1 < s.size() && s[i + 1] == c) {
      lit += c;
      ++i;
      continue;
    }
    if (c == '}') {
      e.add(path, fmt::format("unmatched '}}' in \"{}\" (write '}}}}' for a literal brace)", s));
      return t;
    }
    if (c != '{') {
      lit += c;
      continue;
    }
    auto close = s.find('}', i);
    if (close == std::string::npos) {
      e.add(path, fmt::format("unclosed '{{' in \"{}\" (write '{{{{' for a literal brace)", s));
      return t;
    }
    std::string name = s.substr(i + 1, close - i - 1);
    const Placeholder* ph = nullptr;
    for (const auto& p : kPlaceholders)
      if (p.name == name) ph = &p;
    if (!ph) {
      e.add(path, fmt::format("unknown placeholder {{{}}}; known: {}", name, known_placeholders()));
      return t;
    }
    if (stage == StageKind::kEncode && name == "input") {
      e.add(path,
            "{input}: the encode stage has no input artifact (use {spec_json}, {prompt}, "
            "{reference_image})");
      return t;
    }
    if (!lit.empty()) t.pieces.push_back({std::move(lit), nullptr});
    lit.clear();
    t.pieces.push_back({"", ph});
    i = close;
  }
  if (!lit.empty()) t.pieces.push_back({std::move(lit), nullptr});
  return t;
}

bool is_executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// True when argv[0] names an executable, directly or through PATH.
bool resolvable(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return is_executable_file(prog);
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    auto colon = dirs.find(':');
    auto dir = dirs.substr(0, colon);
    if (is_executable_file(fs::path(dir.empty() ? "." : std::string(dir)) / prog)) return true;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  return false;
}

struct ExecSettings {
  std::vector<std::string> command_raw;
  std::vector<Template> command;
  std::vector<std::pair<std::string, Template>> env;
  std::vector<std::string> env_keys;
  std::string cwd;
  std::string device = "exec";
  double timeout_s = 3600;
  double kill_grace_s = 2;
  bool takes_reference = false;       // a template names {reference_image} or {spec_json}
  std::vector<fs::path> input_roots;  // limits.input_roots
};

bool names_reference(const Template& t) {
  for (const auto& p : t.pieces)
    if (p.ph && (p.ph->name == "reference_image" || p.ph->name == "spec_json")) return true;
  return false;
}

// The extension of the job's file name for the copy, when it is a plain one (".png").
std::string plain_extension(const std::string& name) {
  std::string ext = fs::path(name).extension().string();
  if (ext.size() > 16) return "";
  for (std::size_t i = 1; i < ext.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(ext[i]))) return "";
  return ext;
}

// The job's reference image for the command: opened beneath the input roots now (inputs.h) and
// copied, through that descriptor, to OUTPUT.reference<ext> beside the output (below its root,
// no symlink followed).  The command gets this copy's path, never the job's.
Result<fs::path> stage_reference(const StageContext& ctx, StageKind stage,
                                 const std::vector<fs::path>& roots) {
  const char* who = config::stage_name(stage);
  auto in = open_reference(*ctx.spec, roots, who);
  if (!in.ok()) return in.error();
  auto bytes = read_reference(*in, who);
  if (!bytes.ok()) return bytes.error();
  const OutputTarget out = output_target(ctx, stage);
  fs::path dest = out.path;
  dest += ".reference" + plain_extension(ctx.spec->reference_image());
  auto rel = artifacts::relative_beneath(out.root.path, dest);
  if (!rel.ok()) return rel.error();
  auto fd = artifacts::open_beneath(out.root.path, *rel, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!fd.ok()) return fd.error();
  artifacts::UniqueFd owned(*fd);
  std::size_t at = 0;
  while (at < bytes->size()) {
    ssize_t n = ::write(owned.get(), bytes->data() + at, bytes->size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return make_error(errc::io::kWrite, "write {}: {}", dest.string(), std::strerror(errno));
    at += static_cast<std::size_t>(n);
  }
  return dest;
}

ExecSettings read_settings(const FactoryArgs& a, StageKind stage, bool host, config::Errors& e) {
  std::string base = settings_path(a, stage);
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json& j = a.settings ? *a.settings : kEmpty;
  ExecSettings s;
  {
    config::ObjectReader r(j, base, e);
    r.get("command", s.command_raw);
    if (r.ok() && !j.contains("command"))
      e.add(r.path("command"), "required but missing (an array: program and arguments)");
    else if (r.ok() && j["command"].is_array() && s.command_raw.empty())
      e.add(r.path("command"), "must not be empty");
    r.get("timeout_s", s.timeout_s, 0.001, 1e7);
    r.get("kill_grace_s", s.kill_grace_s, 0, 600);
    r.get("cwd", s.cwd);
    r.get("device", s.device);
    if (auto* env = r.raw("env")) {
      if (!env->is_object()) {
        e.add(r.path("env"), "expected an object of strings");
      } else {
        for (auto it = env->begin(); it != env->end(); ++it) {
          std::string p = r.path("env") + "/" + it.key();
          if (!it.value().is_string())
            e.add(p, "expected a string");
          else if (it.key().empty() || it.key().find('=') != std::string::npos)
            e.add(p, "invalid variable name");
          else {
            s.env.emplace_back(it.key(),
                               parse_template(it.value().get<std::string>(), p, stage, e));
            s.env_keys.push_back(it.key());
          }
        }
      }
    }
    for (std::size_t i = 0; i < s.command_raw.size(); ++i)
      s.command.push_back(
          parse_template(s.command_raw[i], fmt::format("{}/{}", r.path("command"), i), stage, e));
    if (!s.command.empty() && e.empty()) {
      const auto& prog = s.command.front();
      if (host && prog.pieces.size() == 1 && !prog.pieces[0].ph && !resolvable(prog.pieces[0].text))
        e.add(r.path("command") + "/0",
              fmt::format("\"{}\" is not an executable file{}", prog.pieces[0].text,
                          prog.pieces[0].text.find('/') == std::string::npos ? " on PATH" : ""));
      else if (prog.pieces.empty())
        e.add(r.path("command") + "/0", "the program name must not be empty");
    }
    for (const auto& t : s.command) s.takes_reference = s.takes_reference || names_reference(t);
    for (const auto& [k, t] : s.env) s.takes_reference = s.takes_reference || names_reference(t);
    if (a.cluster) s.input_roots = a.cluster->limits.input_roots;
    if (host && !s.cwd.empty() && !fs::is_directory(s.cwd))
      e.add(r.path("cwd"), fmt::format("\"{}\" is not a directory", s.cwd));
  }
  return s;
}

Result<ExecSettings> parse_settings(const FactoryArgs& a, StageKind stage) {
  config::Errors e;
  ExecSettings s = read_settings(a, stage, true, e);
  if (!e.empty())
    return make_error(errc::runtime::kSettings, "exec runtime ({}): invalid settings:\n{}",
                      config::stage_name(stage), e.joined());
  return s;
}

// The command runner shared by the three stage adapters.
class ExecRunner final {
 public:
  ExecRunner(ExecSettings s, StageKind stage) : s_(std::move(s)), stage_(stage) {}

  Result<StageOutput> run(const StageContext& job_ctx) {
    const char* stage = config::stage_name(stage_);
    auto own = prepare_output(job_ctx, stage_);
    if (!own.ok()) return own.error();
    const fs::path part = *own;  // {output} and H3PIPE_OUTPUT: this execution's own temporary
    // The command sees the private copy of the reference image, in {reference_image} and in
    // {spec_json}'s referenceImage alike; the copy goes when the command is done.
    StageContext ctx = job_ctx;
    ctx.output_part = part;
    pb::JobSpec staged_spec;
    fs::path staged;
    struct Unlink {
      const fs::path& p;
      ~Unlink() {
        std::error_code ec;
        if (!p.empty()) fs::remove(p, ec);
      }
    } unlink_staged{staged};
    if (s_.takes_reference && !job_ctx.spec->reference_image().empty()) {
      auto copy = stage_reference(job_ctx, stage_, s_.input_roots);
      if (!copy.ok()) return copy.error();
      staged = *copy;
      staged_spec = *job_ctx.spec;
      staged_spec.set_reference_image(staged.string());
      ctx.spec = &staged_spec;
    }
    // The voice sample and the last frame are comfyui template inputs, not staged here: the
    // command never sees those paths (a task's are not opened beneath the roots by this runtime).
    if (!job_ctx.spec->reference_audio().empty() || !job_ctx.spec->last_frame_image().empty()) {
      if (ctx.spec != &staged_spec) {
        staged_spec = *job_ctx.spec;
        ctx.spec = &staged_spec;
      }
      staged_spec.clear_reference_audio();
      staged_spec.clear_last_frame_image();
    }
    SpawnOptions o;
    for (const auto& t : s_.command) o.argv.push_back(t.expand(ctx, stage_));
    std::vector<std::string> overrides = {
        fmt::format("H3PIPE_STAGE={}", stage),
        fmt::format("H3PIPE_RUN_ID={}", ctx.run_id),
        fmt::format("H3PIPE_JOB_ID={}", ctx.spec->job_id()),
        fmt::format("H3PIPE_INPUT={}", ctx.input.string()),
        fmt::format("H3PIPE_OUTPUT={}", part.string()),
    };
    for (const auto& [k, t] : s_.env) overrides.push_back(k + "=" + t.expand(ctx, stage_));
    o.env = merged_environment(overrides);
    o.cwd = s_.cwd;
    o.timeout_s = s_.timeout_s;
    o.kill_grace_s = s_.kill_grace_s;
    o.cancelled = ctx.cancelled;
    o.on_line = [&ctx](std::string_view line) {
      if (auto p = parse_progress_line(line)) ctx.progress(p->first, p->second);
    };
    std::error_code ec;

    auto r = spawn_and_wait(o);
    if (!r.ok())
      return make_error(errc::runtime::kPermanentExecSpawn, "exec {}: {}", stage,
                        r.error().message);
    const std::string& prog = o.argv[0];
    auto tail = [&] {
      std::string t = tail_text(r->stderr_tail, kReasonTailBytes);
      return t.empty() ? std::string("; stderr was empty") : "; stderr tail:\n" + t;
    };
    if (r->cancelled) {
      fs::remove(part, ec);
      return make_error(errc::runtime::kCancelled,
                        "exec {}: cancelled; `{}` stopped after {:.1f} s", stage, prog, r->seconds);
    }
    if (r->timed_out) {
      fs::remove(part, ec);
      return make_error(errc::runtime::kTimeout,
                        "exec {}: `{}` timed out after {} s; its process group was killed{}", stage,
                        prog, s_.timeout_s, tail());
    }
    if (r->term_signal != 0) {
      fs::remove(part, ec);
      return make_error(errc::runtime::kExecSignal,
                        "exec {}: `{}` was killed by signal {} after {:.1f} s{}", stage, prog,
                        r->term_signal, r->seconds, tail());
    }
    if (r->exit_code == -1) {
      fs::remove(part, ec);
      return make_error(errc::runtime::kExecExit,
                        "exec {}: the exit status of `{}` was lost (another part of this "
                        "process reaped it); the output is not trusted{}",
                        stage, prog, tail());
    }
    if (r->exit_code != 0) {
      fs::remove(part, ec);
      return make_error(errc::runtime::kExecExit,
                        "exec {}: `{}` exited with status {} after {:.1f} s{}", stage, prog,
                        r->exit_code, r->seconds, tail());
    }
    nlohmann::json settings = {{"command", s_.command_raw},
                               {"timeout_s", s_.timeout_s},
                               {"env_keys", s_.env_keys},
                               {"exit_code", 0},
                               {"seconds", r->seconds}};
    auto out = commit_stage_output(stage_, job_ctx, part, s_.device, std::move(settings));
    if (!out.ok()) {
      const auto& err = out.error();
      Error e = rephrase(err, "exec {}: `{}` exited 0 but {}{}", stage, prog, err.message, tail());
      if (err.code == errc::runtime::kNoOutput) e.code = errc::runtime::kExecNoOutput.id;
      return e;
    }
    return out;
  }

 private:
  ExecSettings s_;
  StageKind stage_;
};

}  // namespace

void check_exec_settings(const FactoryArgs& a, StageKind stage, bool host, config::Errors& e) {
  (void)read_settings(a, stage, host, e);
}

std::optional<std::pair<long long, long long>> parse_progress_line(std::string_view line) {
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
  constexpr std::string_view kWord = "progress ";
  if (!line.starts_with(kWord)) return std::nullopt;
  line.remove_prefix(kWord.size());
  const auto slash = line.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view d) -> std::optional<long long> {
    if (d.empty() || d.size() > 9) return std::nullopt;
    long long v = 0;
    for (char ch : d) {
      if (ch < '0' || ch > '9') return std::nullopt;
      v = v * 10 + (ch - '0');
    }
    return v;
  };
  auto n = number(line.substr(0, slash)), m = number(line.substr(slash + 1));
  if (!n || !m || *m < 1 || *n > *m) return std::nullopt;
  return std::make_pair(*n, *m);
}

Result<std::unique_ptr<StageRuntime>> make_exec_encode(const FactoryArgs& a) {
  auto s = parse_settings(a, StageKind::kEncode);
  if (!s.ok()) return s.error();
  return std::unique_ptr<StageRuntime>(
      new RunnerRuntime<ExecRunner>(std::move(*s), StageKind::kEncode));
}
Result<std::unique_ptr<StageRuntime>> make_exec_sample(const FactoryArgs& a) {
  auto s = parse_settings(a, StageKind::kSample);
  if (!s.ok()) return s.error();
  return std::unique_ptr<StageRuntime>(
      new RunnerRuntime<ExecRunner>(std::move(*s), StageKind::kSample));
}
Result<std::unique_ptr<StageRuntime>> make_exec_decode(const FactoryArgs& a) {
  auto s = parse_settings(a, StageKind::kDecode);
  if (!s.ok()) return s.error();
  return std::unique_ptr<StageRuntime>(
      new RunnerRuntime<ExecRunner>(std::move(*s), StageKind::kDecode));
}

}  // namespace h3pipe::runtime
