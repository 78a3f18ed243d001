#include "common/schedule/profile_check.h"

#include <fmt/format.h>

#include <vector>

namespace h3pipe::schedule {

std::string zero_profile_warning(const config::Cluster& c, const std::set<std::string>& classes,
                                 const std::string& config_name) {
  const double scale = c.time_scale > 0 ? c.time_scale : 1.0;
  std::vector<std::string> zero_classes;
  std::set<std::string> pools, why;
  for (const auto& cls : classes) {
    bool any = false;
    for (const auto& p : c.pools) {
      if (c.runtime_for(p).name != "sim") continue;
      const config::Profile* prof = p.profile_for(cls);
      if (prof && prof->expected() * scale > 0) continue;
      any = true;
      pools.insert(p.name);
      why.insert(prof ? "profile of 0 s" : "no profile for the class, none \"default\"");
    }
    if (any) zero_classes.push_back(fmt::format("\"{}\"", cls));
  }
  if (zero_classes.empty()) return "";
  std::string reasons;
  for (const auto& w : why) reasons += (reasons.empty() ? "" : "; ") + w;
  std::string pool_list;
  for (const auto& p : pools) pool_list += (pool_list.empty() ? "" : ", ") + p;
  std::string class_list;
  for (const auto& k : zero_classes) class_list += (class_list.empty() ? "" : ", ") + k;
  return fmt::format(
      "config {}: the sim runtime runs job class{} {} in 0 s on pool{} {} ({}): add profiles "
      "(docs/planner.md) or learn them (h3pipe profile learn)",
      config_name, zero_classes.size() > 1 ? "es" : "", class_list, pools.size() > 1 ? "s" : "",
      pool_list, reasons);
}

}  // namespace h3pipe::schedule
