// The small public helpers of simulate.h that are not the event loop.
#include <fmt/format.h>

#include <algorithm>

#include "common/schedule/simulate.h"

namespace h3pipe::schedule {

const char* lane_kind_name(LaneKind k) {
  switch (k) {
    case LaneKind::kEncode:
      return "encode";
    case LaneKind::kSample:
      return "sample";
    case LaneKind::kTransfer:
      return "transfer";
    case LaneKind::kDecode:
      return "decode";
  }
  return "?";
}

double SimResult::completion_rate_per_hour() const {
  if (jobs < 2 || last_completion_s <= first_completion_s) return 0;
  return static_cast<double>(jobs - 1) / (last_completion_s - first_completion_s) * 3600;
}

std::vector<SimJob> make_jobs(std::size_t n, const std::string& job_class) {
  std::vector<SimJob> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = {fmt::format("job-{:04d}", i + 1), job_class, 0};
  return v;
}

Result<double> steady_throughput_per_hour(const config::Cluster& cluster,
                                          const std::string& job_class, const SimOptions& options,
                                          std::size_t jobs) {
  SimOptions o = options;
  o.record = false;
  auto r = simulate(cluster, make_jobs(std::max<std::size_t>(jobs, 2), job_class), o);
  if (!r.ok()) return r.error();
  return r->completion_rate_per_hour();
}

}  // namespace h3pipe::schedule
