// libFuzzer target for the cluster config parser: arbitrary bytes as the config file
// (config::load_file's reader: strict, depth-bounded), then config::parse.  Nothing may crash,
// throw, or trip ASan/UBSan; a refused config lists one problem per line, each starting with its
// JSON path; an accepted one keeps the invariants the services rely on.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/config/config.h"
#include "common/core/json_reader.h"

using namespace h3pipe;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // As config::load_file reads it: strictly, depth and size bounded (issue #35 D2); what it
  // refuses is config.json with a one-line reason.
  std::string why;
  auto parsed =
      json_reader::parse_strict(std::string_view(reinterpret_cast<const char*>(data), size), &why);
  if (!parsed) {
    if (why.empty() || why.find('\n') != std::string::npos) std::abort();
    return 0;
  }
  const nlohmann::json& j = *parsed;
  auto c = config::parse(j, "/nonexistent/h3pipe-fuzz");
  if (!c.ok()) {
    const std::string& m = c.error().message;
    if (m.empty() || c.error().code != errc::config::kInvalid) std::abort();
    std::size_t start = 0;
    while (start < m.size()) {  // every line: "/json/path: what"
      std::size_t end = m.find('\n', start);
      if (end == std::string::npos) end = m.size();
      if (m[start] != '/' || m.find(": ", start) >= end) std::abort();
      start = end + 1;
    }
    return 0;
  }
  std::set<std::string> hosts, pools;
  for (const auto& h : c->hosts)
    if (!hosts.insert(h.name).second || h.name.empty()) std::abort();
  for (const auto& p : c->pools) {
    if (!pools.insert(p.name).second || !hosts.count(p.host)) std::abort();
    if (!p.shares_gpus_with.empty() && !c->find_pool(p.shares_gpus_with)) std::abort();
    const auto& rt = c->runtime_for(p);
    if (rt.name != "sim" && rt.name != "builtin" && rt.name != "exec" && rt.name != "comfyui")
      std::abort();
    for (const auto& [cls, prof] : p.profiles) {
      double e = prof.expected();
      if (!std::isfinite(e) || e < 0) std::abort();
    }
  }
  if (c->pools_on("", config::StageKind::kSample).empty() ||
      c->pools_on("", config::StageKind::kDecode).empty())
    std::abort();
  if (c->queue.renew_ms * 2 > c->queue.lease_ms || c->queue.max_deliveries < 1) std::abort();
  if (c->limits.max_width < 16 || c->limits.max_height < 16) std::abort();
  (void)c->class_of(256, 256, 49, 6);
  // The effective config is logged at start: it must serialise.
  try {
    (void)config::to_json(*c).dump();
  } catch (const nlohmann::json::exception&) {
    std::abort();
  }
  return 0;
}
