#pragma once
// Which runs a token may change over HTTP (runs_routes.cpp's cancel and resume,
// control_routes.cpp's pause, unpause and move): submit its own, admin any.
#include <optional>
#include <string>

#include "common/api/context.h"
#include "common/api/tokens.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

// Who submitted each run over HTTP: hash run -> token name (runs from the CLI have none: only
// admin changes them).
inline constexpr const char* kRunOwnersKey = "h3pipe:api:run_owners";

HttpError run_not_found(const std::string& id);
// A run id from the path: one path component (artifacts::validate_id), else 404.
std::optional<HttpError> check_run_id(const std::string& id);
// 404 unless the run is known to this Redis.
std::optional<HttpError> run_or_404(queue::Redis& r, const std::string& id);
// A run this token may change: submit its own (POST /v1/runs, or a video's), admin any; else 403.
std::optional<HttpError> may_change_run(queue::Redis& r, const std::string& run,
                                        const TokenInfo& who);

}  // namespace h3pipe::api
