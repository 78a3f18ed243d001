#include "common/schedule/config_adapt.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "common/artifacts/artifacts.h"
#include "common/config/config.h"
#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/core/json_reader.h"
#include "common/dispatch/policy.h"

namespace h3pipe::schedule {
namespace {

using config::Errors;
using config::ObjectReader;
using config::StageKind;
using ojson = nlohmann::ordered_json;

struct GpuEntry {
  std::string model;
  int count = 0;
  const GpuInfo* info = nullptr;
};

struct HostIn {
  std::string name, address, ssh, bind;
  int transfer_port = 0;
  // h3pipe-api on this host (docs/api.md): passed through when given; loopback otherwise.
  std::string api_bind, api_tls_cert, api_tls_key;
  int api_port = 0, api_metrics_port = 0;
  std::set<std::string> roles;
  std::vector<GpuEntry> gpus;
  int gpus_per_pool = 0;
  ojson runtime;  // null: the stage default
  std::string path;
};

double round2(double x) {
  return std::round(x * 100) / 100;
}

ojson runtime_json(const nlohmann::json& v, const std::string& path, Errors& e) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) {
    e.add(path, "expected {\"name\": \"sim|builtin|exec|comfyui\", \"settings\": {...}}");
    return nullptr;
  }
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "name" && it.key() != "settings") e.add(path + "/" + it.key(), "unknown key");
  return ojson{{"name", v["name"]}, {"settings", v.value("settings", nlohmann::json::object())}};
}

void read_gpus(const nlohmann::json& v, const std::string& path, const GpuTable& t, HostIn& h,
               Errors& e) {
  std::vector<const nlohmann::json*> items;
  if (v.is_object())
    items.push_back(&v);  // one model: {"model": ..., "count": ...}
  else if (v.is_array())
    for (const auto& x : v) items.push_back(&x);
  else
    return e.add(path, "expected [{\"model\": \"T10\", \"count\": 4}, ...]");
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::string p = v.is_array() ? fmt::format("{}/{}", path, i) : path;
    ObjectReader g(*items[i], p, e);
    GpuEntry entry;
    g.get("model", entry.model, true);
    g.get("count", entry.count, 1, 1024, true);
    if (!entry.model.empty()) {
      entry.info = t.find(entry.model);
      if (!entry.info)
        e.add(p + "/model",
              fmt::format(
                  "unknown GPU model \"{}\"; known: {} (add it to configs/gpus.json with a source "
                  "for each number)",
                  entry.model, t.known_models()));
    }
    h.gpus.push_back(entry);
  }
  if (items.empty()) e.add(path, "at least one GPU model is required");
}

void add_profiles(ojson& pool, const GpuTable& t, const std::string& model, int n, StageKind stage,
                  const std::vector<std::string>& classes, std::vector<std::string>& notes,
                  Errors& e, const std::string& path) {
  ojson profiles = ojson::object();
  for (const auto& cls : classes) {
    auto s = t.stage_seconds(model, n, stage, cls);
    if (!s.ok()) {
      e.add(path, s.error().message);
      continue;
    }
    profiles[cls] = {{"kind", "fixed"}, {"seconds", round2(s.value())}};
    const auto& ref = t.reference.at(stage);
    notes.push_back(fmt::format("{} {} {}: {:.2f} s ({}x {}; reference {:.2f} s on {}x {})",
                                pool["name"].get<std::string>(), config::stage_name(stage), cls,
                                s.value(), n, model, ref.seconds.at(cls), ref.gpus, ref.gpu));
  }
  pool["profiles"] = profiles;
}

// The map's top level: what every host shares.
struct MapTop {
  std::string name = "adapted", dispatch = "completion_time";
  int transfer_port = 7700;
  ojson runtime = {{"name", "builtin"}, {"settings", ojson::object()}};
  std::vector<std::string> classes;  // the job classes to profile (default: every one in t)
  ojson redis;                       // null: h3pipe's own (see default_redis)
};

std::vector<std::string> read_classes(const nlohmann::json& v, const GpuTable& t, Errors& e) {
  std::vector<std::string> classes;
  if (!v.is_array() || v.empty()) {
    e.add("/classes", "expected a non-empty array of job class names");
    return classes;
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto& c = v[i];
    bool known = false;
    for (const auto& k : t.classes)
      known = known || (c.is_string() && k.name == c.get<std::string>());
    if (known) {
      classes.push_back(c.get<std::string>());
      continue;
    }
    std::string names;
    for (const auto& k : t.classes) names += (names.empty() ? "" : ", ") + k.name;
    e.add(fmt::format("/classes/{}", i),
          fmt::format("unknown job class {}; known: {}", c.dump(), names));
  }
  return classes;
}

MapTop read_top(ObjectReader& r, const GpuTable& t, Errors& e) {
  MapTop top;
  r.get("name", top.name);
  r.get("dispatch", top.dispatch);
  if (!h3pipe::dispatch::parse_policy(top.dispatch))
    e.add("/dispatch", fmt::format("\"{}\": expected completion_time or first_free", top.dispatch));
  r.get("transfer_port", top.transfer_port, 1, 65535);
  if (auto* v = r.raw("runtime")) top.runtime = runtime_json(*v, "/runtime", e);
  for (const auto& c : t.classes) top.classes.push_back(c.name);
  if (auto* v = r.raw("classes")) top.classes = read_classes(*v, t, e);
  if (auto* v = r.raw("redis")) {
    if (!v->is_object())
      e.add("/redis", "expected an object (the config's redis section)");
    else
      top.redis = ojson(*v);
  }
  return top;
}

// One entry of /hosts (nullopt: not an object); its name joins `names` (a duplicate is refused).
std::optional<HostIn> read_host(const nlohmann::json& v, std::size_t i, const GpuTable& t,
                                std::set<std::string>& names, Errors& e) {
  HostIn h;
  h.path = fmt::format("/hosts/{}", i);
  ObjectReader hr(v, h.path, e);
  if (!hr.ok()) return std::nullopt;
  hr.get("name", h.name, true);
  hr.get("address", h.address);
  hr.get("ssh", h.ssh);
  hr.get("bind", h.bind);
  hr.get("transfer_port", h.transfer_port, 0, 65535);
  hr.get("api_bind", h.api_bind);
  hr.get("api_port", h.api_port, 0, 65535);
  hr.get("api_metrics_port", h.api_metrics_port, 0, 65535);
  hr.get("api_tls_cert", h.api_tls_cert);  // its own certificate: the loader checks the pair
  hr.get("api_tls_key", h.api_tls_key);
  hr.get("gpus_per_pool", h.gpus_per_pool, 1, 1024);
  std::vector<std::string> roles;
  hr.get("roles", roles);
  if (!hr.has("roles"))
    e.add(h.path + "/roles", "required: which stages run here (encode, sample, decode)");
  for (std::size_t k = 0; k < roles.size(); ++k) {
    if (roles[k] != "encode" && roles[k] != "sample" && roles[k] != "decode")
      e.add(fmt::format("{}/roles/{}", h.path, k),
            fmt::format("\"{}\": expected encode, sample or decode", roles[k]));
    else
      h.roles.insert(roles[k]);
  }
  if (hr.has("roles") && roles.empty()) e.add(h.path + "/roles", "at least one role is required");
  if (const auto* g = hr.raw("gpus"))
    read_gpus(*g, h.path + "/gpus", t, h, e);
  else
    e.add(h.path + "/gpus",
          "required: GPU models and counts, e.g. [{\"model\": \"T10\", \"count\": 4}]");
  if (const auto* rt = hr.raw("runtime")) h.runtime = runtime_json(*rt, h.path + "/runtime", e);
  if (!h.name.empty()) {
    if (auto s = artifacts::validate_id(h.path + "/name", h.name); !s.ok())
      e.add(h.path + "/name", s.error().message);
    if (!names.insert(h.name).second)
      e.add(h.path + "/name", fmt::format("duplicate host \"{}\"", h.name));
  }
  return h;
}

std::vector<HostIn> read_hosts(const nlohmann::json* hv, const GpuTable& t,
                               std::set<std::string>& names, Errors& e) {
  std::vector<HostIn> hosts;
  if (!hv || !hv->is_array() || hv->empty()) {
    e.add("/hosts", "required: a non-empty array of hosts");
    return hosts;
  }
  for (std::size_t i = 0; i < hv->size(); ++i) {
    if (auto h = read_host((*hv)[i], i, t, names, e)) hosts.push_back(std::move(*h));
  }
  if (hosts.size() > 1)
    for (const auto& h : hosts)
      if (h.address.empty())
        e.add(h.path + "/address",
              "required when the map has more than one host: peers reach the host there "
              "(an SSH alias alone does not give the transfer service an address)");
  return hosts;
}

// /links as the config has them; `linked` gets both directions of each.
ojson read_links(const nlohmann::json* v, const std::set<std::string>& names,
                 std::set<std::pair<std::string, std::string>>& linked, Errors& e) {
  ojson links = ojson::array();
  if (!v) return links;
  if (!v->is_array()) {
    e.add("/links", "expected an array of {from, to, gbps, latency_ms}");
    return links;
  }
  for (std::size_t i = 0; i < v->size(); ++i) {
    const std::string p = fmt::format("/links/{}", i);
    ObjectReader lr((*v)[i], p, e);
    std::string from, to;
    double gbps = 0, latency = 0.5;
    lr.get("from", from, true);
    lr.get("to", to, true);
    lr.get("gbps", gbps, 1e-6, 1e6, true);
    lr.get("latency_ms", latency, 0, 1e6);
    if (!from.empty() && !names.count(from))
      e.add(p + "/from", fmt::format("\"{}\" is not a host in /hosts", from));
    if (!to.empty() && !names.count(to))
      e.add(p + "/to", fmt::format("\"{}\" is not a host in /hosts", to));
    linked.insert({from, to});
    linked.insert({to, from});
    links.push_back({{"from", from}, {"to", to}, {"gbps", gbps}, {"latency_ms", latency}});
  }
  return links;
}

// The pools of one host: a sampler (with encode and decode sharing its GPUs) per GPU group on a
// sample host; else an encoder per group and a decoder per GPU.
void add_host_pools(const HostIn& h, const GpuTable& t, const std::vector<std::string>& classes,
                    ojson& pools, std::vector<std::string>& notes, Errors& e) {
  int groups = 0, total = 0;
  for (const auto& g : h.gpus) {
    if (g.count <= 0) continue;
    total += g.count;
    const int per = h.gpus_per_pool > 0 ? h.gpus_per_pool : g.count;
    if (g.count % per != 0)
      e.add(h.path + "/gpus_per_pool",
            fmt::format("{} does not divide the {} x {} GPUs of this host", per, g.count, g.model));
    else
      groups += g.count / per;
  }
  const bool sample = h.roles.count("sample") > 0;
  const int decoders = sample ? groups : total;
  int id = 0, group = 0, dec = 0;
  for (const auto& g : h.gpus) {
    if (!g.info || g.count <= 0) {
      id += std::max(0, g.count);
      continue;
    }
    const int per = h.gpus_per_pool > 0 ? h.gpus_per_pool : g.count;
    if (g.count % per != 0) continue;
    for (int grp = 0; grp < g.count / per; ++grp, ++group) {
      std::vector<int> ids;
      for (int x = 0; x < per; ++x) ids.push_back(id++);
      const std::string sfx = groups > 1 ? fmt::format("-{}", group) : "";
      auto make = [&](const std::string& stage, const std::vector<int>& gpus,
                      const std::string& pool_name, StageKind kind, int n,
                      const std::string& shares = "") {
        ojson p = {{"name", pool_name},
                   {"host", h.name},
                   {"stage", stage},
                   {"gpus", gpus},
                   {"gpu_model", g.info->model}};
        if (!h.runtime.is_null()) p["runtime"] = h.runtime;
        if (!shares.empty()) p["shares_gpus_with"] = shares;
        add_profiles(p, t, g.info->model, n, kind, classes, notes, e, h.path + "/gpus");
        return p;
      };
      const std::string sampler = h.name + "-sample" + sfx;
      if (sample) {
        ojson sp = make("sample", ids, sampler, StageKind::kSample, per);
        if (h.roles.count("encode")) {
          pools.push_back(
              make("encode", ids, h.name + "-encode" + sfx, StageKind::kEncode, per, sampler));
        }
        pools.push_back(sp);
        if (h.roles.count("decode")) {
          pools.push_back(
              make("decode", ids, h.name + "-decode" + sfx, StageKind::kDecode, 1, sampler));
        }
        continue;
      }
      if (h.roles.count("encode"))
        pools.push_back(make("encode", ids, h.name + "-encode" + sfx, StageKind::kEncode, per));
      if (h.roles.count("decode"))
        for (int gpu : ids) {
          const std::string dname =
              h.name + "-decode" + (decoders > 1 ? fmt::format("-{}", dec) : "");
          ++dec;
          pools.push_back(make("decode", {gpu}, dname, StageKind::kDecode, 1));
        }
    }
  }
}

// At least one sample and one decode host, and a link between every sample and decode host.
void check_roles_and_links(const std::vector<HostIn>& hosts,
                           const std::set<std::pair<std::string, std::string>>& linked, Errors& e) {
  std::vector<std::string> sample_hosts, decode_hosts;
  for (const auto& h : hosts) {
    if (h.roles.count("sample")) sample_hosts.push_back(h.name);
    if (h.roles.count("decode")) decode_hosts.push_back(h.name);
  }
  if (!hosts.empty() && sample_hosts.empty())
    e.add("/hosts", "no host has the role \"sample\"; at least one is required");
  if (!hosts.empty() && decode_hosts.empty())
    e.add("/hosts", "no host has the role \"decode\"; at least one is required");
  for (const auto& s : sample_hosts)
    for (const auto& d : decode_hosts)
      if (s != d && !linked.count({s, d}))
        e.add("/links", fmt::format("no link between {} and {}: add {{\"from\": \"{}\", \"to\": "
                                    "\"{}\", \"gbps\": ..., \"latency_ms\": ...}} (config-adapt "
                                    "cannot infer the network)",
                                    s, d, s, d));
}

// The map gave no redis section: the embedded one on one host; on several, a shared Redis that
// h3pipe runs on the first decode host.
ojson default_redis(const std::vector<HostIn>& hosts, std::vector<std::string>& notes) {
  if (hosts.size() <= 1) return {{"host", "127.0.0.1"}, {"port", 0}, {"embedded", true}};
  const HostIn* rh = nullptr;
  for (const auto& h : hosts)
    if (!rh && h.roles.count("decode")) rh = &h;
  // The shared Redis is h3pipe's to run (issue #34 item 1): started by that host's
  // `h3pipe start`, reached by the others through the stunnel TLS hop, with the passwords and
  // certificates of `h3pipe credentials init` in credentials/ beside the config.
  notes.push_back(fmt::format(
      "redis: on {} ({}:6379 is its stunnel TLS port), started by `h3pipe start --host {}` "
      "(or first by `h3pipe start --all`)",
      rh->name, rh->address, rh->name));
  notes.push_back(
      "credentials: `h3pipe --config CONFIG credentials init` writes credentials/ beside the "
      "config (Redis passwords, the TLS CA and certificates); for each host, `h3pipe "
      "--config CONFIG credentials export --host NAME -o DIR` and copy DIR to credentials/ "
      "beside the config on that host (only the Redis host gets redis-admin)");
  return {{"host", rh->address},
          {"port", 6379},
          {"embedded", false},
          {"managed", true},
          {"credentials_dir", "credentials"}};
}

ojson host_json(const HostIn& h, bool multi, int transfer_port, std::vector<std::string>& notes) {
  ojson hj = {{"name", h.name}, {"address", h.address.empty() ? "127.0.0.1" : h.address}};
  if (!h.ssh.empty()) hj["ssh"] = h.ssh;
  hj["bind"] = !h.bind.empty() ? h.bind : multi ? "0.0.0.0" : "127.0.0.1";
  hj["transfer_port"] = h.transfer_port ? h.transfer_port : multi ? transfer_port : 0;
  if (multi) {
    hj["transfer_public_key_file"] = "keys/" + h.name + ".pub";
    hj["transfer_secret_key_file"] = "keys/" + h.name + ".key";
  }
  if (!h.api_bind.empty()) hj["api_bind"] = h.api_bind;
  if (h.api_port) hj["api_port"] = h.api_port;
  if (h.api_metrics_port) hj["api_metrics_port"] = h.api_metrics_port;
  if (!h.api_tls_cert.empty()) hj["api_tls_cert"] = h.api_tls_cert;
  if (!h.api_tls_key.empty()) hj["api_tls_key"] = h.api_tls_key;
  // Another host's API reads a decode host's MP4s through that host's API (docs/api.md, "Two
  // hosts"), which listens on loopback unless the map says otherwise.
  if (multi && h.roles.count("decode") && h.api_bind.empty())
    notes.push_back(fmt::format(
        "h3pipe-api of {} listens on 127.0.0.1: the other hosts' APIs cannot serve the videos "
        "it decodes until {}/api_bind names an address they reach (behind TLS: a proxy, or its "
        "api_tls_cert and api_tls_key; or on a trusted network; docs/api.md, \"Two hosts\")",
        h.name, h.path));
  return hj;
}

}  // namespace

Result<Adapted> adapt_host_map(const nlohmann::json& m, const GpuTable& t) {
  Errors e;
  Adapted out;
  ObjectReader r(m, "", e);
  if (!r.ok()) return make_error(errc::adapt::kInvalid, "{}", e.joined());
  MapTop top = read_top(r, t, e);
  std::set<std::string> names;
  const std::vector<HostIn> hosts = read_hosts(r.raw("hosts"), t, names, e);
  std::set<std::pair<std::string, std::string>> linked;
  ojson links = read_links(r.raw("links"), names, linked, e);
  r.finish();
  ojson pools = ojson::array();
  for (const auto& h : hosts) add_host_pools(h, t, top.classes, pools, out.notes, e);
  check_roles_and_links(hosts, linked, e);
  if (!e.empty()) return make_error(errc::adapt::kInvalid, "{}", e.joined());

  // The config in the loader's format (docs/config.md).
  const bool multi = hosts.size() > 1;
  ojson c;
  c["name"] = top.name;
  c["dispatch"] = top.dispatch;
  c["redis"] = top.redis.is_null() ? default_redis(hosts, out.notes) : top.redis;
  c["stages"] = {{"encode", {{"runtime", top.runtime}}},
                 {"sample", {{"runtime", top.runtime}}},
                 {"decode", {{"runtime", top.runtime}}}};
  c["classes"] = ojson::array();
  for (const auto& cls : top.classes)
    for (const auto& k : t.classes)
      if (k.name == cls)
        c["classes"].push_back({{"name", k.name},
                                {"width", k.width},
                                {"height", k.height},
                                {"frames", k.frames},
                                {"steps", k.steps}});
  c["hosts"] = ojson::array();
  for (const auto& h : hosts)
    c["hosts"].push_back(host_json(h, multi, top.transfer_port, out.notes));
  for (const auto& [stage, ref] : t.reference)
    out.notes.push_back(
        fmt::format("reference {} times: {}", config::stage_name(stage), ref.source));
  if (multi)
    for (const auto& h : hosts)
      out.notes.push_back(fmt::format(
          "transfer keys of {}: keys/{}.pub and keys/{}.key beside the config: `h3pipe keygen "
          "--dir keys --name {}` there (every host needs its own pair and its peers' .pub)",
          h.name, h.name, h.name, h.name));
  c["pools"] = pools;
  if (!links.empty()) c["links"] = links;
  out.config = std::move(c);
  return out;
}

int run_config_adapt(const ConfigAdaptArgs& a, std::ostream& out, std::ostream& err) {
  namespace fs = std::filesystem;
  if (a.host_map.empty()) {
    fmt::print(
        err, "config-adapt: give the host map: h3pipe config-adapt HOST_MAP.json -o local.json\n");
    return 2;
  }
  if (!a.output.empty() && fs::exists(a.output) && !a.force) {
    fmt::print(err, "config-adapt: {} exists; pass --force to overwrite it\n", a.output);
    return 2;
  }
  auto table = load_gpu_table(a.gpu_table);
  if (!table.ok()) {
    fmt::print(err, "config-adapt: {}\n", table.error().message);
    return 1;
  }
  nlohmann::json m;
  {
    auto text = read_bounded_file(a.host_map, {"a host map", kMaxJsonFileBytes});
    if (!text.ok()) {
      fmt::print(err, "config-adapt: {}\n", text.error().message);
      return text.error().code == errc::io::kOpen ? 1 : 2;
    }
    std::string why;
    auto parsed = json_reader::parse_limited(*text, {kMaxJsonFileBytes}, &why);
    if (!parsed) {
      fmt::print(err, "config-adapt: {}: not valid JSON: {}\n", a.host_map, why);
      return 1;
    }
    m = std::move(*parsed);
  }
  auto adapted = adapt_host_map(m, table.value());
  if (!adapted.ok()) {
    fmt::print(err, "config-adapt: {}:\n{}\n", a.host_map, adapted.error().message);
    return 1;
  }
  const std::string text = adapted->config.dump(2) + "\n";
  // What we write must load: a failure here is a bug in config-adapt, reported as such.
  const fs::path base =
      a.output.empty() ? fs::current_path() : fs::absolute(a.output).parent_path();
  std::string why;
  if (auto c = config::parse(json_reader::parse_limited(text, {}, &why).value_or(nullptr), base);
      !c.ok()) {
    fmt::print(err, "config-adapt: internal error, the generated config does not load:\n{}\n",
               c.error().message);
    return 1;
  }
  if (a.output.empty()) {
    out << text;
    return 0;
  }
  const std::string tmp = a.output + ".part";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) {
      fmt::print(err, "config-adapt: {}: write failed\n", tmp);
      return 1;
    }
  }
  std::error_code ec;
  fs::rename(tmp, a.output, ec);
  if (ec) {
    fmt::print(err, "config-adapt: {}: {}\n", a.output, ec.message());
    return 1;
  }
  fmt::print(out, "config-adapt: wrote {} ({} hosts, {} pools)\n", a.output,
             adapted->config["hosts"].size(), adapted->config["pools"].size());
  for (const auto& n : adapted->notes) fmt::print(out, "  {}\n", n);
  return 0;
}

}  // namespace h3pipe::schedule
