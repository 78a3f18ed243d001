#pragma once
// Every pool's runtime settings, checked by the same code its runtime's factory runs, before any
// service starts (issue #14: `plan`, `preflight`, `start` and the services give one error).
//
//   SettingsScope::kConfig  what the config itself says: unknown keys (naming the known ones),
//                           types, ranges, exec placeholders, inline ComfyUI workflows.  Checked
//                           wherever a config is loaded (load_config below: the CLI, the planner,
//                           the services).
//   SettingsScope::kHost    also what the machine that runs the pool must provide: an exec
//                           program on PATH, cwd, ComfyUI workflow files and folders, builtin
//                           weights.  Checked by `preflight` (row runtime.settings), by `start`
//                           for the pools it starts, and by each service for its own pool.
//
// One validator per runtime kind (RuntimeKind::check_settings, kinds.h).  Each problem is one line
// "SETTINGS_PATH: what (runtime R; pool P[, Q])": settings given once under /stages/<stage> are
// checked once and name every pool that uses them.
#include <filesystem>
#include <string_view>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::runtime {

enum class SettingsScope { kConfig, kHost };

// Error "runtime.settings" listing every problem, one per line.  host, pool: only the pools of that
// host, only that pool (empty: every one).
Status check_settings(const config::Cluster& cluster, SettingsScope scope,
                      std::string_view host = {}, std::string_view pool = {});

// config::load_file, then check_settings(kConfig): error "config.invalid" as "FILE:\nlines", like
// every other config error.
Result<config::Cluster> load_config(const std::filesystem::path& file);

}  // namespace h3pipe::runtime
