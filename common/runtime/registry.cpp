// Runtimes by name: one declarative table per stage (docs/design.md, convention 15).
#include <array>

#include "common/runtime/builtin_runtime.h"
#include "common/runtime/comfyui_runtime.h"
#include "common/runtime/exec_runtime.h"
#include "common/runtime/runtime.h"
#include "common/runtime/sim_runtime.h"

namespace h3pipe::runtime {
namespace {

template <typename T>
struct Entry {
  std::string_view name;
  Result<std::unique_ptr<T>> (*make)(const FactoryArgs&);
};

const std::array<Entry<EncodeRuntime>, 4> kEncode = {{{"sim", make_sim_encode},
                                                      {"builtin", make_builtin_encode},
                                                      {"exec", make_exec_encode},
                                                      {"comfyui", make_comfyui_encode}}};
const std::array<Entry<SampleRuntime>, 4> kSample = {{{"sim", make_sim_sample},
                                                      {"builtin", make_builtin_sample},
                                                      {"exec", make_exec_sample},
                                                      {"comfyui", make_comfyui_sample}}};
const std::array<Entry<DecodeRuntime>, 4> kDecode = {{{"sim", make_sim_decode},
                                                      {"builtin", make_builtin_decode},
                                                      {"exec", make_exec_decode},
                                                      {"comfyui", make_comfyui_decode}}};

template <typename T, std::size_t N>
Result<std::unique_ptr<T>> make(const std::array<Entry<T>, N>& table, std::string_view name,
                                const FactoryArgs& a, const char* stage) {
  for (const auto& e : table)
    if (e.name == name) return e.make(a);
  std::string known;
  for (const auto& e : table) known += (known.empty() ? "" : ", ") + std::string(e.name);
  return make_error(errc::runtime::kUnknown,
                    "stage {}: runtime \"{}\" is not available in this build (known: {})", stage,
                    name, known);
}

}  // namespace

Result<std::unique_ptr<EncodeRuntime>> make_encode(std::string_view n, const FactoryArgs& a) {
  return make(kEncode, n, a, "encode");
}
Result<std::unique_ptr<SampleRuntime>> make_sample(std::string_view n, const FactoryArgs& a) {
  return make(kSample, n, a, "sample");
}
Result<std::unique_ptr<DecodeRuntime>> make_decode(std::string_view n, const FactoryArgs& a) {
  return make(kDecode, n, a, "decode");
}

}  // namespace h3pipe::runtime
