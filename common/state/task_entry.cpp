#include "common/state/task_entry.h"

namespace h3pipe::state {

std::vector<std::string> task_xadd(const std::string& stream, const pb::StageTask& t,
                                   const std::string& payload) {
  return {"XADD",
          stream,
          "*",
          "task",
          payload,
          "prio",
          std::to_string(t.spec().priority()),
          "user",
          t.spec().user(),
          "cls",
          t.spec().job_class(),
          "run",
          t.run_id(),
          "job",
          t.job_id()};
}

std::vector<std::string> task_xadd(const std::string& stream, const std::string& payload) {
  pb::StageTask t;
  if (!t.ParseFromString(payload)) t.Clear();
  return task_xadd(stream, t, payload);
}

}  // namespace h3pipe::state
