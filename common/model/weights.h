#pragma once
// The builtin model's parameters: the list of every tensor (name, shape, init) derived from the
// config, seeded ("dummy") generation, and strict safetensors I/O.  Errors on load carry code
// "runtime.permanent.weights" and name the tensor (missing, unexpected, dtype, shape, truncated,
// non-finite).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/core/result.h"
#include "common/model/model.h"

namespace h3pipe::model {

struct ParamSpec {
  enum class Init { kUniform, kOnes, kZeros };
  std::string name;
  std::vector<std::int64_t> shape;
  Init init = Init::kUniform;
  float scale = 0;  // kUniform: values in [-scale, scale]
  std::int64_t numel() const;
};

// Every parameter of the model described by `c`, in a fixed order.
std::vector<ParamSpec> param_specs(const ModelConfig& c);

class Weights final {
 public:
  const float* at(const std::string& name) const;  // aborts on a name the model never declared
  const Tensor* find(const std::string& name) const;
  void put(std::string name, Tensor t) { map_[std::move(name)] = std::move(t); }
  std::int64_t parameters() const;
  const std::map<std::string, Tensor>& all() const { return map_; }

 private:
  std::map<std::string, Tensor> map_;
};

// Values depend only on (seed, tensor name, element index): adding a tensor never changes others.
Weights seeded_weights(const std::vector<ParamSpec>& specs, std::uint64_t seed);

// Strict load: every spec present with dtype F32 and the exact shape, offsets inside the file,
// no unexpected tensors, all values finite.  All problems are reported together.
// `keep` (optional) selects the tensors kept in memory; the others are validated and dropped.
Result<Weights> load_safetensors(const std::filesystem::path& file,
                                 const std::vector<ParamSpec>& specs,
                                 const std::function<bool(const std::string&)>& keep = {});
// The part (Parts bit) a parameter belongs to, from its name prefix.
unsigned part_of(const std::string& name);

// Writes the tensors of `specs` (order kept) as a safetensors file with `metadata` strings.
Status save_safetensors(const std::filesystem::path& file, const Weights& w,
                        const std::vector<ParamSpec>& specs,
                        const std::map<std::string, std::string>& metadata);

}  // namespace h3pipe::model
