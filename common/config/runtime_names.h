#pragma once
// The runtimes a stage can run (docs/design.md "Runtimes"): the one list of their names.  The
// config table's enum for runtime.name (fields.cpp, docs/config.md, values.schema.json) is this
// list; the runtime kinds (common/runtime/kinds.h: each name's factories and settings check, read
// by the registry and the settings checks) are these names in this order, a static_assert in
// common/runtime/registry.cpp.
#include <array>
#include <string_view>

namespace h3pipe::config {

inline constexpr std::array<std::string_view, 4> kRuntimeNames = {"sim", "builtin", "exec",
                                                                  "comfyui"};

}  // namespace h3pipe::config
