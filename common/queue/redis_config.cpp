#include "common/queue/redis_config.h"

#include <cstdlib>

namespace h3pipe::queue {

void apply_topology(const config::Redis& r, RedisAddress& a) {
  a.host = r.host;
  a.port = r.port;
  a.sentinels.clear();
  for (const auto& s : r.sentinel.addresses) {
    const auto colon = s.rfind(':');
    if (colon == std::string::npos) continue;  // refused at config load
    a.sentinels.push_back({s.substr(0, colon), std::atoi(s.c_str() + colon + 1)});
  }
  a.sentinel_master = r.sentinel.master;
  a.sentinel_user = r.sentinel.user;
  if (!r.sentinel.password_file.empty()) {
    config::Redis pf;
    pf.password_file = r.sentinel.password_file;
    a.sentinel_password = pf.password();
  }
  a.wait_replicas = r.wait_replicas;
  a.wait_timeout_ms = r.wait_timeout_ms;
}

bool set_address(RedisAddress& a, std::string_view v) {
  const auto colon = v.rfind(':');
  if (!is_unix_socket(v) && (colon == std::string_view::npos || colon == 0)) return false;
  const bool socket = is_unix_socket(v);
  a.host = std::string(socket ? v : v.substr(0, colon));
  a.port = socket ? 0 : std::atoi(std::string(v.substr(colon + 1)).c_str());
  a.sentinels.clear();
  return true;
}

RedisAddress address_of(const config::Redis& r) {
  RedisAddress a;
  a.user = r.user;
  a.password = r.password();
  apply_topology(r, a);
  return a;
}

}  // namespace h3pipe::queue
