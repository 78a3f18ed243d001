#pragma once
// A video's progress and ETA from its run's events (#37 items 1 and 4): the share of the job's
// planned time that is done, each stage weighted by the time the pools' profiles plan for it
// (the mean over the pools of that stage that can run the job's class), the sampler's share
// filled step by step from its `step` events.  Never decreasing: computed over the events in
// stream order keeping the highest share seen (a retried stage starting again does not take a
// video back).  eta_s: the planned time left, with the running stage's rest measured from its own
// step rate when it reports steps.  Pure (events in, numbers out) apart from read_progress.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/queue/events.h"
#include "common/queue/redis.h"

namespace h3pipe::api {

// Planned seconds per stage (encode, sample, transfer, decode) for a job class.  A stage no pool
// plans (no profile) gets 0; when all are 0, fixed shares (5, 70, 5, 20) stand in.
struct StagePlan {
  double encode_s = 0, sample_s = 0, transfer_s = 0, decode_s = 0;
  double total() const { return encode_s + sample_s + transfer_s + decode_s; }
  double of(std::string_view stage) const;
  double before(std::string_view stage) const;  // the stages ahead of `stage`
};
StagePlan plan_for(const config::Cluster& c, std::string_view job_class);

struct Progress {
  int percent = 0;              // 0-100; 100 only once video.completed is seen
  std::optional<double> eta_s;  // seconds left; 0 when completed; none when failed/cancelled
  std::string stage, host, pool, attempt;  // of the latest stage event
  long long step = 0, steps = 0;           // the latest step event of that stage
  bool terminal = false;
};

// From one job's events in stream order (others' are skipped); now_ms: the wall clock.
Progress job_progress(const std::vector<queue::events::Event>& events, std::string_view job,
                      const StagePlan& plan, long long now_ms);

// The same from Redis: the run's events stream (at most kMaxProgressEvents entries read).
inline constexpr int kMaxProgressEvents = 4096;
Result<Progress> read_progress(queue::Redis& r, const std::string& run, const std::string& job,
                               const StagePlan& plan, long long now_ms);
// read_progress in two halves, to pipeline it with other reads: the command (XRANGE of the run's
// events), and the progress from its reply.
std::vector<std::string> progress_command(const std::string& run);
Progress progress_from(const queue::Reply& events, const std::string& job, const StagePlan& plan,
                       long long now_ms);

}  // namespace h3pipe::api
