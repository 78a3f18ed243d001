#include "common/api/rate_limit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <unordered_map>

#include "common/queue/hashes.h"

namespace h3pipe::api {

std::optional<std::string> parse_rate_limits(const std::string& text, RateLimits& into) {
  RateLimits out = into;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = text.find(',', at);
    const std::string item =
        text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const auto eq = item.find('=');
    const std::string role = item.substr(0, eq == std::string::npos ? item.size() : eq);
    const std::string num = eq == std::string::npos ? "" : item.substr(eq + 1);
    char* end = nullptr;
    const double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
    const auto r = parse_role(role);
    if (!r || num.empty() || *end || !(v >= 0) || v > 1e6)
      return fmt::format(
          "--rate-limit: expected ROLE=N[,ROLE=N] with ROLE read, submit or admin and N requests "
          "per second >= 0 (0: unlimited), got \"{}\"",
          item);
    (*r == Role::kAdmin ? out.admin : *r == Role::kSubmit ? out.submit : out.read) = v;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  into = out;
  return std::nullopt;
}

std::optional<long long> window_verdict(long long prev, long long cur, long long elapsed_ms,
                                        double rate) {
  if (rate <= 0) return std::nullopt;
  const double f = std::clamp(static_cast<double>(elapsed_ms) / 1000.0, 0.0, 1.0);
  const double estimate = static_cast<double>(prev) * (1.0 - f) + static_cast<double>(cur);
  if (estimate <= rate) return std::nullopt;
  double wait_ms = 0;
  if (static_cast<double>(cur) >= rate) {
    // Not before the next second, where this one's count is weighted down: cur * (1 - g) <=
    // rate at g = 1 - rate / cur of that second.
    wait_ms = (1.0 - f) * 1000.0 + (1.0 - rate / static_cast<double>(cur)) * 1000.0;
  } else {
    // prev * (1 - f') + cur <= rate at f' = 1 - (rate - cur) / prev.
    const double f2 = 1.0 - (rate - static_cast<double>(cur)) / static_cast<double>(prev);
    wait_ms = (f2 - f) * 1000.0;
  }
  return std::max(1LL, static_cast<long long>(std::ceil(wait_ms - 1e-6)));
}

namespace {

// HGET the token's own limit, HINCRBY this second, HGET the last, HDEL the one before.
std::vector<std::vector<std::string>> rate_commands(const std::string& name, long long now_ms) {
  const long long sec = now_ms / 1000;
  const std::string base = name + ":";
  return {{"HGET", kTokenRatesKey, name},
          {"HINCRBY", kRateKey, base + std::to_string(sec), "1"},
          {"HGET", kRateKey, base + std::to_string(sec - 1)},
          {"HDEL", kRateKey, base + std::to_string(sec - 2)}};
}

// The verdict from the replies of rate_commands (from `at` in `rep`).
Result<RateVerdict> rate_verdict(queue::Redis& r, const TokenInfo& who, const RateLimits& limits,
                                 long long now_ms,
                                 const std::vector<std::optional<std::string>>& rep,
                                 std::size_t at) {
  auto str = [&](std::size_t i) { return at + i < rep.size() ? rep[at + i].value_or("") : ""; };
  RateVerdict v;
  v.limit = limits.of(who.role);
  if (const std::string own = str(0); !own.empty()) {
    char* end = nullptr;
    const double d = std::strtod(own.c_str(), &end);
    if (!*end && d >= 0) v.limit = d;
  }
  const long long n = std::atoll(str(1).c_str());
  const long long prev = std::atoll(str(2).c_str());
  v.retry_after_ms = window_verdict(prev, n, now_ms % 1000, v.limit);
  // A refused request is not counted: a client retrying after Retry-After gets in then, however
  // often it was refused before.
  if (v.retry_after_ms) {
    auto undo =
        r.command({"HINCRBY", kRateKey, who.name + ":" + std::to_string(now_ms / 1000), "-1"});
    if (!undo.ok()) return undo.error();
  }
  return v;
}

std::mutex names_mu;
std::unordered_map<std::string, std::string> names;  // token SHA-256 -> NAME (authorize)
constexpr std::size_t kMaxNames = 4096;              // then forgotten all at once

}  // namespace

Result<RateVerdict> rate_check(queue::Redis& r, const TokenInfo& who, const RateLimits& limits,
                               long long now_ms) {
  auto rep = queue::pipeline_values(r, rate_commands(who.name, now_ms));
  if (!rep.ok()) return rep.error();
  return rate_verdict(r, who, limits, now_ms, *rep, 0);
}

Result<Authorized> authorize(queue::Redis& r, const std::string& token, const RateLimits& limits,
                             long long now_ms, const std::vector<std::vector<std::string>>& reads) {
  Authorized out;
  if (token.empty() || token.size() > 256) return out;
  const std::string sha = token_sha256(token);
  std::string name;
  {
    std::lock_guard lk(names_mu);
    if (auto it = names.find(sha); it != names.end()) name = it->second;
  }
  if (!name.empty()) {
    std::vector<std::vector<std::string>> cmds = {{"HGET", kTokenHashesKey, sha},
                                                  {"HGET", kTokensKey, name}};
    for (auto& c : rate_commands(name, now_ms)) cmds.push_back(std::move(c));
    const std::size_t own = cmds.size();
    cmds.insert(cmds.end(), reads.begin(), reads.end());
    auto all = r.pipeline(cmds);
    if (!all.ok()) return all.error();
    std::vector<std::optional<std::string>> rep;
    for (std::size_t i = 0; i < own; ++i) rep.push_back(queue::as_scalar((*all)[i]));
    if (auto who = token_holder(sha, name, rep[0], rep[1])) {
      auto v = rate_verdict(r, *who, limits, now_ms, rep, 2);
      if (!v.ok()) return v.error();
      out.who = std::move(who);
      out.rate = *v;
      if (!v->retry_after_ms)
        out.read.assign(std::make_move_iterator(all->begin() + static_cast<long>(own)),
                        std::make_move_iterator(all->end()));
      return out;
    }
    // Revoked or replaced since: the count taken back, the hint forgotten, looked up afresh.
    auto undo = r.command({"HINCRBY", kRateKey, name + ":" + std::to_string(now_ms / 1000), "-1"});
    if (!undo.ok()) return undo.error();
    std::lock_guard lk(names_mu);
    names.erase(sha);
  }
  auto who = check_token(r, token);
  if (!who.ok()) return who.error();
  if (!*who) return out;
  {
    std::lock_guard lk(names_mu);
    if (names.size() >= kMaxNames) names.clear();
    names[sha] = (*who)->name;
  }
  auto v = rate_check(r, **who, limits, now_ms);
  if (!v.ok()) return v.error();
  out.who = std::move(*who);
  out.rate = *v;
  return out;
}

Status set_token_rate(queue::Redis& r, const std::string& name, double per_s) {
  auto rep = per_s < 0 ? r.command({"HDEL", kTokenRatesKey, name})
                       : r.command({"HSET", kTokenRatesKey, name, fmt::format("{:g}", per_s)});
  if (!rep.ok()) return rep.error();
  return {};
}

}  // namespace h3pipe::api
