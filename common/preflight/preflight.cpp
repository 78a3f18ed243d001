#include "common/preflight/preflight.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/preflight/checks.h"

namespace h3pipe::preflight {
namespace fs = std::filesystem;

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kPass:
      return "PASS";
    case Outcome::kWarn:
      return "WARN";
    case Outcome::kFail:
      return "FAIL";
    case Outcome::kSkip:
      return "SKIP";
  }
  return "?";
}

fs::path run_file_path(const config::Cluster& c, const std::string& service,
                       const std::string& instance) {
  return c.state_dir / "run" / (service + "-" + instance + ".json");
}

Result<RunFile> read_run_file(const fs::path& file) {
  std::ifstream in(file);
  if (!in)
    return make_error(errc::preflight::kRunFile, "not running here: no run file {}", file.string());
  try {
    std::stringstream ss;
    ss << in.rdbuf();
    std::string why;
    auto parsed = json_reader::parse_limited(ss.str(), {kMaxSmallFileBytes}, &why);
    if (!parsed)
      return make_error(errc::preflight::kRunFile, "{}: not a run file: {}", file.string(), why);
    const nlohmann::json& j = *parsed;
    RunFile r;
    r.pid = j.value("pid", 0LL);
    r.metrics_port = j.value("metrics_port", 0);
    r.health_port = j.value("health_port", 0);
    r.host = j.value("host", std::string());
    r.bind = j.value("bind", std::string());
    return r;
  } catch (const std::exception& e) {
    return make_error(errc::preflight::kRunFile, "{}: not a run file: {}", file.string(), e.what());
  }
}

std::vector<ExpectedService> expected_services(const config::Cluster& c) {
  static const std::map<config::StageKind, std::string> kService = {
      {config::StageKind::kEncode, "encoder"},
      {config::StageKind::kSample, "sampler"},
      {config::StageKind::kDecode, "decoder"}};
  std::vector<ExpectedService> out;
  for (const auto& p : c.pools) out.push_back({kService.at(p.stage), p.name, p.host});
  // One transfer service per host that samples or decodes, when latents cross hosts.
  if (c.hosts.size() > 1) {
    for (const auto& h : c.hosts) {
      bool moves = !c.pools_on(h.name, config::StageKind::kSample).empty() ||
                   !c.pools_on(h.name, config::StageKind::kDecode).empty();
      if (moves) out.push_back({"transfer", h.name, h.name});
    }
  }
  return out;
}

namespace {

std::set<std::string> local_addresses() {
  std::set<std::string> out = {"127.0.0.1", "::1", "localhost", "0.0.0.0", "::"};
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (i->ifa_addr->sa_family == AF_INET)
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf,
                    sizeof buf);
      else if (i->ifa_addr->sa_family == AF_INET6)
        ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf,
                    sizeof buf);
      if (buf[0]) out.insert(buf);
    }
    ::freeifaddrs(ifs);
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) out.insert(host);
  return out;
}

Scope make_scope(const config::Cluster& c, const Options& o, Report& rep) {
  Scope s;
  if (!o.host_filter.empty()) {
    const config::Host* h = c.find_host(o.host_filter);
    if (!h) {
      std::string names;
      for (const auto& x : c.hosts) names += (names.empty() ? "" : ", ") + x.name;
      rep.fail("config.host", o.host_filter, "no host of that name in the config",
               "pass one of: " + names);
      return s;
    }
    rep.pass("config.host", h->name, fmt::format("checking host {} ({})", h->name, h->address));
    s.checked.push_back(h);
    for (const auto& x : c.hosts)
      if (&x != h) s.elsewhere.push_back(&x);
    return s;
  }
  for (const auto& h : c.hosts) {
    bool local = c.hosts.size() == 1 || (o.is_local ? o.is_local(h) : is_local_host(h));
    (local ? s.checked : s.elsewhere).push_back(&h);
  }
  return s;
}

}  // namespace

bool is_local_host(const config::Host& h) {
  static const std::set<std::string> mine = local_addresses();
  // A wildcard bind says nothing about which machine this is; the address does.
  return mine.count(h.address) || mine.count(h.name) ||
         (h.bind != "0.0.0.0" && h.bind != "::" && !h.bind.empty() && mine.count(h.bind) &&
          h.bind != "127.0.0.1");
}

std::vector<CheckResult> run_checks(const config::Cluster& c, const Options& o) {
  Report rep;
  Scope scope = make_scope(c, o, rep);
  check_sentinels(c, o, rep);
  check_redis(c, o, rep);
  check_services(c, o, scope, rep);
  check_heartbeats(c, o, scope, rep);
  check_gpus(c, o, scope, rep);
  check_disk(c, o, rep);
  check_keys(c, o, scope, rep);
  check_api_tls(c, scope, rep);
  check_comfyui(c, o, scope, rep);
  check_comfyui_templates(c, o, scope, rep);
  check_runtime_settings(c, o, scope, rep);
  return rep.take();
}

void print_report(const config::Cluster& c, const Options& o, const std::vector<CheckResult>& rows,
                  std::ostream& out) {
  std::size_t wc = 5, wt = 6;
  for (const auto& r : rows) {
    wc = std::max(wc, r.check.size());
    wt = std::max(wt, std::min<std::size_t>(r.target.size(), 48));
  }
  out << fmt::format("h3pipe preflight: cluster \"{}\", {}\n", c.name,
                     o.host_filter.empty() ? "hosts of this machine" : "host " + o.host_filter);
  out << fmt::format("{:<8}{:<{}}  {:<{}}  {}\n", "RESULT", "CHECK", wc, "TARGET", wt, "DETAIL");
  int n[4] = {0, 0, 0, 0};
  for (const auto& r : rows) {
    ++n[static_cast<int>(r.outcome)];
    out << fmt::format("{:<8}{:<{}}  {:<{}}  {}\n", outcome_name(r.outcome), r.check, wc, r.target,
                       wt, r.detail);
  }
  bool advice = false;
  for (const auto& r : rows) {
    if (r.outcome != Outcome::kFail && r.outcome != Outcome::kWarn) continue;
    if (!advice) out << "\nWhat to do:\n";
    advice = true;
    out << fmt::format("  {} {} ({}): {}\n", outcome_name(r.outcome), r.check, r.target, r.fix);
  }
  out << fmt::format("\npreflight: {} passed, {} warning(s), {} failed, {} skipped: {}\n", n[0],
                     n[1], n[2], n[3], n[2] ? "NOT READY" : "ready");
}

int preflight_main(const config::Cluster& c, const Options& o, std::ostream& out) {
  auto rows = run_checks(c, o);
  print_report(c, o, rows, out);
  for (const auto& r : rows)
    if (r.outcome == Outcome::kFail) return 1;
  return 0;
}

int preflight_main(const config::Cluster& c, const std::string& host_filter, std::ostream& out) {
  Options o;
  o.host_filter = host_filter;
  return preflight_main(c, o, out);
}

}  // namespace h3pipe::preflight
