#include "common/api/rate_limit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

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

Result<RateVerdict> rate_check(queue::Redis& r, const TokenInfo& who, const RateLimits& limits,
                               long long now_ms) {
  const long long sec = now_ms / 1000;
  const std::string base = who.name + ":";
  auto rep = queue::pipeline_values(r, {{"HGET", kTokenRatesKey, who.name},
                                        {"HINCRBY", kRateKey, base + std::to_string(sec), "1"},
                                        {"HGET", kRateKey, base + std::to_string(sec - 1)},
                                        {"HDEL", kRateKey, base + std::to_string(sec - 2)}});
  if (!rep.ok()) return rep.error();
  auto str = [&](std::size_t i) { return i < rep->size() ? (*rep)[i].value_or("") : ""; };
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
    auto undo = r.command({"HINCRBY", kRateKey, base + std::to_string(sec), "-1"});
    if (!undo.ok()) return undo.error();
  }
  return v;
}

Status set_token_rate(queue::Redis& r, const std::string& name, double per_s) {
  auto rep = per_s < 0 ? r.command({"HDEL", kTokenRatesKey, name})
                       : r.command({"HSET", kTokenRatesKey, name, fmt::format("{:g}", per_s)});
  if (!rep.ok()) return rep.error();
  return {};
}

}  // namespace h3pipe::api
