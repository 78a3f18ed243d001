#include "common/runtime/settings_check.h"

#include <array>
#include <map>
#include <utility>
#include <vector>

#include "common/core/json_reader.h"
#include "common/runtime/builtin_runtime.h"
#include "common/runtime/comfyui_settings.h"
#include "common/runtime/exec_runtime.h"
#include "common/runtime/sim_runtime.h"
#include "common/runtime/stage_output.h"

namespace h3pipe::runtime {
namespace {

using Check = void (*)(const FactoryArgs&, config::StageKind, bool host, config::Errors&);

void check_comfyui(const FactoryArgs& a, config::StageKind stage, bool host, config::Errors& e) {
  (void)comfyui::read_settings(a, stage, host, e);
}

// By runtime name, as registry.cpp builds them (config.cpp refuses any other name).
const std::array<std::pair<std::string_view, Check>, 4> kChecks = {{
    {"sim", check_sim_settings},
    {"builtin", check_builtin_settings},
    {"exec", check_exec_settings},
    {"comfyui", check_comfyui},
}};

}  // namespace

Status check_settings(const config::Cluster& c, SettingsScope scope, std::string_view host,
                      std::string_view pool) {
  // One check per settings object and stage: a /stages/<stage> runtime shared by several pools
  // is reported once, naming them all.
  struct Use {
    const config::Pool* first = nullptr;
    std::vector<std::string> pools;
  };
  std::map<std::pair<std::string, config::StageKind>, Use> uses;
  std::vector<std::pair<std::string, config::StageKind>> order;
  for (const auto& p : c.pools) {
    if ((!host.empty() && p.host != host) || (!pool.empty() && p.name != pool)) continue;
    FactoryArgs a{&c, &p, &c.runtime_for(p).settings};
    auto key = std::make_pair(settings_path(a, p.stage), p.stage);
    auto [it, fresh] = uses.try_emplace(key);
    if (fresh) {
      it->second.first = &p;
      order.push_back(key);
    }
    it->second.pools.push_back(p.name);
  }
  config::Errors all;
  for (const auto& key : order) {
    const Use& u = uses[key];
    const config::RuntimeRef& rt = c.runtime_for(*u.first);
    FactoryArgs a{&c, u.first, &rt.settings};
    config::Errors e;
    for (const auto& [name, check] : kChecks)
      if (name == rt.name) check(a, u.first->stage, scope == SettingsScope::kHost, e);
    std::string pools;
    for (const auto& n : u.pools) pools += (pools.empty() ? "" : ", ") + n;
    for (const auto& line : e.list())
      all.add(line.substr(0, line.find(": ")),
              fmt::format("{} (runtime {}; pool{} {})", line.substr(line.find(": ") + 2), rt.name,
                          u.pools.size() > 1 ? "s" : "", pools));
  }
  if (all.empty()) return {};
  return make_error(errc::runtime::kSettings, "{}", all.joined());
}

Result<config::Cluster> load_config(const std::filesystem::path& file) {
  auto c = config::load_file(file);
  if (!c.ok()) return c;
  if (auto s = check_settings(*c, SettingsScope::kConfig); !s.ok())
    return make_error(errc::config::kInvalid, "{}:\n{}", file.string(), s.error().message);
  return c;
}

}  // namespace h3pipe::runtime
