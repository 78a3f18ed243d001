// The device setting and the device backend's fallbacks, all without a GPU: the "device"
// grammar at config load, a CUDA request in a build without CUDA (config-load error naming the
// field), and a CUDA build on a machine without a visible GPU (a clear error at service start,
// i.e. Model::load).  The GPU itself is exercised by model_gpu_test.cpp.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "common/model/cuda/backend.h"
#include "common/model/cuda/gemm_layout.h"
#include "common/model/kernels.h"
#include "common/runtime/settings_check.h"
#include "tests/model/test_util.h"

using namespace h3pipe;
using namespace h3pipe::model;
using namespace h3pipe::model::testing;
using nlohmann::json;

TEST(DeviceSetting, TheGrammarIsCpuCudaOrCudaN) {
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:7", "cuda:123"}) {
    auto c = parse_config(json{{"device", ok}}, "/s");
    ASSERT_TRUE(c.ok()) << ok << ": " << c.error().message;
    EXPECT_EQ(c->device, ok);
  }
  auto d = parse_device("cuda:3");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->cuda);
  EXPECT_EQ(d->ordinal, 3);
  EXPECT_EQ(parse_device("cuda")->ordinal, -1);
  EXPECT_FALSE(parse_device("cpu")->cuda);
  for (const char* bad :
       {"gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "cuda0", "tpu", "cuda:12345", ""}) {
    auto c = parse_config(json{{"device", bad}}, "/pools/1/runtime/settings");
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.error().code, "config.invalid");
    EXPECT_NE(c.error().message.find(
                  "/pools/1/runtime/settings/device: expected \"cpu\", \"cuda\" or \"cuda:N\""),
              std::string::npos)
        << c.error().message;
  }
  auto c = parse_config(json{{"device", 0}}, "/s");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("/s/device: expected a string"), std::string::npos);
}

TEST(DeviceSetting, DeterministicIsABoolean) {
  auto c = parse_config(json{{"deterministic", true}}, "/s");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->deterministic);
  EXPECT_EQ(config_to_json(*c).at("deterministic"), true);
  auto bad = parse_config(json{{"deterministic", 1}}, "/s");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("/s/deterministic: expected true or false"),
            std::string::npos);
}

namespace {
json cluster(const json& settings) {
  const json prof = {{"default", {{"seconds", 1}}}};
  return {{"name", "dev"},
          {"hosts", json::array({{{"name", "a"}}})},
          {"stages",
           {{"encode", {{"runtime", {{"name", "sim"}}}}},
            {"decode", {{"runtime", {{"name", "sim"}}}}}}},
          {"pools",
           json::array({{{"name", "e"}, {"host", "a"}, {"stage", "encode"}, {"profiles", prof}},
                        {{"name", "s"},
                         {"host", "a"},
                         {"stage", "sample"},
                         {"gpus", {0}},
                         {"runtime", {{"name", "builtin"}, {"settings", settings}}},
                         {"profiles", prof}},
                        {{"name", "d"}, {"host", "a"}, {"stage", "decode"}, {"profiles", prof}}})}};
}
}  // namespace

TEST(DeviceSetting, ConfigLoadNamesTheFieldOfABadDeviceAndTheHostCheckAMissingCudaBuild) {
  TempDir dir;
  const auto file = dir.path() / "cluster.json";
  std::ofstream(file) << cluster({{"device", "gpu0"}}).dump();
  auto bad = runtime::load_config(file);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.error().message.find("/pools/1/runtime/settings/device: expected \"cpu\", \"cuda\""),
      std::string::npos)
      << bad.error().message;

  std::ofstream(file) << cluster({{"device", "cuda"}}).dump();
  auto c = runtime::load_config(file);
  ASSERT_TRUE(c.ok()) << c.error().message;  // any machine may read a CUDA cluster's config
  const Status host = runtime::check_settings(*c, runtime::SettingsScope::kHost, "a");
  if (cuda_built()) {
    EXPECT_TRUE(host.ok()) << host.error().message;
  } else {
    ASSERT_FALSE(host.ok());
    EXPECT_NE(host.error().message.find("/pools/1/runtime/settings/device: \"cuda\" requested, but "
                                        "this build of h3pipe has no CUDA backend"),
              std::string::npos)
        << host.error().message;
  }
}

TEST(DeviceBackend, CudaWithoutABuildOrAVisibleGpuFailsAtLoadWithTheReason) {
  if (cuda_built() && cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  ModelConfig cfg = tiny_config();
  cfg.device = "cuda:0";
  auto m = Model::load(cfg, kSampler);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code, "runtime.permanent.config");
  EXPECT_NE(
      m.error().message.find(cuda_built() ? "no CUDA device is visible" : "has no CUDA backend"),
      std::string::npos)
      << m.error().message;
  EXPECT_NE(m.error().message.find("device \"cuda:0\""), std::string::npos) << m.error().message;
  // The encoder never goes to the device: an encoder process with "cuda" loads on the CPU.
  auto enc = Model::load(cfg, kEncoder);
  ASSERT_TRUE(enc.ok()) << enc.error().message;
  EXPECT_EQ((*enc)->device(), "cpu");
  EXPECT_EQ((*enc)->device_peak_bytes(), 0u);
  auto peak = cuda_gemm_peak_tflops(0, 256, 1);
  EXPECT_FALSE(peak.ok());
}

TEST(DeviceBackend, TheCpuPlanIsUnchangedByTheDevicePlan) {
  // The CPU model's decode plan is what it was (the device estimate is a separate branch).
  ModelConfig cfg = tiny_config();
  cfg.memory_budget_mb = 16;
  auto m = Model::load(cfg, kDecoder);
  ASSERT_TRUE(m.ok());
  const auto dims = latent_dims(256, 256, 33, 24);
  const DecodePlan p = (*m)->plan_decode(dims, 256, 256);
  EXPECT_GE(p.segment_frames, 1);
  EXPECT_LE(p.segment_bytes, std::uint64_t{16} << 20);
}

// The row-major -> cuBLASLt mapping (cuda/gemm_layout.h), checked without a GPU: a column-major
// reference GEMM that reads the operands exactly as cuBLASLt's layouts describe them must give
// the CPU sgemm's row-major result, for every call shape the backend makes.
namespace {
void lt_reference(const cuda::LtLayout& l, float alpha, const float* a, const float* b, float beta,
                  float* c) {
  // Stored shapes must be readable with the leading dimensions given (cuBLASLt rejects otherwise).
  ASSERT_GE(static_cast<std::uint64_t>(l.lda), l.a_rows);
  ASSERT_GE(static_cast<std::uint64_t>(l.ldb), l.b_rows);
  ASSERT_GE(static_cast<std::uint64_t>(l.ldc), l.c_rows);
  ASSERT_EQ(l.c_rows, static_cast<std::uint64_t>(l.m));
  ASSERT_EQ(l.c_cols, static_cast<std::uint64_t>(l.n));
  ASSERT_EQ(l.trans_a ? l.a_cols : l.a_rows, static_cast<std::uint64_t>(l.m));
  ASSERT_EQ(l.trans_a ? l.a_rows : l.a_cols, static_cast<std::uint64_t>(l.k));
  ASSERT_EQ(l.trans_b ? l.b_cols : l.b_rows, static_cast<std::uint64_t>(l.k));
  ASSERT_EQ(l.trans_b ? l.b_rows : l.b_cols, static_cast<std::uint64_t>(l.n));
  for (int j = 0; j < l.n; ++j)
    for (int i = 0; i < l.m; ++i) {
      double acc = 0;
      for (int p = 0; p < l.k; ++p) {
        const float av = l.trans_a ? a[p + static_cast<std::size_t>(i) * l.lda]
                                   : a[i + static_cast<std::size_t>(p) * l.lda];
        const float bv = l.trans_b ? b[j + static_cast<std::size_t>(p) * l.ldb]
                                   : b[p + static_cast<std::size_t>(j) * l.ldb];
        acc += static_cast<double>(av) * bv;
      }
      float& cv = c[i + static_cast<std::size_t>(j) * l.ldc];
      cv = static_cast<float>(alpha * acc + (beta != 0 ? beta * cv : 0.0));
    }
}
}  // namespace

TEST(DeviceBackend, TheRowMajorToCublasLtMappingReproducesTheCpuSgemm) {
  struct Call {
    const char* what;
    bool ta, tb;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
  };
  const Call calls[] = {
      {"linear y = x W^T", false, true, 37, 24, 16, 16, 16, 24, 1.0f, 0.0f},
      {"linear accumulate", false, true, 5, 8, 12, 12, 12, 8, 1.0f, 1.0f},
      {"attention scores q k^T (head slice)", false, true, 9, 11, 4, 12, 12, 11, 0.5f, 0.0f},
      {"attention p v (head slice)", false, false, 9, 4, 11, 11, 12, 8, 1.0f, 0.0f},
      {"conv W col into a band of a plane", false, false, 6, 20, 27, 27, 20, 50, 1.0f, 0.0f},
      {"conv transpose W^T in", true, false, 14, 10, 3, 14, 10, 10, 1.0f, 0.0f},
  };
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Call& c : calls) {
    const int a_rows = c.ta ? c.k : c.m, b_rows = c.tb ? c.n : c.k;
    std::vector<float> a(static_cast<std::size_t>(a_rows) * c.lda),
        b(static_cast<std::size_t>(b_rows) * c.ldb);
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    std::vector<float> want(static_cast<std::size_t>(c.m) * c.ldc), got;
    for (float& v : want) v = u(rng);
    got = want;
    sgemm(c.ta, c.tb, c.m, c.n, c.k, c.alpha, a.data(), c.lda, b.data(), c.ldb, c.beta, want.data(),
          c.ldc);
    const cuda::LtLayout l = cuda::lt_layout(c.ta, c.tb, c.m, c.n, c.k, c.lda, c.ldb, c.ldc);
    ASSERT_TRUE(l.a_is_rowmajor_b);
    lt_reference(l, c.alpha, b.data(), a.data(), c.beta, got.data());  // cuBLASLt's A = our B
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4f) << c.what << " at " << i;
  }
}
