// service.ready and comfyui.up rows: the checks that ask a process over HTTP.
#include <nlohmann/json.hpp>

#include "common/core/json_parse.h"
#include "common/preflight/checks.h"
#include "common/preflight/http_get.h"

namespace h3pipe::preflight {
namespace {

// Where to reach a service of this machine: its host's bind address unless that is a wildcard.
std::string probe_address(const config::Host& h, const RunFile& rf) {
  const std::string& b = rf.bind.empty() ? h.bind : rf.bind;
  if (b.empty() || b == "0.0.0.0" || b == "::") return "127.0.0.1";
  return b;
}

std::string start_hint(const std::string& host) {
  return fmt::format(
      "start it: `h3pipe start --host {}` (or `docker compose --profile <role> up -d` "
      "on that host); its log is under <state_dir>/logs",
      host);
}

}  // namespace

void check_services(const config::Cluster& c, const Options& o, const Scope& s, Report& rep) {
  auto services = expected_services(c);
  for (const config::Host* h : s.checked) {
    for (const auto& e : services) {
      if (e.host != h->name) continue;
      std::string target = fmt::format("{}-{}@{}", e.service, e.instance, e.host);
      auto path = run_file_path(c, e.service, e.instance);
      auto rf = read_run_file(path);
      if (!rf.ok()) {
        rep.fail("service.ready", target, rf.error().message, start_hint(e.host));
        continue;
      }
      if (rf->health_port <= 0) {
        rep.fail("service.ready", target, fmt::format("{} names no health_port", path.string()),
                 "restart the service; the run file is written by h3pipe start");
        continue;
      }
      std::string url = fmt::format("http://{}:{}/readyz", probe_address(*h, *rf), rf->health_port);
      auto resp = http_get(url, o.timeout);
      if (!resp.ok()) {
        rep.fail(
            "service.ready", target,
            fmt::format("pid {}: no answer at {} ({}); the process died or the run file is stale",
                        rf->pid, url, resp.error().message),
            start_hint(e.host));
      } else if (resp->status == 200) {
        rep.pass("service.ready", target,
                 fmt::format("ready (pid {}, health :{}, metrics :{})", rf->pid, rf->health_port,
                             rf->metrics_port));
      } else {
        rep.fail(
            "service.ready", target,
            fmt::format("pid {} runs but is not ready: {} answered {}", rf->pid, url, resp->status),
            "read its log; a service turns ready once Redis, its runtime (ComfyUI, weights) and, "
            "for transfer, its peers answer");
      }
    }
  }
  for (const config::Host* h : s.elsewhere) {
    int n = 0;
    for (const auto& e : services) n += e.host == h->name;
    if (n == 0) continue;
    rep.add(
        "service.ready", fmt::format("{} service(s)@{}", n, h->name), Outcome::kSkip,
        fmt::format("another machine: run `h3pipe preflight --host {}` there ({} runs it over SSH)",
                    h->name, "h3pipe start --all"));
  }
}

void check_comfyui(const config::Cluster& c, const Options& o, const Scope& s, Report& rep) {
  for (const config::Host* h : s.checked) {
    for (const config::Pool* p : c.pools_on(h->name)) {
      const auto& rt = c.runtime_for(*p);
      if (rt.name != "comfyui") continue;
      std::string target = fmt::format("{}@{}", p->name, h->name);
      auto it = rt.settings.find("url");
      if (it == rt.settings.end() || !it->is_string() || it->get<std::string>().empty()) {
        rep.fail("comfyui.up", target, "runtime comfyui without settings.url",
                 "set pools[].runtime.settings.url (or stages.<stage>.runtime.settings.url), e.g. "
                 "http://127.0.0.1:8188");
        continue;
      }
      std::string base = it->get<std::string>();
      while (!base.empty() && base.back() == '/') base.pop_back();
      std::string url = base + "/system_stats";
      auto resp = http_get(url, o.timeout);
      if (!resp.ok()) {
        rep.fail(
            "comfyui.up", target, resp.error().message,
            "start ComfyUI on that address (the seeds' decode instance listens on 8192), or fix "
            "settings.url");
      } else if (resp->status != 200) {
        rep.fail("comfyui.up", target, fmt::format("{} answered {}", url, resp->status),
                 "check ComfyUI's log; /system_stats must answer 200");
      } else {
        std::string detail = url + " answered 200";
        std::string why;
        auto parsed = json_reader::parse_limited(resp->body, {}, &why);
        const nlohmann::json j =
            parsed ? std::move(*parsed) : nlohmann::json(nlohmann::json::value_t::discarded);
        if (!j.is_discarded() && j.contains("system") && j["system"].contains("comfyui_version"))
          detail += ", ComfyUI " + j["system"]["comfyui_version"].dump();
        if (!j.is_discarded() && j.contains("devices") && j["devices"].is_array())
          detail += fmt::format(", {} device(s)", j["devices"].size());
        rep.pass("comfyui.up", target, detail);
      }
    }
  }
}

}  // namespace h3pipe::preflight
