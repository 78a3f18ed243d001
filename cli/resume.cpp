// resume RUN_ID: common/api/resume_run.h (the code POST /v1/runs/{id}/resume runs), its outcome
// printed.
#include "cli/cli.h"
#include "common/api/resume_run.h"

namespace h3pipe::cli {

int cmd_resume(const Global& g, const std::string& run_id) {
  auto c = load_stack_cluster(g);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return 2;
  }
  auto redis = connect(g, *c);
  if (!redis.ok()) return fail(redis.error());
  auto out = api::resume_run(**redis, *c, run_id);
  if (!out.ok()) return fail(out.error());
  if (out->no_jobs) {
    fmt::print(stderr, "run {} has no jobs in this Redis\n", run_id);
    return 1;
  }
  for (const auto& n : out->notes) fmt::print(stderr, "{}\n", n);
  if (!out->no_decode_pool.empty()) {
    fmt::print(stderr, "resume {}: no decode pool in the config\n", out->no_decode_pool);
    return 1;
  }
  fmt::print("{}\n", out->summary(run_id));
  return 0;
}

}  // namespace h3pipe::cli
