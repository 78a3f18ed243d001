#include "common/api/run_access.h"

#include <fmt/format.h>

#include "common/artifacts/artifacts.h"
#include "common/core/error_codes.h"
#include "common/queue/hashes.h"
#include "common/state/state.h"

namespace h3pipe::api {

HttpError run_not_found(const std::string& id) {
  return {404, fmt::format("no run with id \"{}\"", id), "invalid_request_error", "id",
          "not_found"};
}

std::optional<HttpError> check_run_id(const std::string& id) {
  if (!artifacts::validate_id("id", id).ok()) return run_not_found(id);
  return std::nullopt;
}

std::optional<HttpError> run_or_404(queue::Redis& r, const std::string& id) {
  if (auto e = check_run_id(id)) return e;
  auto s = state::Store(r).run_status(id);
  if (!s.ok())
    return s.error().code == errc::run::kUnknown ? run_not_found(id) : redis_error(s.error());
  return std::nullopt;
}

std::optional<HttpError> may_change_run(queue::Redis& r, const std::string& run,
                                        const TokenInfo& who) {
  if (who.role == Role::kAdmin) return std::nullopt;
  auto owner = queue::hget(r, kRunOwnersKey, run);
  if (!owner.ok()) return redis_error(owner.error());
  std::string o = owner->value_or("");
  if (o.empty()) {
    auto v = queue::hget(r, video_key("video_" + run), "user");
    if (!v.ok()) return redis_error(v.error());
    o = v->value_or("");
  }
  if (o == who.name) return std::nullopt;
  return HttpError{
      403,
      fmt::format("run {} {}; token \"{}\" (role submit) may change only its own runs", run,
                  o.empty() ? "was not submitted over HTTP" : fmt::format("belongs to \"{}\"", o),
                  who.name),
      "permission_error", "id", "forbidden"};
}

}  // namespace h3pipe::api
