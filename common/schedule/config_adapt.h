#pragma once
// `h3pipe config-adapt HOST_MAP.json -o local.json`: from a short host map (hosts, addresses or
// SSH aliases, GPU models and counts, roles, links) write the full cluster config, with default
// stage profiles from the GPU table (configs/gpus.json).  docs/planner.md documents the host map.
//
// Errors name the host map field (JSON pointer) and say what was expected; every problem is
// reported at once, like the config loader.
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "common/core/result.h"
#include "common/schedule/gpu_table.h"

namespace h3pipe::schedule {

struct ConfigAdaptArgs {
  std::string host_map;   // positional HOST_MAP.json
  std::string output;     // -o FILE; empty: print the config on `out`
  std::string gpu_table;  // --gpus FILE; empty: the compiled-in configs/gpus.json
  bool force = false;     // --force: overwrite an existing output file
};

// Exit codes: 0 written; 1 the host map (or GPU table) has errors, listed on `err`; 2 bad
// arguments or an output that exists without --force.
int run_config_adapt(const ConfigAdaptArgs& args, std::ostream& out, std::ostream& err);

struct Adapted {
  nlohmann::json config;           // loadable by config::parse
  std::vector<std::string> notes;  // where each default came from (printed by the command)
};

// The host map -> cluster config transformation itself (pure).
Result<Adapted> adapt_host_map(const nlohmann::json& host_map, const GpuTable& gpus);

}  // namespace h3pipe::schedule
