#pragma once
// The dispatch policy: declared and parsed by the config (common/config/dispatch_policy.h), which
// stores it in Cluster::dispatch; the dispatch module, the planner and the simulator name it here.
#include "common/config/dispatch_policy.h"

namespace h3pipe::dispatch {

using Policy = config::DispatchPolicy;
using config::parse_policy;
using config::policy_name;

}  // namespace h3pipe::dispatch
