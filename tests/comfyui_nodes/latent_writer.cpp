// Writes a latent file with h3pipe's own writer (common/latent + artifacts::write_atomic, so the
// .sha256 sidecar too) for the node pack's interop test (integrations/comfyui/tests):
//   comfyui_latent_writer FILE DTYPE NAME=D0xD1x... [NAME=...] [KEY:=VALUE ...]
// DTYPE F32, F16 or BF16. Tensor number k (in argument order) holds, at flat index i,
// ((i * 7 + k * 131) % 1001 - 500) / 64, which the test recomputes.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "common/artifacts/artifacts.h"
#include "common/latent/latent.h"

using namespace h3pipe;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s FILE F32|F16|BF16 NAME=D0xD1x... [KEY:=VALUE ...]\n", argv[0]);
    return 2;
  }
  std::string dt = argv[2];
  latent::DType dtype = dt == "F16"    ? latent::DType::kF16
                        : dt == "BF16" ? latent::DType::kBF16
                                       : latent::DType::kF32;
  std::map<std::string, latent::TensorF32> tensors;
  std::map<std::string, std::string> meta;
  int k = 0;
  for (int a = 3; a < argc; ++a) {
    std::string arg = argv[a];
    if (auto m = arg.find(":="); m != std::string::npos) {
      meta[arg.substr(0, m)] = arg.substr(m + 2);
      continue;
    }
    auto eq = arg.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "bad argument %s\n", arg.c_str());
      return 2;
    }
    latent::TensorF32 t;
    std::size_t n = 1;
    for (std::size_t at = eq + 1; at < arg.size();) {
      std::size_t x = arg.find('x', at);
      if (x == std::string::npos) x = arg.size();
      t.shape.push_back(std::strtoull(arg.substr(at, x - at).c_str(), nullptr, 10));
      n *= t.shape.back();
      at = x + 1;
    }
    t.data.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      t.data[i] =
          static_cast<float>(static_cast<long long>((i * 7 + k * 131) % 1001) - 500) / 64.0f;
    tensors[arg.substr(0, eq)] = std::move(t);
    ++k;
  }
  auto bytes = latent::serialize_tensors(tensors, meta, dtype);
  auto sha = artifacts::write_atomic(argv[1], bytes);
  if (!sha.ok()) {
    std::fprintf(stderr, "%s\n", sha.error().to_string().c_str());
    return 1;
  }
  std::printf("%s\n", sha->c_str());
  return 0;
}
