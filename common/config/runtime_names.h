#pragma once
// The runtimes a stage can run (docs/design.md "Runtimes"): the one list of their names.  The
// config table's enum for runtime.name (fields.cpp, docs/config.md, values.schema.json) is this
// list; the runtime registry (common/runtime/registry.cpp) and the settings checks
// (common/runtime/settings_check.cpp) have one entry per name here.
#include <array>
#include <string_view>

namespace h3pipe::config {

inline constexpr std::array<std::string_view, 4> kRuntimeNames = {"sim", "builtin", "exec",
                                                                  "comfyui"};

}  // namespace h3pipe::config
