#pragma once
// Stage profiles that make a batch run in no time (issue #34 P11): a pool whose runtime is `sim`
// runs each stage for its profile's time (profile_for(class): the class's own, else "default"),
// times time_scale, and for 0 s when it has none.  `h3pipe run` warns before it submits a batch
// whose classes meet such a pool, with the same profiles and classes the planner reads.
#include <set>
#include <string>

#include "common/config/config.h"

namespace h3pipe::schedule {

// "" when every sim pool has a non-zero profile for every class in `classes`; else one line
// naming the config, the classes and the pools, e.g. `config c.json: the sim runtime runs job
// class "default" in 0 s on pools enc, s0, dec (no profile for the class, none "default"): add
// profiles (docs/planner.md) or learn them (h3pipe profile learn)`.
std::string zero_profile_warning(const config::Cluster& c, const std::set<std::string>& classes,
                                 const std::string& config_name);

}  // namespace h3pipe::schedule
