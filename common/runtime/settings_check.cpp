#include "common/runtime/settings_check.h"

#include <map>
#include <utility>
#include <vector>

#include "common/core/json_reader.h"
#include "common/runtime/kinds.h"
#include "common/runtime/stage_output.h"

namespace h3pipe::runtime {

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
    // By runtime kind (kinds.h), as the registry builds them (config.cpp refuses other names).
    if (const RuntimeKind* k = find_runtime_kind(rt.name))
      k->check_settings(a, u.first->stage, scope == SettingsScope::kHost, e);
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
