#pragma once
// The runtimes by name (docs/design.md "Runtimes", convention 15): one entry per runtime kind,
// naming its three stage factories (one StageRuntime each) and its settings check.  The registry
// (make_runtime in runtime.h) and the settings checks (settings_check.h) both read this table; its
// names are config::kRuntimeNames (common/config/runtime_names.h, the config's enum for
// runtime.name) in the same order, which registry.cpp checks at compile time.  A new runtime is
// one entry in the table (registry.cpp) and its name in that list.
#include <memory>
#include <span>
#include <string_view>

#include "common/config/config.h"
#include "common/core/json_reader.h"
#include "common/core/result.h"
#include "common/runtime/runtime.h"

namespace h3pipe::runtime {

using Factory = Result<std::unique_ptr<StageRuntime>> (*)(const FactoryArgs&);

struct RuntimeKind {
  std::string_view name;
  Factory encode = nullptr;
  Factory sample = nullptr;
  Factory decode = nullptr;
  // Every problem of a pool's settings for `stage` into `e`, each under its settings path; host
  // false: what the config says (SettingsScope::kConfig), true: also what the machine must
  // provide (kHost).  The same code the factories run.
  void (*check_settings)(const FactoryArgs& a, config::StageKind stage, bool host,
                         config::Errors& e) = nullptr;
};

// Every kind, in config::kRuntimeNames order.
std::span<const RuntimeKind> runtime_kinds();
// The kind called `name`; nullptr for any other (the config loader refuses those).
const RuntimeKind* find_runtime_kind(std::string_view name);

}  // namespace h3pipe::runtime
