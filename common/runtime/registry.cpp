// Runtimes by name: the one table of runtime kinds (kinds.h; docs/design.md, convention 15).
#include <array>

#include "common/config/runtime_names.h"
#include "common/runtime/builtin_runtime.h"
#include "common/runtime/comfyui_runtime.h"
#include "common/runtime/comfyui_settings.h"
#include "common/runtime/exec_runtime.h"
#include "common/runtime/kinds.h"
#include "common/runtime/runtime.h"
#include "common/runtime/sim_runtime.h"

namespace h3pipe::runtime {
namespace {

void check_comfyui_settings(const FactoryArgs& a, config::StageKind stage, bool host,
                            config::Errors& e) {
  (void)comfyui::read_settings(a, stage, host, e);
}

constexpr auto kKinds = std::to_array<RuntimeKind>({
    {"sim", make_sim_encode, make_sim_sample, make_sim_decode, check_sim_settings},
    {"builtin", make_builtin_encode, make_builtin_sample, make_builtin_decode,
     check_builtin_settings},
    {"exec", make_exec_encode, make_exec_sample, make_exec_decode, check_exec_settings},
    {"comfyui", make_comfyui_encode, make_comfyui_sample, make_comfyui_decode,
     check_comfyui_settings},
});

// The config accepts exactly the names built here, in the same order (its error text lists them).
constexpr bool names_are_the_configs() {
  if (kKinds.size() != config::kRuntimeNames.size()) return false;
  for (std::size_t i = 0; i < kKinds.size(); ++i)
    if (kKinds[i].name != config::kRuntimeNames[i]) return false;
  return true;
}
static_assert(names_are_the_configs(),
              "the runtime kinds must be config::kRuntimeNames (common/config/runtime_names.h)");

template <typename T>
Result<std::unique_ptr<T>> make(Factory<T> RuntimeKind::*factory, std::string_view name,
                                const FactoryArgs& a, const char* stage) {
  if (const RuntimeKind* k = find_runtime_kind(name)) return (k->*factory)(a);
  std::string known;
  for (const auto& k : kKinds) known += (known.empty() ? "" : ", ") + std::string(k.name);
  return make_error(errc::runtime::kUnknown,
                    "stage {}: runtime \"{}\" is not available in this build (known: {})", stage,
                    name, known);
}

}  // namespace

std::span<const RuntimeKind> runtime_kinds() {
  return kKinds;
}

const RuntimeKind* find_runtime_kind(std::string_view name) {
  for (const auto& k : kKinds)
    if (k.name == name) return &k;
  return nullptr;
}

Result<std::unique_ptr<EncodeRuntime>> make_encode(std::string_view n, const FactoryArgs& a) {
  return make(&RuntimeKind::encode, n, a, "encode");
}
Result<std::unique_ptr<SampleRuntime>> make_sample(std::string_view n, const FactoryArgs& a) {
  return make(&RuntimeKind::sample, n, a, "sample");
}
Result<std::unique_ptr<DecodeRuntime>> make_decode(std::string_view n, const FactoryArgs& a) {
  return make(&RuntimeKind::decode, n, a, "decode");
}

}  // namespace h3pipe::runtime
