// Latent format version 2 against every built-in profile (docs/latent.md): a generated corpus of
// valid files and of malformed ones (wrong channels, T', H', W', audio missing where required,
// audio present where none, NaN, wrong dtype, extra tensor, bad version and metadata), ComfyUI
// .latent files as core SaveLatent writes them, and v1 files against other profiles.  Every case
// is read twice, by the in-memory parser and by the staged file reader, with the same verdict.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/artifacts/artifacts.h"
#include "common/latent/latent.h"
#include "common/latent/safetensors.h"
#include "tests/support/temp_dir.h"

namespace h3pipe::latent {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;  // tests/support/temp_dir.h

// A small valid job for the profile: 2 x 1 size multiples, two latent steps past the first.
JobSize job_for(const LatentProfile& p) {
  return {2 * p.size_multiple, p.size_multiple, 2 * p.temporal_factor + p.frame_offset,
          p.fps ? p.fps : 16};
}

Latent valid_latent(const LatentProfile& p) {
  Latent l = make_latent(p, job_for(p));
  for (std::size_t i = 0; i < l.video.size(); ++i)
    l.video[i] = static_cast<float>(static_cast<long>(i * 7 % 1001) - 500) / 64.0f;
  for (std::size_t i = 0; i < l.audio.size(); ++i)
    l.audio[i] = static_cast<float>(static_cast<long>(i * 13 % 777) - 388) / 32.0f;
  l.metadata = {{"writer", "profile_corpus_test"}};
  return l;
}

// One file of the corpus: its bytes and what a reader with the job's expectation must say.
struct Case {
  std::string name;
  std::vector<std::uint8_t> bytes;
  std::string code;             // "ok" or the error code, with the job's expectation
  std::string message_has;      // a piece of the message naming the culprit
  std::string structural = "";  // the code without an expectation; "" = same as `code`
};

std::string code_of(const Result<Latent>& r) {
  return r.ok() ? "ok" : r.error().code;
}

// The same latent with its tensors re-shaped: bytes written straight from `shapes`.
std::vector<std::uint8_t> with_shapes(const Latent& l, std::vector<std::uint64_t> video,
                                      std::vector<std::uint64_t> audio,
                                      std::map<std::string, std::string> meta) {
  auto count = [](const std::vector<std::uint64_t>& s) {
    std::size_t n = 1;
    for (auto d : s) n *= d;
    return s.empty() ? 0 : n;
  };
  static std::vector<float> v, a;
  v.assign(count(video), 0.5f);
  a.assign(count(audio), 0.25f);
  std::vector<st::TensorRef> refs = {{"video", video, v}};
  if (!audio.empty()) refs.push_back({"audio", audio, a});
  (void)l;
  return st::serialize(refs, meta, DType::kF32);
}

std::map<std::string, std::string> v2_meta(const LatentProfile& p, const JobSize& j,
                                           const std::string& layout) {
  return {{kMetaFormat, "h3latent"},
          {kMetaVersion, "2"},
          {kMetaProfile, p.name},
          {kMetaWidth, std::to_string(j.width)},
          {kMetaHeight, std::to_string(j.height)},
          {kMetaFrames, std::to_string(j.frames)},
          {kMetaFps, std::to_string(j.fps)},
          {kMetaLayout, layout}};
}

void replace_once(std::vector<std::uint8_t>& bytes, const std::string& from,
                  const std::string& to) {
  ASSERT_EQ(from.size(), to.size());
  std::string s(bytes.begin(), bytes.end());
  auto at = s.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  std::copy(to.begin(), to.end(), bytes.begin() + static_cast<long>(at));
}

std::vector<Case> corpus_for(const LatentProfile& p) {
  const JobSize job = job_for(p);
  const Latent good = valid_latent(p);
  const Geometry g = good.geometry;
  const std::string layout = p.has_audio() ? "video+audio" : "video";
  const auto meta = v2_meta(p, job, layout);
  std::vector<Case> out;
  out.push_back({"valid_f32", serialize(good), "ok", ""});
  out.push_back({"valid_f16", serialize(good, DType::kF16), "ok", ""});
  out.push_back({"valid_bf16", serialize(good, DType::kBF16), "ok", ""});
  auto bump = [&](std::size_t axis) {
    auto v = g.video;
    v[axis] += 1;
    return with_shapes(good, v, g.audio, meta);
  };
  // A v2 file naming a built-in profile is checked against it even without an expectation.
  out.push_back(
      {"wrong_channels", bump(1), "latent.geometry", "channels " + std::to_string(g.video[1] + 1)});
  out.push_back({"wrong_t", bump(2), "latent.geometry", "T' " + std::to_string(g.video[2] + 1)});
  out.push_back({"wrong_h", bump(3), "latent.geometry", "H' " + std::to_string(g.video[3] + 1)});
  out.push_back({"wrong_w", bump(4), "latent.geometry", "W' " + std::to_string(g.video[4] + 1)});
  out.push_back({"video_rank4",
                 with_shapes(good, {1, g.video[1], g.video[3], g.video[4]}, g.audio, meta),
                 "latent.geometry", "expected (1, C, T, H, W)"});
  if (p.has_audio()) {
    out.push_back({"audio_missing", with_shapes(good, g.video, {}, v2_meta(p, job, "video")),
                   "latent.missing_tensor", "profile " + p.name + " needs an \"audio\" tensor"});
    out.push_back({"audio_missing_layout_says_audio", with_shapes(good, g.video, {}, meta),
                   "latent.missing_tensor", "layout \"video+audio\" needs"});
    auto longer = g.audio;
    for (std::size_t i = 0; i < p.audio.shape.size(); ++i)
      if (p.audio.shape[i] == AudioRule::kLength) longer[i] += p.audio.tolerance + 1;
    out.push_back({"audio_too_long", with_shapes(good, g.video, longer, meta), "latent.geometry",
                   "tensor \"audio\""});
    auto wide = g.audio;
    wide[1] += 1;
    out.push_back({"audio_wrong_channels", with_shapes(good, g.video, wide, meta),
                   "latent.geometry", "tensor \"audio\""});
  } else {
    out.push_back({"audio_present_where_none",
                   with_shapes(good, g.video, {1, 8, 3, 16}, v2_meta(p, job, "video+audio")),
                   "latent.unexpected_tensor", "profile " + p.name + " has no audio"});
    out.push_back({"audio_present_layout_says_video",
                   with_shapes(good, g.video, {1, 8, 3, 16}, meta), "latent.unexpected_tensor",
                   "layout \"video\" has no"});
  }
  {
    Latent nan = good;
    nan.video[5] = std::numeric_limits<float>::quiet_NaN();
    out.push_back({"nan_in_video", serialize(nan), "latent.nonfinite", "element 5 is NaN"});
    Latent inf = good;
    if (!inf.audio.empty()) {
      inf.audio.back() = -std::numeric_limits<float>::infinity();
      out.push_back({"inf_in_audio", serialize(inf), "latent.nonfinite", "is -Inf"});
    }
  }
  {
    auto b = serialize(good);
    replace_once(b, "\"F32\"", "\"I32\"");
    out.push_back({"wrong_dtype", b, "latent.bad_dtype", "\"I32\" not allowed"});
  }
  {
    static std::vector<float> mask(4, 1.0f);
    std::vector<st::TensorRef> refs = {{"video", g.video, good.video}};
    if (g.has_audio()) refs.push_back({"audio", g.audio, good.audio});
    refs.push_back({"noise_mask", {1, 4}, mask});
    out.push_back({"extra_tensor", st::serialize(refs, meta, DType::kF32),
                   "latent.unexpected_tensor", "\"noise_mask\""});
  }
  auto meta_case = [&](const std::string& name, const std::string& key, const std::string& value,
                       const std::string& code, const std::string& has) {
    auto m = meta;
    if (value == "<erase>")
      m.erase(key);
    else
      m[key] = value;
    out.push_back({name, with_shapes(good, g.video, g.audio, m), code, has});
  };
  meta_case("version_3", kMetaVersion, "3", "latent.version", "\"3\"");
  meta_case("version_word", kMetaVersion, "two", "latent.version", "versions 1 (no key) and 2");
  meta_case("format_missing", kMetaFormat, "<erase>", "latent.metadata", kMetaFormat);
  meta_case("profile_missing", kMetaProfile, "<erase>", "latent.metadata", kMetaProfile);
  meta_case("frames_not_decimal", kMetaFrames, "9.0", "latent.metadata", "\"9.0\"");
  meta_case("width_signed", kMetaWidth, "+64", "latent.metadata", kMetaWidth);
  meta_case("layout_unknown", kMetaLayout, "stereo", "latent.metadata", "\"stereo\"");
  meta_case("layout_missing", kMetaLayout, "<erase>", "latent.metadata", kMetaLayout);
  // The metadata's job differs from the job: refused with an expectation, self-consistent
  // without one only where the shapes still fit (they do not: one more latent step).
  {
    auto m = meta;
    m[kMetaFrames] = std::to_string(job.frames + p.temporal_factor);
    out.push_back({"metadata_other_job", with_shapes(good, g.video, g.audio, m), "latent.geometry",
                   "latent metadata says job", "latent.geometry"});
  }
  return out;
}

class ProfileCorpus : public ::testing::TestWithParam<LatentProfile> {};

TEST_P(ProfileCorpus, EveryCaseGetsItsCodeFromBothReaders) {
  const LatentProfile& p = GetParam();
  ASSERT_EQ(profile_problem(p), "");
  const Expected want{p, job_for(p)};
  ASSERT_TRUE(job_fits(p, want.job).empty());
  TempDir dir;
  for (const Case& c : corpus_for(p)) {
    SCOPED_TRACE(p.name + "/" + c.name);
    const fs::path file = dir.path() / (c.name + ".h3latent");
    ASSERT_TRUE(artifacts::write_atomic(file, c.bytes).ok());
    auto mem = parse_latent(c.bytes, &want);
    auto disk = read_latent(file, &want);
    EXPECT_EQ(code_of(mem), c.code) << (mem.ok() ? "" : mem.error().message);
    EXPECT_EQ(code_of(disk), c.code);
    if (!disk.ok()) {
      EXPECT_NE(disk.error().message.find(file.string()), std::string::npos)
          << disk.error().message;
      EXPECT_NE(disk.error().message.find(c.message_has), std::string::npos)
          << disk.error().message;
    }
    const std::string structural = c.structural.empty() ? c.code : c.structural;
    EXPECT_EQ(code_of(parse_latent(c.bytes, nullptr)), structural);
    if (mem.ok()) {
      EXPECT_EQ(mem->container, Container::kV2);
      EXPECT_EQ(mem->profile, p.name);
      EXPECT_EQ(mem->job, want.job);
      EXPECT_EQ(mem->geometry, expected_geometry(p, want.job));
      EXPECT_EQ(mem->layout, p.has_audio() ? "video+audio" : "video");
      EXPECT_EQ(mem->video.size(), mem->geometry.video_elems());
      EXPECT_EQ(disk->video, mem->video);
      EXPECT_EQ(disk->audio, mem->audio);
    }
  }
}

TEST_P(ProfileCorpus, RoundTripThroughTheWriterKeepsEveryValue) {
  const LatentProfile& p = GetParam();
  TempDir dir;
  const Latent l = valid_latent(p);
  const Expected want{p, l.job};
  auto sha = write_latent(dir.path() / "run/job/latent.h3latent", l);
  ASSERT_TRUE(sha.ok()) << sha.error().to_string();
  ASSERT_TRUE(artifacts::verify(dir.path() / "run/job/latent.h3latent").ok());
  auto back = read_latent(dir.path() / "run/job/latent.h3latent", &want);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->video, l.video);
  EXPECT_EQ(back->audio, l.audio);
  EXPECT_EQ(back->metadata.at("writer"), "profile_corpus_test");
  // Written again from what was read: the same bytes.
  EXPECT_EQ(serialize(*back), serialize(l));
}

// ComfyUI's SaveLatent form: accepted for every profile without audio, produced by h3pipe too,
// and refused where the profile needs audio.
TEST_P(ProfileCorpus, ComfyLatentFiles) {
  const LatentProfile& p = GetParam();
  TempDir dir;
  Latent l = valid_latent(p);
  const Expected want{p, l.job};
  if (p.has_audio()) {
    auto r = write_comfy_latent(dir.path() / "x.latent", l);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, "latent.comfy_audio");
    EXPECT_FALSE(fs::exists(dir.path() / "x.latent"));
    // A video-only ComfyUI file against an audio profile: the audio is missing.
    static std::vector<float> none;
    auto bytes = st::serialize(
        {{kComfyVersion0, {0}, none}, {kComfyTensor, l.geometry.video, l.video}}, {}, DType::kF32);
    auto c = parse_latent(bytes, &want);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().code, "latent.missing_tensor");
    EXPECT_NE(c.error().message.find("ComfyUI .latent holds video only"), std::string::npos);
    return;
  }
  l.metadata = {{"prompt", "{}"}};
  auto sha = write_comfy_latent(dir.path() / "ComfyUI_00001_.latent", l);
  ASSERT_TRUE(sha.ok()) << sha.error().to_string();
  auto back = read_latent(dir.path() / "ComfyUI_00001_.latent", &want);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->container, Container::kComfy);
  EXPECT_EQ(back->profile, p.name);
  EXPECT_EQ(back->video, l.video);
  EXPECT_EQ(back->metadata.at("prompt"), "{}");
  auto structural = read_latent(dir.path() / "ComfyUI_00001_.latent", nullptr);
  ASSERT_TRUE(structural.ok()) << structural.error().to_string();
  EXPECT_EQ(structural->profile, "");
  // The wrong grid for this profile.
  auto v = l.geometry.video;
  v[1] += 4;
  static std::vector<float> none, data;
  data.assign(v[0] * v[1] * v[2] * v[3] * v[4], 0.0f);
  auto wrong =
      st::serialize({{kComfyVersion0, {0}, none}, {kComfyTensor, v, data}}, {}, DType::kF32);
  auto r = parse_latent(wrong, &want);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "latent.geometry");
  EXPECT_NE(r.error().message.find("tensor \"latent_tensor\""), std::string::npos)
      << r.error().message;
}

INSTANTIATE_TEST_SUITE_P(BuiltIn, ProfileCorpus, ::testing::ValuesIn(builtin_profiles()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& c : n)
                             if (c == '.' || c == '-') c = '_';
                           return n;
                         });

TEST(ProfileTable, MatchesTheDocumentedGrids) {
  // docs/latent.md's table, one row each: 832x480 x 81 frames at 16 fps.
  struct Row {
    const char* name;
    JobSize job;
    std::vector<std::uint64_t> video, audio;
  };
  const Row rows[] = {
      {"builtin", {736, 416, 124, 24}, {1, 24, 31, 26, 46}, {1, 32, 2, 2884}},
      {"wan2.1", {832, 480, 81, 16}, {1, 16, 21, 60, 104}, {}},
      {"wan2.2-5b", {1280, 704, 121, 24}, {1, 48, 31, 44, 80}, {}},
      {"hunyuanvideo", {848, 480, 129, 24}, {1, 16, 33, 60, 106}, {}},
      {"ltxv", {768, 512, 97, 24}, {1, 128, 13, 16, 24}, {}},
      {"mochi", {848, 480, 163, 30}, {1, 12, 28, 60, 106}, {}},
      {"ltx2", {768, 512, 121, 24}, {1, 128, 16, 16, 24}, {1, 8, 127, 16}},
      {"minimax-h3", {736, 416, 124, 24}, {1, 24, 37, 26, 46}, {1, 32, 2, 207}},
  };
  ASSERT_EQ(builtin_profiles().size(), std::size(rows));
  for (const Row& r : rows) {
    const LatentProfile* p = find_builtin_profile(r.name);
    ASSERT_NE(p, nullptr) << r.name;
    EXPECT_TRUE(job_fits(*p, r.job).empty()) << r.name;
    EXPECT_EQ(expected_geometry(*p, r.job), (Geometry{r.video, r.audio})) << r.name;
  }
  EXPECT_EQ(latent_bytes(*find_builtin_profile("wan2.1"), {832, 480, 81, 16}), 8'386'560u);
  EXPECT_EQ(latent_bytes(builtin_profile(), {736, 416, 124, 24}), 4'297'600u);
}

TEST(ProfileTable, JobFitsNamesTheFieldAndTheRule) {
  const LatentProfile& wan = *find_builtin_profile("wan2.1");
  auto issues = job_fits(wan, {832, 480, 80, 16});
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].field, "frames");
  EXPECT_EQ(issues[0].reason, "profile wan2.1 needs 4k+1 frames (e.g. 81), got 80");
  auto ltx = job_fits(*find_builtin_profile("ltxv"), {770, 512, 96, 24});
  ASSERT_EQ(ltx.size(), 2u);
  EXPECT_EQ(ltx[0].field, "width");
  EXPECT_NE(ltx[0].reason.find("770 is not a multiple of 32"), std::string::npos) << ltx[0].reason;
  EXPECT_EQ(ltx[1].reason, "profile ltxv needs 8k+1 frames (e.g. 97), got 96");
  EXPECT_TRUE(job_fits(builtin_profile(), {256, 256, 48, 24}).empty())
      << "builtin: any frame count";
  EXPECT_EQ(job_fits(*find_builtin_profile("ltx2"), {768, 512, 97, 0})[0].field, "fps");
}

TEST(ProfileTable, Ltx2AudioLengthWithinOneStep) {
  const LatentProfile& p = *find_builtin_profile("ltx2");
  const JobSize job{768, 512, 121, 24};
  const Expected want{p, job};
  const Geometry g = expected_geometry(p, job);
  ASSERT_EQ(g.audio[2], 127u);  // ceil(121 / 24 * 25)
  for (std::int64_t delta : {-2, -1, 0, 1, 2}) {
    Latent l = make_latent(p, job);
    l.geometry.audio[2] = static_cast<std::uint64_t>(127 + delta);
    l.audio.assign(l.geometry.audio_elems(), 0.0f);
    auto r = parse_latent(serialize(l), &want);
    EXPECT_EQ(r.ok(), std::abs(delta) <= 1)
        << "L " << 127 + delta << ": " << (r.ok() ? "" : r.error().message);
    if (!r.ok()) {
      EXPECT_NE(r.error().message.find("L within +-1"), std::string::npos);
    }
  }
}

TEST(ProfileMismatch, ProfileNameAndVersionOneAreChecked) {
  // Wan 2.1 and HunyuanVideo share a grid; the profile name still tells them apart.
  const LatentProfile& wan = *find_builtin_profile("wan2.1");
  const LatentProfile& hy = *find_builtin_profile("hunyuanvideo");
  Latent l = make_latent(wan, {64, 48, 9, 16});
  const Expected as_hy{hy, l.job};
  auto r = parse_latent(serialize(l), &as_hy);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "latent.profile");
  EXPECT_EQ(r.error().message,
            "latent was made for profile wan2.1, the job's profile is hunyuanvideo");
  // A version 1 file is the builtin grid.
  const fs::path v1 = fs::path(H3PIPE_SOURCE_DIR) / "tests/fixtures/latent/valid.h3latent";
  const Expected wan_job{wan, {32, 32, 1, 200}};
  auto v = read_latent(v1, &wan_job);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code, "latent.profile");
  // A user-declared profile (not in the table) is checked only with an expectation.
  LatentProfile mine{"mine", 4, 2, 8, FrameRule::kStrict, 16, {}};
  Latent m = make_latent(mine, {32, 16, 5, 8});
  EXPECT_TRUE(parse_latent(serialize(m), nullptr).ok());
  const Expected as_mine{mine, m.job};
  EXPECT_TRUE(parse_latent(serialize(m), &as_mine).ok());
  m.geometry.video[1] = 5;
  m.video.assign(m.geometry.video_elems(), 0.0f);
  EXPECT_TRUE(parse_latent(serialize(m), nullptr).ok()) << "structure only without a config";
  EXPECT_EQ(parse_latent(serialize(m), &as_mine).error().code, "latent.geometry");
}

TEST(ComfyLatent, LegacyAndMalformedFiles) {
  static std::vector<float> none, v(16, 0.5f), img(64, 0.5f), one{1.0f};
  const std::vector<std::uint64_t> video{1, 1, 1, 4, 4};
  auto legacy = st::serialize({{kComfyTensor, video, v}}, {}, DType::kF32);
  auto r = parse_latent(legacy, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "latent.legacy");
  EXPECT_NE(r.error().message.find("legacy SD1 latent"), std::string::npos);
  auto image = st::serialize({{kComfyVersion0, {0}, none}, {kComfyTensor, {1, 4, 4, 4}, img}}, {},
                             DType::kF32);
  EXPECT_EQ(parse_latent(image, nullptr).error().code, "latent.geometry") << "an SD image latent";
  auto full =
      st::serialize({{kComfyVersion0, {1}, one}, {kComfyTensor, video, v}}, {}, DType::kF32);
  EXPECT_EQ(parse_latent(full, nullptr).error().code, "latent.header_schema");
  auto extra =
      st::serialize({{kComfyVersion0, {0}, none}, {kComfyTensor, video, v}, {"video", video, v}},
                    {}, DType::kF32);
  EXPECT_EQ(parse_latent(extra, nullptr).error().code, "latent.unexpected_tensor");
  auto only_marker = st::serialize({{kComfyVersion0, {0}, none}}, {}, DType::kF32);
  EXPECT_EQ(parse_latent(only_marker, nullptr).error().code, "latent.missing_tensor");
}

// The layout core SaveLatent writes through safetensors, byte for byte: header
// {"__metadata__":{...},"latent_format_version_0":{...[0,0]},"latent_tensor":{...}} padded with
// spaces to a multiple of 8, then the float32 data.
TEST(ComfyLatent, BytesAsSafetensorsWritesThem) {
  Latent l = make_latent(*find_builtin_profile("mochi"), {32, 16, 7, 30});
  ASSERT_EQ(l.geometry.video, (std::vector<std::uint64_t>{1, 12, 2, 2, 4}));
  l.metadata = {{"prompt", "{\"1\": {}}"}};
  auto bytes = serialize_comfy(l);
  ASSERT_TRUE(bytes.ok());
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | (*bytes)[static_cast<std::size_t>(i)];
  std::string header(bytes->begin() + 8, bytes->begin() + 8 + static_cast<long>(n));
  const std::string want =
      R"({"__metadata__":{"prompt":"{\"1\": {}}"},"latent_format_version_0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"latent_tensor":{"dtype":"F32","shape":[1,12,2,2,4],"data_offsets":[0,768]}})";
  EXPECT_EQ(header.substr(0, want.size()), want);
  EXPECT_EQ(header.size() % 8, 0u);
  EXPECT_EQ(header.find_first_not_of(' ', want.size()), std::string::npos);
  EXPECT_EQ(bytes->size(), 8 + n + 768);
}

TEST(Inspect, ProfileAndGeometryFlags) {
  TempDir dir;
  const LatentProfile& wan = *find_builtin_profile("wan2.1");
  Latent l = make_latent(wan, {832, 480, 81, 16});
  ASSERT_TRUE(write_latent(dir.path() / "wan.h3latent", l).ok());
  const std::string file = (dir.path() / "wan.h3latent").string();
  std::ostringstream plain;
  EXPECT_EQ(inspect_main(file, false, plain), 0);
  EXPECT_NE(plain.str().find("form      h3latent v2, layout video"), std::string::npos)
      << plain.str();
  EXPECT_NE(plain.str().find("profile   wan2.1, job 832x480x81@16"), std::string::npos)
      << plain.str();
  EXPECT_NE(plain.str().find("(1, 16, 21, 60, 104)"), std::string::npos) << plain.str();
  EXPECT_NE(plain.str().find("verdict   valid latent"), std::string::npos) << plain.str();
  const Expected other_job{wan, {832, 480, 85, 16}};
  std::ostringstream js;
  EXPECT_EQ(inspect_main(file, true, js, &other_job), 1);
  auto j = nlohmann::json::parse(js.str());
  EXPECT_EQ(j["error"]["code"], "latent.geometry");
  EXPECT_EQ(j["checked_against"]["job"], "832x480x85@16");
  const Expected right{wan, {832, 480, 81, 16}};
  std::ostringstream ok;
  EXPECT_EQ(inspect_main(file, true, ok, &right), 0);
  auto k = nlohmann::json::parse(ok.str());
  EXPECT_TRUE(k["valid"].get<bool>());
  EXPECT_EQ(k["form"], "h3latent v2");
  EXPECT_EQ(k["profile"], "wan2.1");
  EXPECT_EQ(k["job"]["frames"], 81);
  ASSERT_TRUE(write_comfy_latent(dir.path() / "c.latent", l).ok());
  std::ostringstream comfy;
  EXPECT_EQ(inspect_main((dir.path() / "c.latent").string(), false, comfy, &right), 0);
  EXPECT_NE(comfy.str().find("form      ComfyUI .latent, layout video"), std::string::npos)
      << comfy.str();
  EXPECT_EQ(parse_job_size("832x480x81@16").value(), (JobSize{832, 480, 81, 16}));
  // A job the profile cannot make is named as such, not compared shape by shape.
  const Expected unfit{*find_builtin_profile("ltxv"), {832, 496, 81, 16}};
  std::ostringstream u;
  EXPECT_EQ(inspect_main(file, false, u, &unfit), 1);
  EXPECT_NE(u.str().find("latent.job_geometry"), std::string::npos) << u.str();
  EXPECT_NE(u.str().find(
                "job 832x496x81@16 does not fit profile ltxv: height: 496 is not a multiple of 32"),
            std::string::npos)
      << u.str();
  for (const char* bad :
       {"832x480x81", "832x480@16", "x480x81@16", "832x480x81@16 ", "99999999999x1x1@1"})
    EXPECT_EQ(parse_job_size(bad).error().code, "latent.bad_geometry_arg") << bad;
}

}  // namespace
}  // namespace h3pipe::latent

namespace h3pipe::latent {
namespace {

// The fuzz target's v2 and ComfyUI seeds (fuzz/latent/corpus) are valid latents, so the fuzzer
// starts from files that reach every check.
TEST(FuzzSeeds, VersionTwoAndComfySeedsAreValid) {
  const fs::path dir = fs::path(H3PIPE_SOURCE_DIR) / "fuzz/latent/corpus";
  int seen = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("v2_", 0) != 0 && name.rfind("comfy_", 0) != 0) continue;
    auto r = read_latent(e.path(), nullptr);
    EXPECT_TRUE(r.ok()) << name << ": " << (r.ok() ? "" : r.error().message);
    if (r.ok()) {
      EXPECT_EQ(r->container, name[0] == 'v' ? Container::kV2 : Container::kComfy) << name;
    }
    ++seen;
  }
  EXPECT_GE(seen, 4);
}

}  // namespace
}  // namespace h3pipe::latent
