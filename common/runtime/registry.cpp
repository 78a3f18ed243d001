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

}  // namespace

std::span<const RuntimeKind> runtime_kinds() {
  return kKinds;
}

const RuntimeKind* find_runtime_kind(std::string_view name) {
  for (const auto& k : kKinds)
    if (k.name == name) return &k;
  return nullptr;
}

Result<std::unique_ptr<StageRuntime>> make_runtime(config::StageKind stage, std::string_view name,
                                                   const FactoryArgs& a) {
  if (const RuntimeKind* k = find_runtime_kind(name)) {
    switch (stage) {
      case config::StageKind::kEncode:
        return k->encode(a);
      case config::StageKind::kSample:
        return k->sample(a);
      case config::StageKind::kDecode:
        return k->decode(a);
    }
  }
  std::string known;
  for (const auto& k : kKinds) known += (known.empty() ? "" : ", ") + std::string(k.name);
  return make_error(errc::runtime::kUnknown,
                    "stage {}: runtime \"{}\" is not available in this build (known: {})",
                    config::stage_name(stage), name, known);
}

}  // namespace h3pipe::runtime
