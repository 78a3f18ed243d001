#include "common/config/config.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/artifacts/artifacts.h"
#include "common/core/bounded_file.h"
#include "common/config/json_reader.h"
#include "common/config/embedded_default.h"
#include "common/latent/profile_json.h"

namespace h3pipe::config {
namespace fs = std::filesystem;
namespace {

constexpr const char* kStageNames[] = {"encode", "sample", "decode"};

std::optional<StageKind> parse_stage(const std::string& s) {
  for (int i = 0; i < 3; ++i)
    if (s == kStageNames[i]) return static_cast<StageKind>(i);
  return std::nullopt;
}

// Absolute: redis-server changes into its data dir before it reads its ACL file, so a relative
// state dir (`--state-dir st`) once left it looking for st/redis/users.acl under st/redis.
fs::path default_state_dir() {
  if (const char* s = std::getenv("H3PIPE_STATE"); s && *s)
    return fs::absolute(s).lexically_normal();
  return fs::current_path() / ".state";
}

fs::path resolve(const fs::path& base, const std::string& p) {
  if (p.empty()) return {};
  if (p.rfind("~/", 0) == 0) {
    const char* home = std::getenv("HOME");
    return fs::path(home ? home : "/") / p.substr(2);
  }
  fs::path fp(p);
  return fp.is_absolute() ? fp : base / fp;
}

// A required string that is present but "" passes ObjectReader (it is a string): it names nothing.
void require_nonempty(ObjectReader& r, const std::string& key, const std::string& value, Errors& e) {
  if (value.empty() && r.has(key) && r.raw(key)->is_string()) e.add(r.path(key), "must not be empty");
}

void parse_profile(const nlohmann::json& j, const std::string& path, Profile& p, Errors& e) {
  ObjectReader r(j, path, e);
  if (!r.ok()) return;
  std::string kind = "fixed";
  r.get("kind", kind);
  if (kind == "fixed") {
    p.kind = Profile::Kind::kFixed;
    r.get("seconds", p.seconds, 0, 1e7, true);
  } else if (kind == "normal") {
    p.kind = Profile::Kind::kNormal;
    r.get("mean", p.mean, 0, 1e7, true);
    r.get("sd", p.sd, 0, 1e7);
  } else if (kind == "cycle") {
    p.kind = Profile::Kind::kCycle;
    if (auto* v = r.raw("seconds")) {
      if (!v->is_array() || v->empty()) {
        e.add(r.path("seconds"), "expected a non-empty array of numbers");
      } else {
        for (std::size_t i = 0; i < v->size(); ++i) {
          const auto& x = (*v)[i];
          if (!x.is_number() || x.get<double>() < 0)
            e.add(fmt::format("{}/{}", r.path("seconds"), i), "expected a number >= 0");
          else p.cycle.push_back(x.get<double>());
        }
      }
    } else {
      e.add(r.path("seconds"), "required but missing");
    }
  } else {
    e.add(r.path("kind"), fmt::format("unknown profile kind \"{}\"; expected fixed, normal or cycle", kind));
  }
}

void parse_profiles(const nlohmann::json* j, const std::string& path,
                    std::map<std::string, Profile>& out, Errors& e) {
  if (!j) return;
  if (!j->is_object()) return e.add(path, "expected an object mapping job class -> profile");
  for (auto it = j->begin(); it != j->end(); ++it) {
    Profile p;
    parse_profile(it.value(), path + "/" + it.key(), p, e);
    out[it.key()] = p;
  }
}

void parse_runtime(const nlohmann::json& j, const std::string& path, RuntimeRef& rt, Errors& e) {
  ObjectReader r(j, path, e);
  if (!r.ok()) return;
  r.get("name", rt.name, true);
  require_nonempty(r, "name", rt.name, e);
  static const std::set<std::string> kKnown = {"sim", "builtin", "exec", "comfyui"};
  if (!rt.name.empty() && !kKnown.count(rt.name))
    e.add(r.path("name"), fmt::format("unknown runtime \"{}\"; expected sim, builtin, exec or comfyui", rt.name));
  if (auto* s = r.raw("settings")) {
    if (!s->is_object()) e.add(r.path("settings"), "expected an object");
    else rt.settings = *s;
  }
}

}  // namespace

const char* stage_name(StageKind s) { return kStageNames[static_cast<int>(s)]; }

const Profile* Pool::profile_for(std::string_view job_class) const {
  auto it = profiles.find(std::string(job_class));
  if (it == profiles.end()) it = profiles.find("default");
  return it == profiles.end() ? nullptr : &it->second;
}

double Profile::expected() const {
  switch (kind) {
    case Kind::kFixed: return seconds;
    case Kind::kNormal: return mean;
    case Kind::kCycle: {
      double s = 0;
      for (double c : cycle) s += c;
      return cycle.empty() ? 0 : s / static_cast<double>(cycle.size());
    }
  }
  return 0;
}

std::string Redis::password() const {
  if (password_file.empty()) return {};
  // A FIFO or a device named here must not hang or flood the caller: the bounded reader.
  auto text = read_bounded_file(password_file, {"a password file", kMaxSmallFileBytes});
  if (!text.ok()) return {};
  std::string pw = text->substr(0, text->find('\n'));
  while (!pw.empty() && (pw.back() == '\n' || pw.back() == '\r' || pw.back() == ' ')) pw.pop_back();
  return pw;
}

const Host* Cluster::find_host(std::string_view n) const {
  for (const auto& h : hosts)
    if (h.name == n) return &h;
  return nullptr;
}
const Pool* Cluster::find_pool(std::string_view n) const {
  for (const auto& p : pools)
    if (p.name == n) return &p;
  return nullptr;
}
const RuntimeRef& Cluster::runtime_for(const Pool& p) const {
  if (p.runtime) return *p.runtime;
  static const RuntimeRef kSim;
  auto it = stage_runtimes.find(p.stage);
  return it == stage_runtimes.end() ? kSim : it->second;
}
std::vector<const Pool*> Cluster::pools_on(std::string_view host, std::optional<StageKind> stage) const {
  std::vector<const Pool*> out;
  for (const auto& p : pools)
    if ((host.empty() || p.host == host) && (!stage || p.stage == *stage)) out.push_back(&p);
  return out;
}
std::vector<std::size_t> Cluster::gpu_group_leaders() const {
  std::vector<std::size_t> lead(pools.size());
  for (std::size_t i = 0; i < pools.size(); ++i) lead[i] = i;
  auto root = [&](std::size_t i) {
    while (lead[i] != i) i = lead[i] = lead[lead[i]];
    return i;
  };
  for (std::size_t i = 0; i < pools.size(); ++i) {
    if (pools[i].shares_gpus_with.empty()) continue;
    for (std::size_t k = 0; k < pools.size(); ++k)
      if (pools[k].name == pools[i].shares_gpus_with) {
        const std::size_t a = root(i), b = root(k);
        if (a != b) lead[std::max(a, b)] = std::min(a, b);  // the earlier pool leads
      }
  }
  for (std::size_t i = 0; i < pools.size(); ++i) lead[i] = root(i);
  return lead;
}
std::string Cluster::class_of(std::uint32_t w, std::uint32_t h, std::uint32_t frames,
                              std::uint32_t steps, std::string_view named) const {
  if (!named.empty()) return std::string(named);
  for (const auto& c : classes)
    if (c.width == w && c.height == h && c.frames == frames && (c.steps == 0 || c.steps == steps))
      return c.name;
  return "default";
}

const latent::LatentProfile* Cluster::find_latent_profile(std::string_view name) const {
  if (auto it = latent_profiles.find(std::string(name)); it != latent_profiles.end()) return &it->second;
  return latent::find_builtin_profile(name);
}

std::string Cluster::latent_profile_names() const {
  std::string out;
  for (const auto& p : latent::builtin_profiles()) out += (out.empty() ? "" : ", ") + p.name;
  for (const auto& [name, p] : latent_profiles) out += ", " + name;
  return out;
}

Result<latent::LatentProfile> Cluster::latent_profile_for(std::string_view job_class,
                                                          std::string_view requested) const {
  std::string name = latent_profile, from = "the cluster's latent_profile";
  for (const auto& c : classes) {
    if (c.name == job_class && !c.latent_profile.empty()) {
      name = c.latent_profile;
      from = fmt::format("job class {}", c.name);
    }
  }
  if (!requested.empty()) {
    name = std::string(requested);
    from = "params.latent_profile";
  }
  if (const auto* p = find_latent_profile(name)) return *p;
  return make_error(errc::config::kLatentProfile, "{}: unknown latent profile \"{}\" (known: {})", from, name,
                    latent_profile_names());
}

Result<Cluster> parse(const nlohmann::json& j, const fs::path& base_dir) {
  Errors e;
  Cluster c;
  ObjectReader r(j, "", e);
  if (!r.ok()) return make_error(errc::config::kInvalid, "{}", e.joined());
  r.get("name", c.name);
  std::string state_dir, artifact_root, output_root;
  bool input_roots_set = false;
  r.get("state_dir", state_dir);
  r.get("artifact_root", artifact_root);
  r.get("output_root", output_root);
  r.get("dispatch", c.dispatch);
  if (c.dispatch != "completion_time" && c.dispatch != "first_free")
    e.add("/dispatch", fmt::format("\"{}\": expected completion_time or first_free", c.dispatch));
  r.get("time_scale", c.time_scale, 1e-6, 1e6);
  if (auto* v = r.raw("latent_profiles")) {
    if (!v->is_object()) e.add("/latent_profiles", "expected an object mapping profile name -> profile");
    else for (auto it = v->begin(); it != v->end(); ++it) {
      const std::string p = "/latent_profiles/" + it.key();
      if (auto s = artifacts::validate_id(p, it.key()); !s.ok()) e.add(p, s.error().message);
      else if (latent::find_builtin_profile(it.key()))
        e.add(p, fmt::format("\"{}\" is a built-in profile; declare yours under another name", it.key()));
      latent::LatentProfile lp;
      lp.name = it.key();
      latent::read_profile(it.value(), p, lp, e);  // the built-in table's own reader
      c.latent_profiles[it.key()] = lp;
    }
  }
  r.get("latent_profile", c.latent_profile);
  if (!c.find_latent_profile(c.latent_profile))
    e.add("/latent_profile", fmt::format("unknown latent profile \"{}\" (known: {})", c.latent_profile, c.latent_profile_names()));

  if (auto* v = r.raw("redis")) {
    ObjectReader rr(*v, "/redis", e);
    rr.get("host", c.redis.host);
    rr.get("port", c.redis.port, 0, 65535);
    rr.get("user", c.redis.user);
    std::string pwf;
    rr.get("password_file", pwf);
    c.redis.password_file = resolve(base_dir, pwf).string();
    std::string creds;
    rr.get("credentials_dir", creds);
    c.redis.credentials_dir = resolve(base_dir, creds).string();
    rr.get("embedded", c.redis.embedded);
    rr.get("wait_replicas", c.redis.wait_replicas, 0, 16);
    rr.get("wait_timeout_ms", c.redis.wait_timeout_ms, 1, 600000);
    if (auto* sv = rr.raw("sentinel")) {
      ObjectReader sr(*sv, "/redis/sentinel", e);
      auto& s = c.redis.sentinel;
      sr.get("addresses", s.addresses);
      sr.get("master", s.master, true);
      sr.get("user", s.user);
      std::string spf;
      sr.get("password_file", spf);
      if (!spf.empty()) s.password_file = resolve(base_dir, spf).string();
      if (s.addresses.empty()) e.add("/redis/sentinel/addresses", "expected at least one HOST:PORT");
      for (std::size_t i = 0; i < s.addresses.size(); ++i) {
        const auto& a = s.addresses[i];
        const auto colon = a.rfind(':');
        const int port = colon == std::string::npos ? 0 : std::atoi(a.c_str() + colon + 1);
        if (colon == std::string::npos || colon == 0 || port < 1 || port > 65535)
          e.add(fmt::format("/redis/sentinel/addresses/{}", i), fmt::format("\"{}\": expected HOST:PORT", a));
      }
      if (c.redis.embedded)
        e.add("/redis/sentinel", "a Redis behind Sentinel is not the embedded one: set /redis/embedded to false");
    }
  }
  if (auto* v = r.raw("queue")) {
    ObjectReader q(*v, "/queue", e);
    q.get("lease_ms", c.queue.lease_ms, 100, 3600000);
    q.get("renew_ms", c.queue.renew_ms, 10, 600000);
    q.get("sweep_ms", c.queue.sweep_ms, 10, 600000);
    q.get("max_deliveries", c.queue.max_deliveries, 1, 1000);
    q.get("block_ms", c.queue.block_ms, 1, 60000);
    q.get("retry_backoff_ms", c.queue.retry_backoff_ms, 0, 3600000);
    if (c.queue.renew_ms * 2 > c.queue.lease_ms)
      e.add("/queue/renew_ms", fmt::format("{} must be at most half of lease_ms ({}) so one missed renewal does not lose the lease",
                                           c.queue.renew_ms, c.queue.lease_ms));
  }
  if (auto* v = r.raw("limits")) {
    ObjectReader l(*v, "/limits", e);
    l.get("max_width", c.limits.max_width, 16, 16384);
    l.get("max_height", c.limits.max_height, 16, 16384);
    l.get("max_frames", c.limits.max_frames, 1, 100000);
    l.get("max_steps", c.limits.max_steps, 1, 10000);
    l.get("max_fps", c.limits.max_fps, 1, 1000);
    l.get("max_latent_bytes", c.limits.max_latent_bytes, 1, std::numeric_limits<long long>::max());
    l.get("max_batch", c.limits.max_batch, 1, 10000000);
    l.get("max_prompt_bytes", c.limits.max_prompt_bytes, 1, 1 << 24);
    l.get("max_params", c.limits.max_params, 0, 4096);
    if (l.raw("input_roots")) {
      std::vector<std::string> roots;
      l.get("input_roots", roots);
      for (std::size_t i = 0; i < roots.size(); ++i) {
        if (roots[i].empty()) e.add(fmt::format("/limits/input_roots/{}", i), "an empty path");
        c.limits.input_roots.push_back(resolve(base_dir, roots[i]));
      }
      input_roots_set = true;
    }
  }
  if (auto* v = r.raw("transfer")) {
    ObjectReader t(*v, "/transfer", e);
    t.get("curve", c.transfer.curve);
    t.get("chunk_bytes", c.transfer.chunk_bytes, 4096, 64 << 20);
    t.get("window", c.transfer.window, 1, 1024);
    t.get("heartbeat_ms", c.transfer.heartbeat_ms, 10, 60000);
    t.get("dead_after_ms", c.transfer.dead_after_ms, 50, 600000);
    t.get("max_attempts", c.transfer.max_attempts, 1, 100);
  }
  if (auto* v = r.raw("stages")) {
    ObjectReader s(*v, "/stages", e);
    for (const char* name : kStageNames) {
      if (auto* sv = s.raw(name)) {
        ObjectReader st(*sv, std::string("/stages/") + name, e);
        RuntimeRef rt;
        if (auto* rv = st.raw("runtime")) parse_runtime(*rv, st.path("runtime"), rt, e);
        c.stage_runtimes[*parse_stage(name)] = rt;
      }
    }
  }
  if (auto* v = r.raw("classes")) {
    if (!v->is_array()) e.add("/classes", "expected an array");
    else for (std::size_t i = 0; i < v->size(); ++i) {
      JobClass jc;
      ObjectReader cr((*v)[i], fmt::format("/classes/{}", i), e);
      cr.get("name", jc.name, true);
      require_nonempty(cr, "name", jc.name, e);
      cr.get("width", jc.width, 0, 16384);
      cr.get("height", jc.height, 0, 16384);
      cr.get("frames", jc.frames, 0, 100000);
      cr.get("steps", jc.steps, 0, 10000);
      cr.get("latent_profile", jc.latent_profile);
      c.classes.push_back(jc);
    }
  }
  std::set<std::string> host_names;
  if (auto* v = r.raw("hosts")) {
    if (!v->is_array()) e.add("/hosts", "expected an array");
    else for (std::size_t i = 0; i < v->size(); ++i) {
      Host h;
      std::string p = fmt::format("/hosts/{}", i);
      ObjectReader hr((*v)[i], p, e);
      hr.get("name", h.name, true);
      require_nonempty(hr, "name", h.name, e);
      hr.get("address", h.address);
      hr.get("ssh", h.ssh);
      hr.get("bind", h.bind);
      hr.get("transfer_port", h.transfer_port, 0, 65535);
      std::string pub, sec;
      hr.get("transfer_public_key_file", pub);
      hr.get("transfer_secret_key_file", sec);
      h.transfer_public_key_file = resolve(base_dir, pub).string();
      h.transfer_secret_key_file = resolve(base_dir, sec).string();
      hr.get("transfer_allowed_clients", h.transfer_allowed_clients);
      if (!h.name.empty()) {
        if (auto s = artifacts::validate_id(p + "/name", h.name); !s.ok()) e.add(p + "/name", s.error().message);
        if (!host_names.insert(h.name).second) e.add(p + "/name", fmt::format("duplicate host \"{}\"", h.name));
      }
      c.hosts.push_back(std::move(h));
    }
  }
  if (c.hosts.empty()) e.add("/hosts", "at least one host is required");
  std::set<std::string> pool_names;
  if (auto* v = r.raw("pools")) {
    if (!v->is_array()) e.add("/pools", "expected an array");
    else for (std::size_t i = 0; i < v->size(); ++i) {
      Pool pl;
      std::string p = fmt::format("/pools/{}", i);
      ObjectReader pr((*v)[i], p, e);
      pr.get("name", pl.name, true);
      pr.get("host", pl.host, true);
      std::string stage;
      pr.get("stage", stage, true);
      for (const auto& [key, value] : {std::pair{"name", &pl.name}, std::pair{"host", &pl.host}, std::pair{"stage", &stage}})
        require_nonempty(pr, key, *value, e);
      if (!stage.empty()) {
        if (auto s = parse_stage(stage)) pl.stage = *s;
        else e.add(p + "/stage", fmt::format("\"{}\": expected encode, sample or decode", stage));
      }
      pr.get("gpus", pl.gpus);
      pr.get("gpu_model", pl.gpu_model);
      pr.get("shares_gpus_with", pl.shares_gpus_with);
      pr.get("metrics_port", pl.metrics_port, 0, 65535);
      if (auto* rv = pr.raw("runtime")) {
        RuntimeRef rt;
        parse_runtime(*rv, p + "/runtime", rt, e);
        pl.runtime = rt;
      }
      parse_profiles(pr.raw("profiles"), p + "/profiles", pl.profiles, e);
      if (!pl.name.empty()) {
        if (auto s = artifacts::validate_id(p + "/name", pl.name); !s.ok()) e.add(p + "/name", s.error().message);
        if (!pool_names.insert(pl.name).second) e.add(p + "/name", fmt::format("duplicate pool \"{}\"", pl.name));
      }
      if (!pl.host.empty() && !host_names.count(pl.host))
        e.add(p + "/host", fmt::format("\"{}\" is not a host in /hosts", pl.host));
      c.pools.push_back(std::move(pl));
    }
  }
  // Two pools of one host on one metrics port: the second cannot bind (was a 30 s start timeout).
  std::map<std::pair<std::string, int>, std::size_t> metrics_ports;
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    const auto& pl = c.pools[i];
    if (pl.metrics_port == 0) continue;
    auto [it, fresh] = metrics_ports.emplace(std::make_pair(pl.host, pl.metrics_port), i);
    if (!fresh)
      e.add(fmt::format("/pools/{}/metrics_port", i),
            fmt::format("{} is already the metrics port of pool \"{}\" on host \"{}\"",
                        pl.metrics_port, c.pools[it->second].name, pl.host));
  }
  for (std::size_t i = 0; i < c.classes.size(); ++i) {
    const auto& lp = c.classes[i].latent_profile;
    if (!lp.empty() && !c.find_latent_profile(lp))
      e.add(fmt::format("/classes/{}/latent_profile", i),
            fmt::format("unknown latent profile \"{}\" (known: {})", lp, c.latent_profile_names()));
  }
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    const auto& sw = c.pools[i].shares_gpus_with;
    if (!sw.empty() && !pool_names.count(sw))
      e.add(fmt::format("/pools/{}/shares_gpus_with", i), fmt::format("\"{}\" is not a pool", sw));
  }
  // A stage without a pool is a stack where every job waits forever (the planner can model a
  // cluster without encoders, but no such cluster can run: ingest lives in the encoder service).
  static const std::pair<StageKind, const char*> kEveryStage[] = {
      {StageKind::kEncode, "submissions are ingested by the encoder service"},
      {StageKind::kSample, "nothing would sample the encoded jobs"},
      {StageKind::kDecode, "nothing would decode the sampled latents into MP4s"}};
  for (const auto& [s, why] : kEveryStage) {
    if (c.pools_on("", s).empty())
      e.add("/pools", fmt::format("no pool runs stage {}: {}, so every job would wait forever; "
                                  "add a pool with \"stage\": \"{}\"",
                                  stage_name(s), why, stage_name(s)));
  }
  if (auto* v = r.raw("links")) {
    if (!v->is_array()) e.add("/links", "expected an array");
    else for (std::size_t i = 0; i < v->size(); ++i) {
      Link l;
      std::string p = fmt::format("/links/{}", i);
      ObjectReader lr((*v)[i], p, e);
      lr.get("from", l.from, true);
      lr.get("to", l.to, true);
      require_nonempty(lr, "from", l.from, e);
      require_nonempty(lr, "to", l.to, e);
      lr.get("gbps", l.gbps, 1e-6, 1e6);
      lr.get("latency_ms", l.latency_ms, 0, 1e6);
      if (!l.from.empty() && !host_names.count(l.from)) e.add(p + "/from", fmt::format("\"{}\" is not a host", l.from));
      if (!l.to.empty() && !host_names.count(l.to)) e.add(p + "/to", fmt::format("\"{}\" is not a host", l.to));
      c.links.push_back(l);
    }
  }
  r.finish();
  if (!e.empty()) return make_error(errc::config::kInvalid, "{}", e.joined());

  fs::path sd =
      state_dir.empty() ? default_state_dir() : resolve(base_dir, state_dir).lexically_normal();
  c.state_dir = sd;
  c.artifact_root = artifact_root.empty() ? sd / "artifacts" : resolve(base_dir, artifact_root);
  c.output_root = output_root.empty() ? sd / "outputs" : resolve(base_dir, output_root);
  if (!input_roots_set) c.limits.input_roots = {sd / "inputs"};
  return c;
}

Result<Cluster> load_file(const fs::path& file) {
  const FileKind kind{"a config", kMaxConfigFileBytes, errc::config::kOpen};
  auto text = read_bounded_file(file, kind);
  if (!text.ok()) return text.error();
  std::string why;
  auto j = parse_strict(*text, &why);  // duplicate keys refused, one-line errors
  if (!j) return make_error(errc::config::kJson, "{}: not valid JSON: {}", file.string(), why);
  auto c = parse(*j, fs::absolute(file).parent_path());
  if (!c.ok()) return make_error(errc::config::kInvalid, "{}:\n{}", file.string(), c.error().message);
  return c;
}

void override_state_dir(Cluster& c, const fs::path& dir) {
  const fs::path sd = fs::absolute(dir).lexically_normal();
  if (c.artifact_root == c.state_dir / "artifacts") c.artifact_root = sd / "artifacts";
  if (c.output_root == c.state_dir / "outputs") c.output_root = sd / "outputs";
  if (c.limits.input_roots == std::vector<fs::path>{c.state_dir / "inputs"})
    c.limits.input_roots = {sd / "inputs"};
  c.state_dir = sd;
}

std::string embedded_default_text() { return std::string(kEmbeddedDefaultConfig); }

Result<Cluster> embedded_default() {
  auto j = nlohmann::json::parse(embedded_default_text());
  return parse(j, fs::current_path());
}

nlohmann::json to_json(const Cluster& c, bool redact) {
  using nlohmann::json;
  json j;
  j["name"] = c.name;
  j["state_dir"] = c.state_dir.string();
  j["artifact_root"] = c.artifact_root.string();
  j["output_root"] = c.output_root.string();
  j["dispatch"] = c.dispatch;
  j["time_scale"] = c.time_scale;
  j["latent_profile"] = c.latent_profile;
  for (const auto& [name, p] : c.latent_profiles) {
    j["latent_profiles"][name] = latent::profile_to_json(p);
    j["latent_profiles"][name].erase("name");
  }
j["redis"] = {{"host", c.redis.host}, {"port", c.redis.port}, {"user", c.redis.user},
                {"password_file", c.redis.password_file}, {"embedded", c.redis.embedded},
                {"credentials_dir", c.redis.credentials_dir}, {"wait_replicas", c.redis.wait_replicas},
                {"wait_timeout_ms", c.redis.wait_timeout_ms}};
  if (!c.redis.sentinel.addresses.empty())
    j["redis"]["sentinel"] = {{"addresses", c.redis.sentinel.addresses}, {"master", c.redis.sentinel.master},
                              {"user", c.redis.sentinel.user}, {"password_file", c.redis.sentinel.password_file}};
  if (redact && !c.redis.password_file.empty()) j["redis"]["password"] = "<redacted>";
  j["queue"] = {{"lease_ms", c.queue.lease_ms}, {"renew_ms", c.queue.renew_ms},
                {"sweep_ms", c.queue.sweep_ms}, {"max_deliveries", c.queue.max_deliveries},
                {"block_ms", c.queue.block_ms}, {"retry_backoff_ms", c.queue.retry_backoff_ms}};
  j["transfer"] = {{"curve", c.transfer.curve}, {"chunk_bytes", c.transfer.chunk_bytes},
                   {"window", c.transfer.window}, {"heartbeat_ms", c.transfer.heartbeat_ms},
                   {"dead_after_ms", c.transfer.dead_after_ms}, {"max_attempts", c.transfer.max_attempts}};
  for (const auto& [s, rt] : c.stage_runtimes)
    j["stages"][stage_name(s)]["runtime"] = {{"name", rt.name}, {"settings", rt.settings}};
  j["hosts"] = json::array();
  for (const auto& h : c.hosts)
    j["hosts"].push_back({{"name", h.name}, {"address", h.address}, {"ssh", h.ssh}, {"bind", h.bind},
                          {"transfer_port", h.transfer_port},
                          {"transfer_secret_key_file", redact && !h.transfer_secret_key_file.empty() ? "<redacted path>" : h.transfer_secret_key_file},
                          {"transfer_allowed_clients", h.transfer_allowed_clients.size()}});
  j["pools"] = json::array();
  for (const auto& p : c.pools) {
    json pj = {{"name", p.name}, {"host", p.host}, {"stage", stage_name(p.stage)}, {"gpus", p.gpus},
               {"runtime", c.runtime_for(p).name}};
    for (const auto& [cls, pr] : p.profiles) pj["profiles"][cls] = pr.expected();
    j["pools"].push_back(pj);
  }
  return j;
}

}  // namespace h3pipe::config
