// runtime.settings rows: each checked host's pools' runtime settings, by the checks their
// factories run at service start (runtime::check_settings, host scope).
#include "common/preflight/checks.h"
#include "common/runtime/settings_check.h"

namespace h3pipe::preflight {

void check_runtime_settings(const config::Cluster& c, const Options&, const Scope& s, Report& rep) {
  for (const config::Host* h : s.checked) {
    if (c.pools_on(h->name).empty()) continue;
    auto st = runtime::check_settings(c, runtime::SettingsScope::kHost, h->name);
    if (st.ok()) {
      rep.pass("runtime.settings", h->name,
               fmt::format("the runtime settings of {} pool(s) are valid here",
                           c.pools_on(h->name).size()));
      continue;
    }
    const std::string& m = st.error().message;
    for (std::size_t at = 0; at < m.size();) {
      std::size_t end = m.find('\n', at);
      if (end == std::string::npos) end = m.size();
      rep.fail("runtime.settings", h->name, m.substr(at, end - at),
               "fix the setting named (h3pipe start and the service refuse the same)");
      at = end + 1;
    }
  }
  for (const config::Host* h : s.elsewhere)
    if (!c.pools_on(h->name).empty())
      rep.add("runtime.settings", h->name, Outcome::kSkip,
              fmt::format("another machine: run `h3pipe preflight --host {}` there", h->name));
}

}  // namespace h3pipe::preflight
