// Weights from a safetensors file: round trip with the seeded weights, and every kind of bad
// file fails with runtime.permanent.weights naming the tensor.
#include "common/model/weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "tests/model/test_util.h"

using namespace h3pipe;
using namespace h3pipe::model;
using h3pipe::model::testing::TempDir;
using h3pipe::model::testing::tiny_config;

namespace {

std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_all(const std::filesystem::path& p, const std::string& s) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << s;
}

// Data offset (from the file start) of a tensor in a safetensors file.
std::size_t tensor_offset(const std::string& file, const std::string& name) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(file[static_cast<std::size_t>(i)]);
  const auto h = nlohmann::json::parse(file.substr(8, n));
  return 8 + n + h[name]["data_offsets"][0].get<std::size_t>();
}

Error load_error(const ModelConfig& c) {
  auto m = Model::load(c);
  EXPECT_FALSE(m.ok());
  return m.ok() ? Error{} : m.error();
}

}  // namespace

TEST(ModelWeights, FileRoundTripGivesTheSameModel) {
  TempDir dir;
  ModelConfig c = tiny_config();
  const auto file = dir.path() / "w.safetensors";
  ASSERT_TRUE(save_seeded_weights(c, file).ok());
  auto seeded = Model::load(c);
  ASSERT_TRUE(seeded.ok());
  ModelConfig fc = c;
  fc.weights_file = file.string();
  fc.seed = 999;  // ignored when a file is given
  auto loaded = Model::load(fc);
  ASSERT_TRUE(loaded.ok()) << loaded.error().to_string();
  EXPECT_EQ((*seeded)->parameters(), (*loaded)->parameters());
  auto a = (*seeded)->encode("same", nullptr);
  auto b = (*loaded)->encode("same", nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(std::memcmp(a->data.data(), b->data.data(), a->data.size() * 4), 0);
  // save_weights of a loaded model writes the same tensor bytes (the header's config metadata
  // differs: it names the weights file).
  const auto again = dir.path() / "again.safetensors";
  ASSERT_TRUE((*loaded)->save_weights(again).ok());
  const std::string x = read_all(file), y = read_all(again);
  const std::string probe = param_specs(c).front().name;
  const std::size_t dx = tensor_offset(x, probe), dy = tensor_offset(y, probe);
  EXPECT_TRUE(x.size() - dx == y.size() - dy &&
              x.compare(dx, std::string::npos, y, dy, std::string::npos) == 0);
}

TEST(ModelWeights, WrongShapeNamesTheTensor) {
  TempDir dir;
  ModelConfig c = tiny_config();
  auto specs = param_specs(c);
  for (auto& s : specs)
    if (s.name == "dit.blocks.1.mlp.fc1.weight") s.shape[0] += 1;
  const auto file = dir.path() / "shape.safetensors";
  ASSERT_TRUE(save_safetensors(file, seeded_weights(specs, 1), specs, {}).ok());
  c.weights_file = file.string();
  const Error e = load_error(c);
  EXPECT_EQ(e.code, "runtime.permanent.weights");
  EXPECT_NE(
      e.message.find("tensor dit.blocks.1.mlp.fc1.weight: shape [129,64] (expected [128, 64])"),
      std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find(file.string()), std::string::npos);
}

TEST(ModelWeights, TruncatedFileNamesTheTensor) {
  TempDir dir;
  ModelConfig c = tiny_config();
  const auto file = dir.path() / "trunc.safetensors";
  ASSERT_TRUE(save_seeded_weights(c, file).ok());
  std::string bytes = read_all(file);
  write_all(file, bytes.substr(0, bytes.size() - 10));
  c.weights_file = file.string();
  const Error e = load_error(c);
  EXPECT_EQ(e.code, "runtime.permanent.weights");
  const std::string last = param_specs(c).back().name;  // the last tensor in the file
  EXPECT_NE(e.message.find("tensor " + last + ": truncated"), std::string::npos) << e.message;
  // Truncated inside the header.
  write_all(file, bytes.substr(0, 20));
  const Error h = load_error(c);
  EXPECT_EQ(h.code, "runtime.permanent.weights");
  EXPECT_NE(h.message.find("header"), std::string::npos) << h.message;
}

TEST(ModelWeights, NanNamesTheTensor) {
  TempDir dir;
  ModelConfig c = tiny_config();
  const auto file = dir.path() / "nan.safetensors";
  ASSERT_TRUE(save_seeded_weights(c, file).ok());
  std::string bytes = read_all(file);
  const std::size_t off = tensor_offset(bytes, "vae.s1.up.weight") + 4 * 5;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bytes.data() + off, &nan, 4);
  const std::size_t off2 = tensor_offset(bytes, "text.embed");
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(bytes.data() + off2, &inf, 4);
  write_all(file, bytes);
  c.weights_file = file.string();
  const Error e = load_error(c);
  EXPECT_EQ(e.code, "runtime.permanent.weights");
  EXPECT_NE(e.message.find("tensor vae.s1.up.weight: non-finite value nan at element 5"),
            std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("tensor text.embed: non-finite value inf at element 0"),
            std::string::npos);
}

TEST(ModelWeights, MissingUnexpectedAndDtype) {
  TempDir dir;
  ModelConfig c = tiny_config();
  auto specs = param_specs(c);
  auto w = seeded_weights(specs, 1);
  specs.erase(std::remove_if(specs.begin(), specs.end(),
                             [](const ParamSpec& s) { return s.name == "dit.final.ada.bias"; }),
              specs.end());
  specs.push_back({"extra.tensor", {2}, ParamSpec::Init::kZeros, 0});
  w.put("extra.tensor", Tensor{{2}, {0, 0}});
  const auto file = dir.path() / "missing.safetensors";
  ASSERT_TRUE(save_safetensors(file, w, specs, {}).ok());
  c.weights_file = file.string();
  const Error e = load_error(c);
  EXPECT_NE(e.message.find("tensor dit.final.ada.bias: missing"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("tensor extra.tensor: unexpected"), std::string::npos) << e.message;

  // A tensor stored as F16 is refused by name.
  const auto good = dir.path() / "good.safetensors";
  ASSERT_TRUE(save_seeded_weights(tiny_config(), good).ok());
  std::string bytes = read_all(good);
  const std::string key = "\"text.norm.bias\":{\"dtype\":\"";
  const auto pos = bytes.find(key);
  ASSERT_NE(pos, std::string::npos);
  bytes.replace(pos + key.size(), 3, "F16");
  write_all(good, bytes);
  c.weights_file = good.string();
  const Error d = load_error(c);
  EXPECT_NE(d.message.find("tensor text.norm.bias: dtype \"F16\" (expected F32)"),
            std::string::npos)
      << d.message;

  c.weights_file = (dir.path() / "absent.safetensors").string();
  const Error a = load_error(c);
  EXPECT_EQ(a.code, "runtime.permanent.weights");
  EXPECT_NE(a.message.find("absent.safetensors"), std::string::npos);
}
