#include "common/api/webhooks.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/core/error_codes.h"
#include "common/core/json_parse.h"
#include "common/queue/hashes.h"
#include "common/queue/keys.h"
#include "common/queue/streams.h"
#include "common/state/state.h"

namespace h3pipe::api::webhooks {
namespace {
using nlohmann::json;

std::string b64(const unsigned char* p, std::size_t n) {
  std::string out(4 * ((n + 2) / 3), '\0');
  const int w =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), p, static_cast<int>(n));
  out.resize(static_cast<std::size_t>(std::max(w, 0)));
  return out;
}

std::optional<std::string> unb64(const std::string& s) {
  if (s.empty() || s.size() % 4 != 0) return std::nullopt;
  std::string out(s.size() / 4 * 3, '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0) return std::nullopt;
  std::size_t len = static_cast<std::size_t>(n);
  for (std::size_t i = s.size(); i > 0 && s[i - 1] == '='; --i) --len;  // EVP counts the padding
  out.resize(len);
  return out;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::optional<json> parse(const std::string& text) {
  std::string why;
  auto j = json_reader::parse_limited(text, {}, &why);
  if (!j || !j->is_object()) return std::nullopt;
  return j;
}

Result<std::string> random_hex(int bytes) {
  unsigned char b[32];
  if (bytes > 32 || RAND_bytes(b, bytes) != 1)
    return make_error(errc::cli::kFlag, "the OS random generator failed");
  static const char* kHex = "0123456789abcdef";
  std::string t;
  for (int i = 0; i < bytes; ++i) {
    t += kHex[b[i] >> 4];
    t += kHex[b[i] & 15];
  }
  return t;
}

bool valid_host(const std::string& h) {
  return !h.empty() && h.size() <= 253 &&
         h.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-:[]") == std::string::npos;
}

}  // namespace

const std::vector<std::string>& event_types() {
  static const std::vector<std::string> k{"video.completed", "video.failed", "video.cancelled"};
  return k;
}

std::string Url::origin() const {
  return scheme + "://" + host + ":" + std::to_string(port);
}

std::variant<Url, std::string> parse_url(const std::string& field, const std::string& s) {
  const auto bad = [&](const char* why) {
    return fmt::format(
        "{}: expected an absolute http:// or https:// URL such as "
        "\"https://hooks.example.com/h3pipe\" ({}), got \"{}\"",
        field, why, s.substr(0, 200));
  };
  if (s.size() > 2048) return bad("at most 2048 characters");
  for (unsigned char c : s)
    if (c <= 0x20 || c >= 0x7f) return bad("no spaces or control characters");
  Url u;
  const auto sep = s.find("://");
  if (sep == std::string::npos) return bad("no scheme");
  u.scheme = lower(s.substr(0, sep));
  if (u.scheme != "http" && u.scheme != "https") return bad("the scheme must be http or https");
  const std::string rest = s.substr(sep + 3);
  const auto slash = rest.find_first_of("/?#");
  std::string authority = rest.substr(0, slash);
  u.path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (u.path[0] != '/') u.path = "/" + u.path;
  if (const auto hash = u.path.find('#'); hash != std::string::npos) u.path.resize(hash);
  if (authority.find('@') != std::string::npos) return bad("no user:password@ in it");
  u.port = u.scheme == "https" ? 443 : 80;
  std::string host = authority;
  const auto close = authority.rfind(']');
  const auto colon = authority.rfind(':');
  if (colon != std::string::npos && (close == std::string::npos || colon > close)) {
    host = authority.substr(0, colon);
    const std::string p = authority.substr(colon + 1);
    if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(p) < 1 || std::stoi(p) > 65535)
      return bad("the port must be 1-65535");
    u.port = std::stoi(p);
  }
  u.host = lower(host);
  if (!valid_host(u.host)) return bad("a host name or address");
  return u;
}

Result<std::string> new_secret() {
  unsigned char b[32];
  if (RAND_bytes(b, sizeof b) != 1)
    return make_error(errc::cli::kFlag, "the OS random generator failed; no secret was made");
  return "whsec_" + b64(b, sizeof b);
}

std::string sign(const std::string& secret, const std::string& id, long long timestamp_s,
                 const std::string& body) {
  const std::string b = secret.rfind("whsec_", 0) == 0 ? secret.substr(6) : secret;
  auto key = unb64(b);
  if (!key) return "";
  const std::string msg = id + "." + std::to_string(timestamp_s) + "." + body;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key->data(), static_cast<int>(key->size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len);
  return "v1," + b64(mac, len);
}

Result<Endpoint> add_endpoint(queue::Redis& r, const std::string& url, const std::string& user,
                              const std::string& events) {
  auto u = parse_url("URL", url);
  if (auto* e = std::get_if<std::string>(&u)) return make_error(errc::cli::kFlag, "{}", *e);
  Endpoint ep;
  ep.url = url;
  ep.user = user;
  if (!user.empty() &&
      (user.size() > 128 || user.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
                                                   "vwxyz0123456789._-") != std::string::npos))
    return make_error(errc::cli::kFlag,
                      "--user: expected a token name ([A-Za-z0-9._-], at most 128), got \"{}\"",
                      user);
  std::string rest = events;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string t = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    if (t.empty()) continue;
    if (std::find(event_types().begin(), event_types().end(), t) == event_types().end())
      return make_error(errc::cli::kFlag,
                        "--events: unknown event type \"{}\" (expected a comma-separated list of "
                        "video.completed, video.failed, video.cancelled)",
                        t);
    if (std::find(ep.events.begin(), ep.events.end(), t) == ep.events.end()) ep.events.push_back(t);
  }
  if (ep.events.empty()) ep.events = event_types();
  auto id = random_hex(8);
  if (!id.ok()) return id.error();
  ep.id = "we_" + *id;
  auto secret = new_secret();
  if (!secret.ok()) return secret.error();
  ep.secret = *secret;
  ep.created_ms = state::now_ms();
  const json j = {{"id", ep.id},         {"url", ep.url},       {"user", ep.user},
                  {"events", ep.events}, {"secret", ep.secret}, {"created_ms", ep.created_ms}};
  if (auto s = r.command({"HSET", kEndpointsKey, ep.id, j.dump()}); !s.ok()) return s.error();
  // The group exists from the first endpoint on, so no terminal event after it is missed even
  // before an API replica runs (the dispatcher creates it too).
  if (auto s = queue::xgroup_create(r, keys::terminal_events(), kGroup, "$"); !s.ok())
    return s.error();
  return ep;
}

Result<std::vector<Endpoint>> list_endpoints(queue::Redis& r) {
  auto all = queue::hgetall(r, kEndpointsKey);
  if (!all.ok()) return all.error();
  std::vector<Endpoint> out;
  for (const auto& [id, text] : *all) {
    auto j = parse(text);
    if (!j) continue;
    Endpoint ep{id, j->value("url", ""),    j->value("user", ""),
                {}, j->value("secret", ""), j->value("created_ms", 0LL)};
    if (j->contains("events") && (*j)["events"].is_array())
      for (const auto& t : (*j)["events"])
        if (t.is_string()) ep.events.push_back(t.get<std::string>());
    out.push_back(std::move(ep));
  }
  std::sort(out.begin(), out.end(),
            [](const Endpoint& a, const Endpoint& b) { return a.created_ms < b.created_ms; });
  return out;
}

Result<int> remove_endpoint(queue::Redis& r, const std::string& id_or_url) {
  auto all = list_endpoints(r);
  if (!all.ok()) return all.error();
  int n = 0;
  for (const auto& ep : *all)
    if (ep.id == id_or_url || ep.url == id_or_url) {
      auto d = queue::int_command(r, {"HDEL", kEndpointsKey, ep.id});
      if (!d.ok()) return d.error();
      n += static_cast<int>(*d);
    }
  return n;
}

Result<std::string> allow_host(queue::Redis& r, const std::string& host_in) {
  const std::string host = lower(host_in);
  if (!valid_host(host))
    return make_error(errc::cli::kFlag,
                      "HOST: expected a host name or address such as hooks.example.com, got "
                      "\"{}\"",
                      host_in);
  if (auto held = host_secret(r, host); !held.ok())
    return held.error();
  else if (*held)
    return **held;
  auto secret = new_secret();
  if (!secret.ok()) return secret.error();
  const json j = {{"host", host}, {"secret", *secret}, {"created_ms", state::now_ms()}};
  auto set = queue::hsetnx(r, kAllowKey, host, j.dump());
  if (!set.ok()) return set.error();
  if (!*set) {  // another operator's at the same time: theirs stands
    auto held = host_secret(r, host);
    if (!held.ok()) return held.error();
    if (*held) return **held;
  }
  if (auto s = queue::xgroup_create(r, keys::terminal_events(), kGroup, "$"); !s.ok())
    return s.error();
  return *secret;
}

Result<int> disallow_host(queue::Redis& r, const std::string& host) {
  auto d = queue::int_command(r, {"HDEL", kAllowKey, lower(host)});
  if (!d.ok()) return d.error();
  return static_cast<int>(*d);
}

Result<std::vector<std::string>> allowed_hosts(queue::Redis& r) {
  auto all = queue::hgetall(r, kAllowKey);
  if (!all.ok()) return all.error();
  std::vector<std::string> out;
  for (const auto& [h, _] : *all) out.push_back(h);
  return out;
}

Result<std::optional<std::string>> host_secret(queue::Redis& r, const std::string& host) {
  auto v = queue::hget(r, kAllowKey, lower(host));
  if (!v.ok()) return v.error();
  if (!*v) return std::optional<std::string>{};
  auto j = parse(**v);
  if (!j || !j->contains("secret")) return std::optional<std::string>{};
  return std::optional<std::string>{(*j)["secret"].get<std::string>()};
}

Result<std::optional<std::string>> check_request_url(queue::Redis& r, const std::string& url) {
  using Out = std::optional<std::string>;
  auto u = parse_url("webhook_url", url);
  if (auto* e = std::get_if<std::string>(&u)) return Out{*e};
  auto s = host_secret(r, std::get<Url>(u).host);
  if (!s.ok()) return s.error();
  if (!*s)
    return Out{
        fmt::format("webhook_url: the host \"{}\" is not on the operator's webhook "
                    "allowlist (`h3pipe webhook allow HOST`); this API sends requests "
                    "only to hosts the operator allowed",
                    std::get<Url>(u).host)};
  return Out{};
}

Result<std::vector<DeadLetter>> list_dead(queue::Redis& r) {
  auto all = queue::hgetall(r, kDeadKey);
  if (!all.ok()) return all.error();
  std::vector<DeadLetter> out;
  for (const auto& [id, text] : *all) {
    auto j = parse(text);
    if (!j) continue;
    DeadLetter d{id,
                 j->value("url", ""),
                 j->value("type", ""),
                 j->value("last_error", ""),
                 j->value("attempts", 0),
                 j->value("first_ms", 0LL),
                 j->value("dead_ms", 0LL)};
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(),
            [](const DeadLetter& a, const DeadLetter& b) { return a.dead_ms < b.dead_ms; });
  return out;
}

Result<std::size_t> pending(queue::Redis& r) {
  auto n = queue::int_command(r, {"HLEN", kOutboxKey});
  if (!n.ok()) return n.error();
  return static_cast<std::size_t>(*n);
}

Result<int> redeliver(queue::Redis& r, const std::vector<std::string>& ids) {
  auto all = queue::hgetall(r, kDeadKey);
  if (!all.ok()) return all.error();
  std::vector<std::pair<std::string, std::string>> chosen;
  if (ids.empty()) chosen.assign(all->begin(), all->end());
  for (const auto& id : ids) {
    auto it = all->find(id);
    if (it == all->end())
      return make_error(
          errc::cli::kFlag,
          "ID: \"{}\" is not a dead-lettered delivery (expected a msg_... id from the "
          "dead lines of `h3pipe webhook list`)",
          id);
    chosen.push_back(*it);
  }
  const long long now = state::now_ms();
  std::vector<std::vector<std::string>> cmds;
  for (const auto& [id, text] : chosen) {
    auto j = parse(text);
    if (!j) continue;
    j->erase("dead_ms");
    (*j)["attempts"] = 0;
    (*j)["first_ms"] = now;  // the give-up window starts again
    cmds.push_back({"HSET", kOutboxKey, id, j->dump()});
    cmds.push_back({"ZADD", kDueKey, "NX", std::to_string(now), id});
    cmds.push_back({"HDEL", kDeadKey, id});
  }
  if (cmds.empty()) return 0;
  if (auto t = queue::transaction(r, cmds); !t.ok()) return t.error();
  return static_cast<int>(cmds.size() / 3);
}

}  // namespace h3pipe::api::webhooks
