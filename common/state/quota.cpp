#include "common/state/quota.h"

#include <nlohmann/json.hpp>

#include "common/core/json_parse.h"
#include "common/queue/keys.h"
#include "common/queue/queue.h"

namespace h3pipe::state {

Result<long long> user_jobs_in_flight(queue::Redis& redis, const std::vector<std::string>& streams,
                                      const std::string& user) {
  long long n = 0;
  for (const auto& s : streams) {
    auto es = queue::read_range(redis, s, "-", "+");
    if (!es.ok()) return es.error();
    for (const auto& e : *es)
      if (auto it = e.fields.find("user"); it != e.fields.end() && it->second == user) ++n;
  }
  auto subs = queue::read_range(redis, keys::submit(), "-", "+");
  if (!subs.ok()) return subs.error();
  for (const auto& e : *subs) {
    auto it = e.fields.find("spec");
    if (it == e.fields.end()) continue;
    std::string why;
    const auto j = json_reader::parse_limited(it->second, {}, &why).value_or(nlohmann::json());
    if (j.is_object() && j.value("user", std::string()) == user) ++n;
  }
  return n;
}

}  // namespace h3pipe::state
