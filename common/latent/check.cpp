#include "common/latent/check.h"

#include <charconv>
#include <limits>

namespace h3pipe::latent::detail {
namespace {

constexpr const char* kLayouts[] = {"video", "video+audio", "av_nested"};

// A decimal uint32 as the v2 metadata writes it: digits only, no sign, no spaces.
bool parse_u32(const std::string& s, std::uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > std::numeric_limits<std::uint32_t>::max()) return false;
  *out = static_cast<std::uint32_t>(v);
  return true;
}

const std::string* meta(const st::Layout& l, const char* key) {
  auto it = l.metadata.find(key);
  return it == l.metadata.end() ? nullptr : &it->second;
}

Status only_tensors(const st::Layout& l, std::initializer_list<std::string_view> allowed,
                    std::string_view form) {
  for (const auto& t : l.tensors) {
    bool ok = false;
    for (auto a : allowed) ok = ok || t.name == a;
    if (!ok) {
      std::string names;
      for (auto a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
      return make_error(errc::latent::kUnexpectedTensor,
                        "latent holds an unexpected tensor \"{}\" ({} holds only {})", t.name, form,
                        names);
    }
  }
  return {};
}

Status video_rank5(const st::TensorInfo& v) {
  if (v.shape.size() != 5 || v.shape[0] != 1)
    return make_error(errc::latent::kGeometry, "tensor \"{}\": shape {}, expected (1, C, T, H, W)",
                      v.name, shape_str(v.shape));
  return {};
}

// Version 2 metadata: format, profile, job geometry, layout.
Status read_v2_metadata(const st::Layout& l, Classified* c) {
  const std::string* fmt_name = meta(l, kMetaFormat);
  if (fmt_name == nullptr || *fmt_name != "h3latent")
    return make_error(errc::latent::kMetadata, "__metadata__ \"{}\" must be \"h3latent\", got {}",
                      kMetaFormat, fmt_name ? "\"" + *fmt_name + "\"" : std::string("nothing"));
  const std::string* profile = meta(l, kMetaProfile);
  if (profile == nullptr || profile->empty())
    return make_error(errc::latent::kMetadata, "__metadata__ \"{}\" is missing or empty",
                      kMetaProfile);
  c->profile = *profile;
  for (auto [key, dst] :
       {std::pair{kMetaWidth, &c->job.width}, std::pair{kMetaHeight, &c->job.height},
        std::pair{kMetaFrames, &c->job.frames}, std::pair{kMetaFps, &c->job.fps}}) {
    const std::string* v = meta(l, key);
    if (v == nullptr || !parse_u32(*v, dst))
      return make_error(errc::latent::kMetadata,
                        "__metadata__ \"{}\" must be a decimal integer, got {}", key,
                        v ? "\"" + *v + "\"" : std::string("nothing"));
  }
  const std::string* layout = meta(l, kMetaLayout);
  if (layout == nullptr)
    return make_error(errc::latent::kMetadata,
                      "__metadata__ \"{}\" is missing (video, video+audio or "
                      "av_nested)",
                      kMetaLayout);
  bool known = false;
  for (const char* k : kLayouts) known = known || *layout == k;
  if (!known)
    return make_error(errc::latent::kMetadata,
                      "__metadata__ \"{}\" is \"{}\", expected video, video+audio or av_nested",
                      kMetaLayout, *layout);
  const bool wants_audio = *layout != "video";
  if (wants_audio != (c->audio != nullptr))
    return make_error(wants_audio ? errc::latent::kMissingTensor : errc::latent::kUnexpectedTensor,
                      "layout \"{}\" {} an \"audio\" tensor, the file holds {}", *layout,
                      wants_audio ? "needs" : "has no", c->audio ? "one" : "none");
  c->layout = *layout;
  return {};
}

Result<Classified> classify_form(const st::Layout& l) {
  Classified c;
  const bool comfy = l.find(kComfyTensor) != nullptr || l.find(kComfyVersion0) != nullptr;
  const std::string* version = meta(l, kMetaVersion);
  if (comfy) {
    c.container = Container::kComfy;
    c.video = l.find(kComfyTensor);
    if (c.video == nullptr)
      return make_error(errc::latent::kMissingTensor, "ComfyUI latent has no \"{}\" tensor",
                        kComfyTensor);
    const st::TensorInfo* v0 = l.find(kComfyVersion0);
    if (v0 == nullptr)
      return make_error(errc::latent::kLegacy,
                        "a ComfyUI latent without \"{}\" is a legacy SD1 latent (LoadLatent "
                        "rescales it by 1/0.18215); save it again with a current SaveLatent",
                        kComfyVersion0);
    if (v0->elems != 0)
      return make_error(errc::latent::kHeaderSchema,
                        "tensor \"{}\" must be empty (shape [0]), got {}", kComfyVersion0,
                        shape_str(v0->shape));
    H3_TRY(only_tensors(l, {kComfyTensor, kComfyVersion0}, "a ComfyUI latent"));
    H3_TRY(video_rank5(*c.video));
    c.layout = "video";
  } else if (version == nullptr) {
    c.container = Container::kV1;
    c.video = l.find("video");
    c.audio = l.find("audio");
    if (c.video == nullptr)
      return make_error(errc::latent::kMissingTensor, "latent has no \"video\" tensor");
    if (c.audio == nullptr)
      return make_error(errc::latent::kMissingTensor,
                        "latent has no \"audio\" tensor (a version 1 file, without \"{}\", needs "
                        "both)",
                        kMetaVersion);
    H3_TRY(only_tensors(l, {"video", "audio"}, "a version 1 latent"));
    H3_TRY(video_rank5(*c.video));
    const auto& a = c.audio->shape;
    if (a.size() != 4 || a[0] != 1 || a[2] != 2)
      return make_error(errc::latent::kGeometry,
                        "tensor \"audio\": shape {}, expected (1, C, 2, L)", shape_str(a));
    c.profile = "builtin";
    c.layout = "video+audio";
  } else if (*version == "2") {
    c.container = Container::kV2;
    c.video = l.find("video");
    c.audio = l.find("audio");
    if (c.video == nullptr)
      return make_error(errc::latent::kMissingTensor, "latent has no \"video\" tensor");
    H3_TRY(only_tensors(l, {"video", "audio"}, "a version 2 latent"));
    H3_TRY(video_rank5(*c.video));
    if (c.audio != nullptr && (c.audio->shape.empty() || c.audio->elems == 0))
      return make_error(errc::latent::kGeometry, "tensor \"audio\": shape {} holds no samples",
                        shape_str(c.audio->shape));
    H3_TRY(read_v2_metadata(l, &c));
  } else {
    return make_error(errc::latent::kVersion,
                      "__metadata__ \"{}\" is \"{}\"; this h3pipe reads versions 1 (no key) and 2",
                      kMetaVersion, *version);
  }
  c.geometry.video = c.video->shape;
  if (c.audio) c.geometry.audio = c.audio->shape;
  return c;
}

const char* const kVideoAxes[] = {"batch", "channels", "T'", "H'", "W'"};

// The shapes against the profile's for the job, naming the first axis that differs.
Status check_shapes(const Classified& c, const LatentProfile& p, const JobSize& job) {
  const Geometry want = expected_geometry(p, job);
  const std::string ctx =
      fmt::format("profile {} expects {} for {}", p.name, shape_str(want.video), to_string(job));
  for (std::size_t i = 0; i < 5; ++i) {
    if (c.geometry.video[i] != want.video[i])
      return make_error(errc::latent::kGeometry, "tensor \"{}\": shape {}, {} ({} {}, expected {})",
                        c.video->name, shape_str(c.geometry.video), ctx, kVideoAxes[i],
                        c.geometry.video[i], want.video[i]);
  }
  if (!p.has_audio()) {
    if (c.audio)
      return make_error(errc::latent::kUnexpectedTensor,
                        "profile {} has no audio, the latent holds an \"audio\" tensor {}", p.name,
                        shape_str(c.geometry.audio));
    return {};
  }
  if (!c.audio)
    return make_error(
        errc::latent::kMissingTensor, "profile {} needs an \"audio\" tensor {}{}", p.name,
        shape_str(want.audio),
        c.container == Container::kComfy ? " (a ComfyUI .latent holds video only)" : "");
  const auto& got = c.geometry.audio;
  bool same = got.size() == want.audio.size();
  for (std::size_t i = 0; same && i < got.size(); ++i) {
    if (p.audio.shape[i] == AudioRule::kLength) {
      const std::uint64_t lo =
          want.audio[i] > p.audio.tolerance ? want.audio[i] - p.audio.tolerance : 0;
      same = got[i] >= lo && got[i] <= want.audio[i] + p.audio.tolerance;
    } else {
      same = got[i] == want.audio[i];
    }
  }
  if (!same)
    return make_error(errc::latent::kGeometry,
                      "tensor \"audio\": shape {}, profile {} expects {}{} for {}", shape_str(got),
                      p.name, shape_str(want.audio),
                      p.audio.tolerance ? fmt::format(" (L within +-{})", p.audio.tolerance) : "",
                      to_string(job));
  return {};
}

}  // namespace

std::string shape_str(const std::vector<std::uint64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

Result<Classified> classify(const st::Layout& layout, const Expected* expected) {
  auto r = classify_form(layout);
  if (!r.ok()) return r;
  Classified& c = *r;
  if (expected != nullptr) {
    const LatentProfile& p = expected->profile;
    // A job the profile cannot make has no latent to compare with (submission refuses it).
    if (auto issues = job_fits(p, expected->job); !issues.empty()) {
      std::string why;
      for (const auto& i : issues) why += (why.empty() ? "" : "; ") + i.field + ": " + i.reason;
      return make_error(errc::latent::kJobGeometry, "job {} does not fit profile {}: {}",
                        to_string(expected->job), p.name, why);
    }
    if (c.container == Container::kV1 && p.name != "builtin")
      return make_error(
          errc::latent::kProfile,
          "a version 1 latent holds the builtin profile's grid; the job's profile is {}", p.name);
    if (c.container == Container::kV2) {
      if (c.profile != p.name)
        return make_error(errc::latent::kProfile,
                          "latent was made for profile {}, the job's profile is {}", c.profile,
                          p.name);
      if (c.job != expected->job)
        return make_error(errc::latent::kGeometry, "latent metadata says job {}, the job is {}",
                          to_string(c.job), to_string(expected->job));
    }
    c.profile = p.name;
    c.job = expected->job;
    H3_TRY(check_shapes(c, p, expected->job));
  } else if (c.container == Container::kV2) {
    // A built-in profile is known without a config: the file must agree with itself.
    if (const LatentProfile* p = find_builtin_profile(c.profile))
      H3_TRY(check_shapes(c, *p, c.job));
  }
  return r;
}

}  // namespace h3pipe::latent::detail
