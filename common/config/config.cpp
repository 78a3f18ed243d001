#include "common/config/config.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/artifacts/artifacts.h"
#include "common/config/embedded_default.h"
#include "common/config/fields.h"
#include "common/core/bounded_file.h"
#include "common/core/json_reader.h"
#include "common/latent/profile_json.h"

namespace h3pipe::config {

bool valid_user_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '@' &&
        ch != '-')
      return false;
  return true;
}
namespace fs = std::filesystem;
namespace {

// Absolute: redis-server changes into its data dir before it reads its ACL file, so a relative
// state dir (`--state-dir st`) once left it looking for st/redis/users.acl under st/redis.
fs::path default_state_dir() {
  if (const char* s = std::getenv("H3PIPE_STATE"); s && *s)
    return fs::absolute(s).lexically_normal();
  return fs::current_path() / ".state";
}

}  // namespace

const Profile* Pool::profile_for(std::string_view job_class) const {
  auto it = profiles.find(std::string(job_class));
  if (it == profiles.end()) it = profiles.find("default");
  return it == profiles.end() ? nullptr : &it->second;
}

double Profile::expected() const {
  switch (kind) {
    case Kind::kFixed:
      return seconds;
    case Kind::kNormal:
      return mean;
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
std::vector<const Pool*> Cluster::pools_on(std::string_view host,
                                           std::optional<StageKind> stage) const {
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
  if (auto it = latent_profiles.find(std::string(name)); it != latent_profiles.end())
    return &it->second;
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
  return make_error(errc::config::kLatentProfile, "{}: unknown latent profile \"{}\" (known: {})",
                    from, name, latent_profile_names());
}

Result<Cluster> parse(const nlohmann::json& j, const fs::path& base_dir) {
  Errors e;
  Cluster c;
  if (!j.is_object()) {
    ObjectReader r(j, "", e);
    return make_error(errc::config::kInvalid, "{}", e.joined());
  }
  read_table(j, "", cluster_table(), c, ReadContext{e, base_dir});
  check_across(c, e);
  if (!e.empty()) return make_error(errc::config::kInvalid, "{}", e.joined());

  // The roots left out default under the state dir, known only now.
  const fs::path sd = c.state_dir.empty() ? default_state_dir() : c.state_dir.lexically_normal();
  c.state_dir = sd;
  if (c.artifact_root.empty()) c.artifact_root = sd / "artifacts";
  if (c.output_root.empty()) c.output_root = sd / "outputs";
  const auto* limits = j.contains("limits") ? &j["limits"] : nullptr;
  if (!limits || !limits->is_object() || !limits->contains("input_roots"))
    c.limits.input_roots = {sd / "inputs"};
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
  if (!c.ok())
    return make_error(errc::config::kInvalid, "{}:\n{}", file.string(), c.error().message);
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

std::string embedded_default_text() {
  return std::string(kEmbeddedDefaultConfig);
}

Result<Cluster> embedded_default() {
  auto j = nlohmann::json::parse(embedded_default_text());  // json-parse: own text (built in)
  return parse(j, fs::current_path());
}

nlohmann::json to_json(const Cluster& c, bool redact) {
  using nlohmann::json;
  json j;
  j["name"] = c.name;
  j["state_dir"] = c.state_dir.string();
  j["artifact_root"] = c.artifact_root.string();
  j["output_root"] = c.output_root.string();
  j["dispatch"] = policy_name(c.dispatch);
  j["time_scale"] = c.time_scale;
  j["latent_profile"] = c.latent_profile;
  for (const auto& [name, p] : c.latent_profiles) {
    j["latent_profiles"][name] = latent::profile_to_json(p);
    j["latent_profiles"][name].erase("name");
  }
  j["redis"] = {{"host", c.redis.host},
                {"port", c.redis.port},
                {"user", c.redis.user},
                {"password_file", c.redis.password_file},
                {"embedded", c.redis.embedded},
                {"credentials_dir", c.redis.credentials_dir},
                {"managed", c.redis.managed},
                {"allow_plaintext", c.redis.allow_plaintext},
                {"wait_replicas", c.redis.wait_replicas},
                {"wait_timeout_ms", c.redis.wait_timeout_ms}};
  if (!c.redis.sentinel.addresses.empty())
    j["redis"]["sentinel"] = {{"addresses", c.redis.sentinel.addresses},
                              {"master", c.redis.sentinel.master},
                              {"user", c.redis.sentinel.user},
                              {"password_file", c.redis.sentinel.password_file}};
  if (redact && !c.redis.password_file.empty()) j["redis"]["password"] = "<redacted>";
  j["queue"] = {{"lease_ms", c.queue.lease_ms}, {"renew_ms", c.queue.renew_ms},
                {"sweep_ms", c.queue.sweep_ms}, {"max_deliveries", c.queue.max_deliveries},
                {"block_ms", c.queue.block_ms}, {"retry_backoff_ms", c.queue.retry_backoff_ms}};
  j["transfer"] = {{"curve", c.transfer.curve},
                   {"chunk_bytes", c.transfer.chunk_bytes},
                   {"window", c.transfer.window},
                   {"heartbeat_ms", c.transfer.heartbeat_ms},
                   {"dead_after_ms", c.transfer.dead_after_ms},
                   {"max_attempts", c.transfer.max_attempts}};
  for (const auto& [s, rt] : c.stage_runtimes)
    j["stages"][stage_name(s)]["runtime"] = {{"name", rt.name}, {"settings", rt.settings}};
  j["hosts"] = json::array();
  for (const auto& h : c.hosts)
    j["hosts"].push_back({{"name", h.name},
                          {"address", h.address},
                          {"ssh", h.ssh},
                          {"bind", h.bind},
                          {"transfer_port", h.transfer_port},
                          {"transfer_data_port", h.transfer_data_port},
                          {"transfer_metrics_port", h.transfer_metrics_port},
                          {"api_bind", h.api_bind},
                          {"api_port", h.api_port},
                          {"api_metrics_port", h.api_metrics_port},
                          {"api_tls_cert", h.api_tls_cert},
                          {"transfer_secret_key_file", redact && !h.transfer_secret_key_file.empty()
                                                           ? "<redacted path>"
                                                           : h.transfer_secret_key_file},
                          {"transfer_allowed_clients", h.transfer_allowed_clients.size()}});
  j["pools"] = json::array();
  for (const auto& p : c.pools) {
    json pj = {{"name", p.name},
               {"host", p.host},
               {"stage", stage_name(p.stage)},
               {"gpus", p.gpus},
               {"runtime", c.runtime_for(p).name}};
    for (const auto& [cls, pr] : p.profiles) pj["profiles"][cls] = pr.expected();
    j["pools"].push_back(pj);
  }
  return j;
}

}  // namespace h3pipe::config
