#include "common/latent/latent.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/latent/safetensors.h"
#include "tests/support/temp_dir.h"

namespace h3pipe::latent {
namespace {

namespace fs = std::filesystem;
const fs::path kFixtures = fs::path(H3PIPE_SOURCE_DIR) / "tests/fixtures/latent";
const fs::path kInterop = fs::path(H3PIPE_SOURCE_DIR) / "tests/latent/interop.py";

// Same formula as interop.py: exactly representable in F32 and F16.
std::vector<float> pattern(std::size_t n, long mul, long mod, long off, float div) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>((static_cast<long>(i) * mul) % mod - off) / div;
  return v;
}

// The small builtin job the v1 corpus was made for: video (1, 24, 1, 2, 2), audio (1, 32, 2, 3).
const JobSize kSmallJob{32, 32, 1, 200};
const Expected kSmall{builtin_profile(), kSmallJob};

Latent make_latent(const Geometry& g) {
  Latent l;
  l.geometry = g;
  l.profile = "builtin";
  l.video = pattern(g.video_elems(), 7, 1001, 500, 64.0f);
  l.audio = pattern(g.audio_elems(), 13, 777, 388, 32.0f);
  l.metadata = {{"writer", "h3pipe"}, {"job", "j1"}};
  return l;
}

using test_support::TempDir;  // tests/support/temp_dir.h

std::vector<std::uint8_t> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string code_of(const Result<Latent>& r) {
  return r.ok() ? "ok" : r.error().code;
}

TEST(Geometry, SeedSizes) {
  Geometry g = Geometry::for_job(736, 416, 124, 24);
  EXPECT_EQ(g.t(), 31u);
  EXPECT_EQ(g.h(), 26u);
  EXPECT_EQ(g.w(), 46u);
  EXPECT_EQ(g.audio, (std::vector<std::uint64_t>{1, 32, 2, 2884}));
  EXPECT_EQ(g, expected_geometry(builtin_profile(), 736, 416, 124, 24));
  EXPECT_EQ(expected_geometry(builtin_profile(), {32, 32, 1, 200}),
            (Geometry{{1, 24, 1, 2, 2}, {1, 32, 2, 3}}));
  EXPECT_EQ(g.data_bytes(), 4'297'600u);
  Geometry big = Geometry::for_job(1280, 736, 124, 24);
  // 736x1280 at 124 frames gives 11.7 MB with this formula; 137 frames gives the seeds' ~13 MB.
  EXPECT_EQ(big.data_bytes(), 11'689'984u);
  EXPECT_EQ(Geometry::for_job(1280, 736, 137, 24).data_bytes(), 13'180'672u);
  EXPECT_EQ(Geometry::for_job(64, 64, 9, 0).audio[3], 0u);  // no division by zero
}

TEST(Latent, RoundTripBytesAndFile) {
  Geometry g = Geometry::for_job(736, 416, 124, 24);
  Latent l = make_latent(g);
  l.job = {736, 416, 124, 24};
  const Expected want{builtin_profile(), l.job};
  auto bytes = serialize(l);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "header padded to a multiple of 8";
  EXPECT_EQ(bytes.size(), 8 + n + g.data_bytes());
  EXPECT_EQ(bytes[8], '{');

  auto parsed = parse_latent(bytes, &want);
  ASSERT_TRUE(parsed.ok()) << parsed.error().to_string();
  EXPECT_EQ(parsed->video, l.video);
  EXPECT_EQ(parsed->audio, l.audio);
  EXPECT_EQ(parsed->metadata.at("writer"), "h3pipe");
  EXPECT_EQ(parsed->metadata.at("h3pipe.format_version"), "2");
  EXPECT_EQ(parsed->metadata.at("h3pipe.profile"), "builtin");
  EXPECT_EQ(parsed->metadata.at("h3pipe.frames"), "124");
  EXPECT_EQ(parsed->metadata.at("h3pipe.layout"), "video+audio");
  EXPECT_EQ(parsed->container, Container::kV2);
  EXPECT_EQ(parsed->job, l.job);
  EXPECT_EQ(parsed->geometry, g);

  TempDir dir;
  auto sha = write_latent(dir.path() / "run/job/latent.h3latent", l);
  ASSERT_TRUE(sha.ok()) << sha.error().to_string();
  EXPECT_EQ(*sha, sha256_hex(bytes.data(), bytes.size()));
  auto verified = artifacts::verify(dir.path() / "run/job/latent.h3latent");
  ASSERT_TRUE(verified.ok());
  auto read = read_latent(dir.path() / "run/job/latent.h3latent", nullptr);
  ASSERT_TRUE(read.ok()) << read.error().to_string();
  EXPECT_EQ(read->geometry, g);
  EXPECT_EQ(read->video, l.video);
  EXPECT_EQ(read->audio, l.audio);
}

TEST(Latent, HalfPrecisionRoundTrip) {
  const Expected want{builtin_profile(), {64, 48, 5, 24}};
  Latent l = make_latent(expected_geometry(want.profile, want.job));
  l.job = want.job;
  for (DType d : {DType::kF16, DType::kBF16}) {
    auto bytes = serialize(l, d);
    auto parsed = parse_latent(bytes, &want);
    ASSERT_TRUE(parsed.ok()) << parsed.error().to_string();
    for (std::size_t i = 0; i < l.video.size(); ++i) {
      float want = d == DType::kF16 ? l.video[i] : st::bf16_to_float(st::float_to_bf16(l.video[i]));
      ASSERT_EQ(parsed->video[i], want) << dtype_name(d) << " element " << i;
    }
  }
}

TEST(Latent, HalfConversionEdgeCases) {
  EXPECT_EQ(st::half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(st::half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(st::half_to_float(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(st::half_to_float(0x7c00)));
  EXPECT_TRUE(std::isnan(st::half_to_float(0x7e00)));
  for (std::uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half round-trips
    ASSERT_EQ(st::float_to_half(st::half_to_float(static_cast<std::uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(st::float_to_half(65520.0f), 0x7c00);                     // tie rounds to even -> Inf
  EXPECT_EQ(st::float_to_half(std::ldexp(1.0f, -25)), 0);             // tie to even -> 0
  EXPECT_EQ(st::float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
}

TEST(Latent, WriteRejectsWrongSizes) {
  TempDir dir;
  Latent l = make_latent(Geometry{{1, 24, 1, 2, 2}, {1, 32, 2, 3}});
  l.audio.pop_back();
  auto r = write_latent(dir.path() / "x.h3latent", l);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "latent.geometry");
  EXPECT_FALSE(fs::exists(dir.path() / "x.h3latent"));
}

TEST(Latent, GenericTensorsRoundTrip) {
  TempDir dir;
  std::map<std::string, TensorF32> t;
  t["context"] = {{1, 3, 4}, pattern(12, 3, 11, 5, 2.0f)};
  t["scalar"] = {{}, {2.5f}};
  t["empty"] = {{0, 7}, {}};
  auto sha = write_tensors(dir.path() / "cond.safetensors", t, {{"kind", "conditioning"}});
  ASSERT_TRUE(sha.ok()) << sha.error().to_string();
  std::map<std::string, std::string> meta;
  auto back = read_tensors(dir.path() / "cond.safetensors", &meta);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(meta.at("kind"), "conditioning");
  ASSERT_EQ(back->size(), 3u);
  for (const auto& [name, tensor] : t) {
    EXPECT_EQ(back->at(name).shape, tensor.shape) << name;
    EXPECT_EQ(back->at(name).data, tensor.data) << name;
  }
  t["bad"] = {{2, 2}, {1, 2, 3}};
  EXPECT_EQ(write_tensors(dir.path() / "b.safetensors", t, {}).error().code, "latent.geometry");
}

// The regression corpus: every malformed file is refused with its own code, by both the
// in-memory parser and the staged file reader.
TEST(LatentCorpus, EachFileGetsItsCode) {
  std::ifstream in(kFixtures / "cases.json");
  ASSERT_TRUE(in) << "missing " << (kFixtures / "cases.json");
  auto cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 30u);
  const Expected* expected = &kSmall;
  for (auto it = cases.begin(); it != cases.end(); ++it) {
    const fs::path file = kFixtures / it.key();
    const std::string want = it.value()["code"];
    const std::string want_expected = it.value()["code_expected"];
    auto bytes = slurp(file);
    auto mem = parse_latent(bytes, nullptr);
    EXPECT_EQ(code_of(mem), want) << it.key() << ": " << (mem.ok() ? "" : mem.error().message);
    EXPECT_EQ(code_of(read_latent(file, nullptr)), want) << it.key();
    EXPECT_EQ(code_of(parse_latent(bytes, expected)), want_expected) << it.key();
    auto rf = read_latent(file, expected);
    EXPECT_EQ(code_of(rf), want_expected) << it.key();
    if (!rf.ok()) {
      EXPECT_NE(rf.error().message.find(file.string()), std::string::npos)
          << "message names the file: " << rf.error().message;
    }
  }
}

TEST(LatentCorpus, MessagesNameTheCulprit) {
  auto msg = [](const char* f) {
    auto r = read_latent(kFixtures / f, nullptr);
    return r.ok() ? std::string("ok") : r.error().message;
  };
  EXPECT_NE(msg("nan_in_video.h3latent").find("tensor \"video\": element 17 is NaN"),
            std::string::npos);
  EXPECT_NE(msg("inf_in_audio.h3latent").find("element 191 is -Inf"), std::string::npos);
  EXPECT_NE(msg("bad_dtype.h3latent").find("\"F64\""), std::string::npos);
  EXPECT_NE(msg("duplicate_tensor_key.h3latent").find("\"video\""), std::string::npos);
  EXPECT_NE(msg("metadata_number.h3latent").find("\"steps\""), std::string::npos);
  EXPECT_NE(msg("offsets_overlap.h3latent").find("overlaps"), std::string::npos);
}

TEST(LatentCorpus, TruncationAtEveryByteIsRefused) {
  Latent l = make_latent(Geometry{{1, 24, 1, 2, 2}, {1, 32, 2, 3}});
  auto bytes = serialize(l);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto r = parse_latent(std::span(bytes).first(n), nullptr);
    ASSERT_FALSE(r.ok()) << "accepted a file truncated to " << n << " bytes";
  }
}

TEST(LatentInspect, ValidAndInvalid) {
  std::ostringstream out;
  EXPECT_EQ(inspect_main((kFixtures / "valid.h3latent").string(), false, out), 0);
  EXPECT_NE(out.str().find("verdict   valid latent"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("(1, 24, 1, 2, 2)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("writer = fixture"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("form      h3latent v1, layout video+audio"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("profile   builtin"), std::string::npos) << out.str();
  std::ostringstream js;
  EXPECT_EQ(inspect_main((kFixtures / "nan_in_video.h3latent").string(), true, js), 1);
  auto j = nlohmann::json::parse(js.str());
  EXPECT_FALSE(j["valid"].get<bool>());
  EXPECT_EQ(j["error"]["code"], "latent.nonfinite");
  EXPECT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["sha256"].get<std::string>().size(), 64u);
  std::ostringstream bad;
  EXPECT_EQ(inspect_main((kFixtures / "header_len_max_u64.h3latent").string(), false, bad), 1);
  EXPECT_NE(bad.str().find("latent.header_too_large"), std::string::npos) << bad.str();
}

// Tensor names and metadata are the file's: `latent inspect` prints them with terminal controls
// escaped (issue #35 D10), so a file cannot clear the screen, retitle the window or recolour what
// follows.  JSON output escapes them as JSON does.
TEST(LatentInspect, TerminalControlsInNamesAndMetadataAreEscaped) {
  TempDir dir;
  const std::vector<float> v = {1.f, 2.f};
  const auto bytes = st::serialize({{"x\x1b[2Jy", {2}, v}},
                                   {{"note", "\x1b]0;pwned\x07 done"},
                                    {"c1",
                                     "\xc2\x9b"
                                     "31mred"},
                                    {"k\x1b", "ok \xe2\x9c\x93"}},
                                   DType::kF32);
  const fs::path f = dir.path() / "evil.safetensors";
  std::ofstream(f, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  std::ostringstream out;
  EXPECT_EQ(inspect_main(f.string(), false, out), 0) << out.str();
  const std::string s = out.str();
  for (const char* raw : {"\x1b", "\x07", "\xc2\x9b"})
    EXPECT_EQ(s.find(raw), std::string::npos) << "raw control in: " << s;
  EXPECT_NE(s.find("tensors   x\\x1b[2Jy"), std::string::npos) << s;
  EXPECT_NE(s.find("note = \\x1b]0;pwned\\x07 done"), std::string::npos) << s;
  EXPECT_NE(s.find("c1 = \\u009b31mred"), std::string::npos) << s;
  EXPECT_NE(s.find("k\\x1b = ok \xe2\x9c\x93"), std::string::npos) << s;  // UTF-8 stays
  std::ostringstream js;
  EXPECT_EQ(inspect_main(f.string(), true, js), 0);
  EXPECT_EQ(js.str().find('\x1b'), std::string::npos) << js.str();
}

// Interop with an independent Python reader/writer written from the format description.
class LatentInterop : public ::testing::TestWithParam<DType> {};

TEST_P(LatentInterop, PythonReadsOursAndWeReadPython) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 not installed";
  TempDir dir;
  // Builtin job 80x64, 9 frames at 800 fps: video (1, 24, 3, 4, 5), audio (1, 32, 2, 7).
  const Expected job{builtin_profile(), {80, 64, 9, 800}};
  const Geometry g = expected_geometry(job.profile, job.job);
  ASSERT_EQ(g, (Geometry{{1, 24, 3, 4, 5}, {1, 32, 2, 7}}));
  const DType d = GetParam();
  const std::string dims =
      fmt::format("{} {} {} {} {}", g.t(), g.h(), g.w(), g.audio[3], dtype_name(d));
  auto ours = dir.path() / "ours.h3latent";
  auto bytes = serialize(make_latent(g), d);
  ASSERT_TRUE(artifacts::write_atomic(ours, bytes).ok());
  std::string check =
      fmt::format("/usr/bin/python3 {} check {} {}", kInterop.string(), ours.string(), dims);
  ASSERT_EQ(std::system(check.c_str()), 0) << check;

  auto theirs = dir.path() / "theirs.h3latent";
  std::string write =
      fmt::format("/usr/bin/python3 {} write {} {}", kInterop.string(), theirs.string(), dims);
  ASSERT_EQ(std::system(write.c_str()), 0) << write;
  auto r = read_latent(theirs, &job);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->container, Container::kV1);
  EXPECT_EQ(r->metadata.at("writer"), "numpy");
  Latent want = make_latent(g);
  for (std::size_t i = 0; i < want.video.size(); ++i) {
    float w =
        d == DType::kBF16 ? st::bf16_to_float(st::float_to_bf16(want.video[i])) : want.video[i];
    ASSERT_EQ(r->video[i], w) << i;
  }
  for (std::size_t i = 0; i < want.audio.size(); ++i) {
    float w =
        d == DType::kBF16 ? st::bf16_to_float(st::float_to_bf16(want.audio[i])) : want.audio[i];
    ASSERT_EQ(r->audio[i], w) << i;
  }
}

// Version 2 (video only) and ComfyUI's .latent, both ways, for a Wan 2.1 job.
TEST_P(LatentInterop, VersionTwoAndComfyBothWays) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "/usr/bin/python3 not installed";
  TempDir dir;
  const DType d = GetParam();
  const Expected wan{*find_builtin_profile("wan2.1"), {64, 48, 9, 16}};
  Latent l = latent::make_latent(wan.profile, wan.job);
  l.video = pattern(l.video.size(), 7, 1001, 500, 64.0f);
  l.metadata = {{"writer", "h3pipe"}};
  auto run = [&](const std::string& args) {
    std::string cmd = fmt::format("/usr/bin/python3 {} {}", kInterop.string(), args);
    return std::system(cmd.c_str());
  };
  auto ours = dir.path() / "ours.h3latent";
  ASSERT_TRUE(artifacts::write_atomic(ours, serialize(l, d)).ok());
  ASSERT_EQ(run(fmt::format("check-v2 {} {}", ours.string(), dtype_name(d))), 0);
  auto theirs = dir.path() / "theirs.h3latent";
  ASSERT_EQ(run(fmt::format("write-v2 {} {}", theirs.string(), dtype_name(d))), 0);
  auto r = read_latent(theirs, &wan);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->container, Container::kV2);
  EXPECT_EQ(r->layout, "video");
  for (std::size_t i = 0; i < l.video.size(); ++i) {
    float w = d == DType::kBF16 ? st::bf16_to_float(st::float_to_bf16(l.video[i])) : l.video[i];
    ASSERT_EQ(r->video[i], w) << i;
  }
  if (d != DType::kF32) return;  // SaveLatent writes the sampler's float32
  auto ours_comfy = dir.path() / "ours.latent";
  ASSERT_TRUE(write_comfy_latent(ours_comfy, l).ok());
  ASSERT_EQ(run(fmt::format("check-comfy {}", ours_comfy.string())), 0);
  auto theirs_comfy = dir.path() / "theirs.latent";
  ASSERT_EQ(run(fmt::format("write-comfy {}", theirs_comfy.string())), 0);
  auto c = read_latent(theirs_comfy, &wan);
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c->container, Container::kComfy);
  EXPECT_EQ(c->video, l.video);
  EXPECT_NE(c->metadata.at("prompt").find("KSampler"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, LatentInterop,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace h3pipe::latent
