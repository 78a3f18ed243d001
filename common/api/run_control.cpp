#include "common/api/run_control.h"

#include "common/core/error_codes.h"
#include "common/state/pause.h"
#include "common/state/state.h"

namespace h3pipe::api {

Result<ControlOutcome> set_run_paused(queue::Redis& redis, const std::string& run_id, bool pause) {
  auto s = state::Store(redis).run_status(run_id);
  if (!s.ok() && s.error().code == errc::run::kUnknown) return ControlOutcome::kNoSuchRun;
  if (!s.ok()) return s.error();
  if (s->created_ms == 0 && s->total == 0 && s->expected == 0) return ControlOutcome::kNoSuchRun;
  if (auto st = pause ? state::pause_run(redis, run_id) : state::unpause_run(redis, run_id);
      !st.ok())
    return st.error();
  return ControlOutcome::kDone;
}

Result<bool> run_is_paused(queue::Redis& redis, const std::string& run_id) {
  return state::run_paused(redis, run_id);
}

Result<ControlOutcome> move_job_first(queue::Redis& redis, const std::string& run_id,
                                      const std::string& job_id, long long at_ms) {
  auto there = state::Store(redis).job_exists(run_id, job_id);
  if (!there.ok()) return there.error();
  if (!*there) return ControlOutcome::kNoSuchJob;
  if (auto st = state::move_first(redis, run_id, job_id, at_ms); !st.ok()) return st.error();
  return ControlOutcome::kDone;
}

}  // namespace h3pipe::api
