#include "cli/wait_progress.h"

#include <fmt/format.h>

#include <utility>

#include "common/queue/events.h"
#include "common/queue/keys.h"
#include "common/queue/streams.h"

namespace h3pipe::cli {

void StepProgress::poll(queue::Redis& r, const std::string& run) {
  namespace ev = queue::events;
  auto entries = queue::xrange_after(r, keys::run_events(run), after_, "+", kBatch);
  if (!entries.ok()) return;
  for (const auto& en : *entries) {
    after_ = en.id;
    const auto e = ev::from_fields(en.fields);
    if (e.job.empty()) continue;
    if (e.type == ev::kStep) {
      const std::string what = fmt::format("{} {}/{}", e.stage, e.step, e.steps);
      running_[e.job] = what;
      lines_.push_back(e.job + " " + what);
    } else if (e.type == ev::kStageFinished || e.type == ev::kStageStarted ||
               ev::is_terminal(e.type)) {
      running_.erase(e.job);
    }
  }
}

std::string StepProgress::summary() const {
  if (running_.empty()) return "";
  if (running_.size() == 1) return running_.begin()->second;
  std::string out;
  int shown = 0;
  for (const auto& [job, what] : running_) {
    if (shown == 2) break;
    out += fmt::format("{}{} ({})", shown ? ", " : "", what, job);
    ++shown;
  }
  if (running_.size() > 2) out += fmt::format(" +{}", running_.size() - 2);
  return out;
}

std::vector<std::string> StepProgress::take_lines() {
  return std::exchange(lines_, {});
}

}  // namespace h3pipe::cli
