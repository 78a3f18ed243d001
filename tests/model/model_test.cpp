// Config parsing, geometry, and determinism of encode + sample.
#include <gtest/gtest.h>

#include <cstring>

#include "tests/model/test_util.h"

using namespace h3pipe;
using namespace h3pipe::model;
using h3pipe::model::testing::tiny_config;

TEST(ModelConfig, DefaultsAndOverrides) {
  auto c = parse_config(nlohmann::json::object(), "/x");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->width, 384);
  auto d = parse_config(nlohmann::json{{"width", 128},
                                       {"heads", 4},
                                       {"vae_channels", {8, 8, 8, 8, 8}},
                                       {"seed", 42},
                                       {"weights_file", "w.safetensors"}},
                        "/x");
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  EXPECT_EQ(d->width, 128);
  EXPECT_EQ(d->seed, 42u);
  EXPECT_EQ(d->vae_channels[4], 8);
  EXPECT_EQ(d->weights_file, "w.safetensors");
}

TEST(ModelConfig, ErrorsNameEveryPath) {
  const auto j = nlohmann::json{{"widht", 128},
                                {"depth", "ten"},
                                {"patch", {2, 2, 2}},
                                {"vae_channels", {1, 2}},
                                {"threads", 0}};
  auto c = parse_config(j, "/stages/sample/runtime/settings");
  ASSERT_FALSE(c.ok());
  const auto& m = c.error().message;
  EXPECT_EQ(c.error().code, "config.invalid");
  for (const char* key :
       {"widht: unknown key", "depth: expected an integer", "patch: expected [1, p, p]",
        "vae_channels: expected an array of 5", "threads: expected an integer"})
    EXPECT_NE(m.find(std::string("/stages/sample/runtime/settings/") + key), std::string::npos)
        << m;
  // Keys of the runtime adapter are tolerated when named.
  const std::string_view extra[] = {"crf"};
  EXPECT_TRUE(parse_config(nlohmann::json{{"crf", 20}}, "/s", extra).ok());
  EXPECT_FALSE(parse_config(nlohmann::json{{"crf", 20}}, "/s").ok());
  EXPECT_FALSE(parse_config(nlohmann::json{{"width", 100}, {"heads", 3}}, "/s").ok());
  EXPECT_FALSE(parse_config(nlohmann::json::array(), "/s").ok());
}

TEST(ModelGeometry, MatchesTheSeedsSizes) {
  const auto d = latent_dims(736, 416, 124, 24);
  EXPECT_EQ(d.t, 31);
  EXPECT_EQ(d.h, 26);
  EXPECT_EQ(d.w, 46);
  EXPECT_EQ(d.audio_len, 2884);                                 // ceil(124/24*48000/86)
  EXPECT_EQ(4 * (d.video_numel() + d.audio_numel()), 4297600);  // ~4.3 MB, docs/design.md
  EXPECT_EQ(audio_samples(124, 24), 248000);
}

namespace {

struct Sampled {
  Tensor cond;
  std::vector<float> video, audio;
};

Sampled run(const ModelConfig& c, std::uint64_t seed, const LatentDims& dims,
            const std::string& prompt = "a cat") {
  auto m = Model::load(c);
  EXPECT_TRUE(m.ok());
  Sampled s;
  auto cond = (*m)->encode(prompt, nullptr);
  EXPECT_TRUE(cond.ok());
  s.cond = *cond;
  auto st = (*m)->sample(s.cond, dims, 3, seed, s.video, s.audio);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  EXPECT_GT((*m)->last_gflop(), 0.0);
  return s;
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(ModelDeterminism, SameInputsSameBytesWhateverTheThreadCount) {
  const auto dims = latent_dims(96, 64, 9, 24);
  const Sampled a = run(tiny_config(2), 11, dims);
  const Sampled b = run(tiny_config(2), 11, dims);
  const Sampled c = run(tiny_config(1), 11, dims);
  const Sampled d = run(tiny_config(3), 11, dims);
  ASSERT_EQ(a.video.size(), static_cast<std::size_t>(dims.video_numel()));
  ASSERT_EQ(a.audio.size(), static_cast<std::size_t>(dims.audio_numel()));
  EXPECT_TRUE(same_bytes(a.cond.data, b.cond.data));
  EXPECT_TRUE(same_bytes(a.video, b.video));
  EXPECT_TRUE(same_bytes(a.audio, b.audio));
  EXPECT_TRUE(same_bytes(a.video, c.video));
  EXPECT_TRUE(same_bytes(a.audio, c.audio));
  EXPECT_TRUE(same_bytes(a.video, d.video));
  // A different job seed or prompt gives a different latent; values stay finite and O(1).
  const Sampled e = run(tiny_config(2), 12, dims);
  EXPECT_FALSE(same_bytes(a.video, e.video));
  const Sampled f = run(tiny_config(2), 11, dims, "a dog");
  EXPECT_FALSE(same_bytes(a.video, f.video));
  double sq = 0;
  for (float v : a.video) sq += static_cast<double>(v) * v;
  const double rms = std::sqrt(sq / static_cast<double>(a.video.size()));
  EXPECT_GT(rms, 0.1);
  EXPECT_LT(rms, 10.0);
}

TEST(ModelEncode, PromptAndReferenceImage) {
  auto m = Model::load(tiny_config());
  ASSERT_TRUE(m.ok());
  auto t = (*m)->encode("hello", nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape, (std::vector<std::int64_t>{16, 64}));
  media::Image img;
  img.width = 40;
  img.height = 30;
  img.rgb.assign(40 * 30 * 3, 200);
  auto r = (*m)->encode("hello", &img);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape, (std::vector<std::int64_t>{16 + 64, 64}));
  // The text part does not depend on the image.
  EXPECT_EQ(std::memcmp(t->data.data(), r->data.data(), t->data.size() * 4), 0);
  img.rgb.resize(10);
  EXPECT_FALSE((*m)->encode("hello", &img).ok());
  // A very long prompt is truncated, not an error.
  EXPECT_TRUE((*m)->encode(std::string(10000, 'x'), nullptr).ok());
}

TEST(ModelSample, RejectsBadInputs) {
  auto m = Model::load(tiny_config());
  ASSERT_TRUE(m.ok());
  auto cond = (*m)->encode("x", nullptr);
  ASSERT_TRUE(cond.ok());
  std::vector<float> v, a;
  const auto dims = latent_dims(64, 64, 5, 24);
  Tensor bad = *cond;
  bad.shape = {16, 32};
  auto s = (*m)->sample(bad, dims, 2, 1, v, a);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, "runtime.permanent.input");
  bad = *cond;
  bad.data[3] = std::nanf("");
  EXPECT_FALSE((*m)->sample(bad, dims, 2, 1, v, a).ok());
  EXPECT_FALSE((*m)->sample(*cond, dims, 0, 1, v, a).ok());
  EXPECT_FALSE((*m)->sample(*cond, LatentDims{}, 2, 1, v, a).ok());
  int calls = 0;
  auto c = (*m)->sample(*cond, dims, 4, 1, v, a, [&] { return ++calls > 2; });
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, "runtime.cancelled");
}

TEST(ModelParts, DecoderOnlyProcessKeepsOnlyDecoderWeights) {
  auto full = Model::load(tiny_config());
  auto dec = Model::load(tiny_config(), kDecoder);
  ASSERT_TRUE(full.ok() && dec.ok());
  EXPECT_LT((*dec)->parameters(), (*full)->parameters());
  auto enc = (*dec)->encode("x", nullptr);
  ASSERT_FALSE(enc.ok());
  EXPECT_EQ(enc.error().code, "runtime.permanent.config");
  const auto d = latent_dims(64, 64, 5, 24);
  std::vector<float> v(static_cast<std::size_t>(d.video_numel()), 0.5f);
  std::vector<std::vector<std::uint8_t>> a, b;
  ASSERT_TRUE((*full)
                  ->decode_video(v.data(), d, 5, 64, 64,
                                 [&](auto f) {
                                   a.emplace_back(f.begin(), f.end());
                                   return Status::Ok();
                                 })
                  .ok());
  ASSERT_TRUE((*dec)
                  ->decode_video(v.data(), d, 5, 64, 64,
                                 [&](auto f) {
                                   b.emplace_back(f.begin(), f.end());
                                   return Status::Ok();
                                 })
                  .ok());
  EXPECT_EQ(a, b);
}

TEST(ModelDevice, CudaWithoutCudaIsAClearError) {
  auto c = parse_config(nlohmann::json{{"device", "tpu"}}, "/s");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("/s/device"), std::string::npos);
  ModelConfig cfg = tiny_config();
  cfg.device = "cuda";
  auto m = Model::load(cfg);
  if (m.ok()) {
    // A CUDA build on a machine with a GPU (unverified path): the device is reported.
    EXPECT_EQ((*m)->device(), "cuda:0");
  } else {
    EXPECT_EQ(m.error().code, "runtime.permanent.config");
  }
  auto cpu = Model::load(tiny_config());
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->device(), "cpu");
}

// #37 item 4: the sampler reports each step in order with the latent after it, and a cancel seen
// between steps stops it there; the report changes no byte of the result.
TEST(ModelSampler, ReportsEveryStepInOrderAndStopsBetweenStepsWhenCancelled) {
  const auto dims = latent_dims(96, 64, 9, 24);
  auto m = Model::load(tiny_config(2));
  ASSERT_TRUE(m.ok());
  auto cond = (*m)->encode("a cat", nullptr);
  ASSERT_TRUE(cond.ok());
  std::vector<float> v, a;
  std::vector<std::uint32_t> seen;
  auto st = (*m)->sample(*cond, dims, 4, 11, v, a, {},
                         [&](std::uint32_t k, std::uint32_t n, const float* video) {
                           EXPECT_EQ(n, 4u);
                           EXPECT_NE(video, nullptr);
                           seen.push_back(k);
                         });
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{1, 2, 3, 4}));
  std::vector<float> v2, a2;
  ASSERT_TRUE((*m)->sample(*cond, dims, 4, 11, v2, a2).ok());
  EXPECT_TRUE(same_bytes(v, v2));
  seen.clear();
  auto cancelled = (*m)->sample(
      *cond, dims, 4, 11, v, a, [&] { return seen.size() >= 2; },
      [&](std::uint32_t k, std::uint32_t, const float*) { seen.push_back(k); });
  ASSERT_FALSE(cancelled.ok());
  EXPECT_EQ(cancelled.error().code, errc::runtime::kCancelled);
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{1, 2}));
}
