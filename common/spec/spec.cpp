#include "common/spec/spec.h"

#include <google/protobuf/util/json_util.h>

#include <set>
#include <sstream>
#include <utility>

#include "common/artifacts/artifacts.h"
#include "common/core/json_reader.h"
#include "common/latent/latent.h"
#include "common/spec/input_file.h"

namespace h3pipe::spec {
namespace pbu = google::protobuf::util;
namespace {
// validate_id's messages start with "<field>: "; FieldError carries the field separately.
std::string strip_field(const std::string& m) {
  auto p = m.find(": ");
  return p == std::string::npos ? m : m.substr(p + 2);
}
}  // namespace

Result<pb::JobSpec> parse_json(std::string_view json) {
  pb::JobSpec s;
  // protobuf's JSON parser lets a repeated key win silently and echoes raw bytes: check the text
  // strictly first.
  std::string why;
  if (!config::parse_strict(json, &why))
    return make_error(errc::spec::kJson, "not a valid job spec: {}", why);
  pbu::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;
  auto st = pbu::JsonStringToMessage(std::string(json), &s, opts);
  if (!st.ok()) {
    return make_error(errc::spec::kJson, "not a valid job spec: {}",
                      config::printable(std::string(st.message())));
  }
  if (s.fps() == 0) s.set_fps(kDefaultFps);
  if (s.steps() == 0) s.set_steps(6);
  if (s.frames() == 0) s.set_frames(49);
  if (s.width() == 0) s.set_width(256);
  if (s.height() == 0) s.set_height(256);
  return s;
}

namespace {

std::vector<FieldError> validate_with(const pb::JobSpec& s, const config::Limits& l,
                                      const latent::LatentProfile& profile, Check check) {
  std::vector<FieldError> e;
  if (auto st = artifacts::validate_id("jobId", s.job_id()); !st.ok())
    e.push_back({"jobId", strip_field(st.error().message)});
  if (s.prompt().empty()) e.push_back({"prompt", "required and must not be empty"});
  if (s.prompt().size() > l.max_prompt_bytes)
    e.push_back({"prompt", fmt::format("{} bytes, at most {} allowed", s.prompt().size(),
                                       l.max_prompt_bytes)});
  // Every string and map is bounded like the prompt: a 10 MB negative prompt or params value
  // would ride along in every task, receipt and the AOF (issue #14).
  if (s.negative_prompt().size() > l.max_prompt_bytes)
    e.push_back(
        {"negativePrompt", fmt::format("{} bytes, at most {} allowed (limits.max_prompt_bytes)",
                                       s.negative_prompt().size(), l.max_prompt_bytes)});
  if (s.params().size() > l.max_params)
    e.push_back({"params", fmt::format("{} entries, at most {} allowed (limits.max_params)",
                                       s.params().size(), l.max_params)});
  for (const auto& [k, v] : s.params()) {
    if (k.empty() || k.size() > 128)
      e.push_back({"params", fmt::format("a key of {} bytes; keys are 1 to 128 bytes", k.size())});
    else if (v.size() > l.max_prompt_bytes)
      e.push_back(
          {"params." + k, fmt::format("{} bytes, at most {} allowed (limits.max_prompt_bytes)",
                                      v.size(), l.max_prompt_bytes)});
  }
  if (s.prompt().find('\0') != std::string::npos) e.push_back({"prompt", "contains a NUL byte"});
  // parse_json fills 0 with defaults; a spec from elsewhere (a binary task) may still hold 0.
  auto dim = [&](const char* name, std::uint32_t v, std::uint32_t max) {
    if (v == 0) e.push_back({name, fmt::format("must be at least {}", profile.size_multiple)});
    if (v > max) e.push_back({name, fmt::format("{} exceeds the limit {}", v, max)});
  };
  dim("width", s.width(), l.max_width);
  dim("height", s.height(), l.max_height);
  if (s.frames() > l.max_frames)
    e.push_back({"frames", fmt::format("{} exceeds the limit {}", s.frames(), l.max_frames)});
  if (s.steps() > l.max_steps)
    e.push_back({"steps", fmt::format("{} exceeds the limit {}", s.steps(), l.max_steps)});
  if (s.fps() > l.max_fps)
    e.push_back({"fps", fmt::format("{} exceeds the limit {}", s.fps(), l.max_fps)});
  for (auto [name, v] :
       {std::pair{"frames", s.frames()}, std::pair{"fps", s.fps()}, std::pair{"steps", s.steps()}})
    if (v == 0) e.push_back({name, "must be at least 1"});
  // The latent profile's rules (size multiple, frame rule); a 0 is reported above.
  const latent::JobSize job = job_size(s);
  for (auto& issue : latent::job_fits(profile, job)) {
    const std::uint32_t v = issue.field == "width"    ? job.width
                            : issue.field == "height" ? job.height
                            : issue.field == "frames" ? job.frames
                                                      : job.fps;
    if (v != 0) e.push_back({issue.field, issue.reason});
  }
  // Latent bytes from the profile, float32 (fps 0 would divide by 0).
  if (s.frames() > 0 && s.fps() > 0) {
    std::uint64_t bytes = latent::latent_bytes(profile, job);
    if (bytes > l.max_latent_bytes)
      e.push_back({"frames", fmt::format("the latent would be {} bytes, above the limit {}", bytes,
                                         l.max_latent_bytes)});
  }
  // Only from the configured input roots, opened the confined way the runtimes open it.
  // The voice sample and the last frame (ref2va and first/last-frame templates) the same way.
  const std::pair<const char*, const std::string*> inputs[] = {
      {"referenceImage", &s.reference_image()},
      {"referenceAudio", &s.reference_audio()},
      {"lastFrameImage", &s.last_frame_image()}};
  for (const auto& [field, path] : inputs)
    if (!path->empty() && check == Check::kSubmission)
      if (auto f = open_input(l.input_roots, *path); !f.ok())
        e.push_back({field, f.error().message});
  if (!s.job_class().empty())
    if (auto st = artifacts::validate_id("jobClass", s.job_class()); !st.ok())
      e.push_back({"jobClass", strip_field(st.error().message)});
  if (s.priority() < -kMaxPriority || s.priority() > kMaxPriority)
    e.push_back({"priority", fmt::format("{} is out of range: expected an integer from {} to {}",
                                         s.priority(), -kMaxPriority, kMaxPriority)});
  if (!s.user().empty() && !config::valid_user_name(s.user()))
    e.push_back({"user", "expected [A-Za-z0-9._@-]{1,64}"});
  return e;
}

}  // namespace

std::vector<FieldError> validate(const pb::JobSpec& s, const config::Limits& l, Check check) {
  return validate_with(s, l, latent::builtin_profile(), check);
}

namespace {

// A jobClass the cluster does not define would silently take the "default" profiles and
// templates: refused with the classes it does define.
void check_job_class(const pb::JobSpec& s, const config::Cluster& c, std::vector<FieldError>& e) {
  const std::string& name = s.job_class();
  if (name.empty() || name == "default" || !artifacts::validate_id("jobClass", name).ok()) return;
  std::string known = "default";
  for (const auto& jc : c.classes) {
    if (jc.name == name) return;
    known += ", " + jc.name;
  }
  e.push_back({"jobClass",
               fmt::format("\"{}\" is not a job class of this cluster (known: {})", name, known)});
}

}  // namespace

std::vector<FieldError> validate(const pb::JobSpec& s, const config::Cluster& c, Check check) {
  auto profile = latent_profile(s, c);
  std::vector<FieldError> e;
  if (!profile.ok()) {
    e = validate_with(s, c.limits, latent::builtin_profile(), check);
    e.push_back({s.params().count("latent_profile") ? "params.latent_profile" : "jobClass",
                 strip_field(profile.error().message)});
  } else {
    e = validate_with(s, c.limits, *profile, check);
  }
  check_job_class(s, c, e);
  return e;
}

latent::JobSize job_size(const pb::JobSpec& s) {
  return {s.width(), s.height(), s.frames(), s.fps()};
}

namespace {
// params["latent_profile"]; empty when absent.
std::string_view requested_profile(const pb::JobSpec& s) {
  auto it = s.params().find("latent_profile");
  return it == s.params().end() ? std::string_view{} : std::string_view(it->second);
}
}  // namespace

std::string job_class(const pb::JobSpec& s, const config::Cluster& c) {
  return c.class_of(s.width(), s.height(), s.frames(), s.steps(), s.job_class());
}

Result<latent::LatentProfile> latent_profile(const pb::JobSpec& s, const config::Cluster& c) {
  return c.latent_profile_for(job_class(s, c), requested_profile(s));
}

RouteInputs route_inputs(const pb::JobSpec& s, const config::Cluster& c) {
  RouteInputs in;
  in.job_class = job_class(s, c);
  auto profile = c.latent_profile_for(in.job_class, requested_profile(s));
  in.latent_bytes =
      latent::latent_bytes(profile.ok() ? *profile : latent::builtin_profile(),
                           {s.width(), s.height(), s.frames(), s.fps() ? s.fps() : kDefaultFps});
  return in;
}

Result<latent::Expected> expected_latent(const pb::JobSpec& s, const config::Cluster& c) {
  auto p = latent_profile(s, c);
  if (!p.ok()) return p.error();
  return latent::Expected{std::move(*p), job_size(s)};
}

std::string to_json(const pb::JobSpec& s) {
  std::string out;
  pbu::JsonPrintOptions o;
  o.preserve_proto_field_names = false;
  (void)pbu::MessageToJsonString(s, &out, o);
  return out;
}

nlohmann::json to_json_object(const pb::JobSpec& s) {
  return nlohmann::json::parse(to_json(s));  // json-parse: own text (protobuf's)
}

namespace {

template <typename Check>
Batch parse_batch_with(std::string_view text, const config::Limits& limits, Check check) {
  Batch b;
  std::set<std::string> ids;
  std::size_t line_no = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    ++line_no;
    start = end + 1;
    std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || line[first] == '#') {
      if (end == text.size()) break;
      continue;
    }
    auto s = parse_json(line);
    if (!s.ok()) {
      b.errors.push_back({line_no, {"", s.error().message}});
    } else {
      if (s->job_id().empty()) s->set_job_id(fmt::format("job-{}", line_no));
      for (auto& fe : check(*s)) b.errors.push_back({line_no, fe});
      if (!ids.insert(s->job_id()).second)
        b.errors.push_back(
            {line_no, {"jobId", fmt::format("\"{}\" appears twice in the batch", s->job_id())}});
      b.specs.push_back(std::move(*s));
      b.lines.push_back(line_no);
    }
    if (end == text.size()) break;
  }
  if (b.specs.size() + b.errors.size() == 0)
    b.errors.push_back({0, {"", "the batch holds no job"}});
  if (b.specs.size() > limits.max_batch)
    b.errors.push_back({0,
                        {"", fmt::format("{} jobs, at most {} per batch (limits.max_batch)",
                                         b.specs.size(), limits.max_batch)}});
  return b;
}

}  // namespace

Batch parse_batch(std::string_view text, const config::Limits& limits) {
  return parse_batch_with(text, limits, [&](const pb::JobSpec& s) { return validate(s, limits); });
}

Batch parse_batch(std::string_view text, const config::Cluster& cluster) {
  return parse_batch_with(text, cluster.limits,
                          [&](const pb::JobSpec& s) { return validate(s, cluster); });
}

}  // namespace h3pipe::spec
