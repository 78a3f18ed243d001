#pragma once
// A stage task's stream entry (docs/design.md, "The claim order"): XADD STREAM * task BYTES prio
// P user U cls C run R job J, the fields the claim order reads (common/queue/claim_order_lua.inc)
// taken from the task's spec.  Every writer of a stage task builds it here (the submission's encode
// task is the accept script's, with the same fields).
#include <string>
#include <vector>

#include "common/proto/h3pipe.pb.h"

namespace h3pipe::state {

// The XADD command of `task` (serialized as `payload`) onto `stream`.
std::vector<std::string> task_xadd(const std::string& stream, const pb::StageTask& task,
                                   const std::string& payload);
// The same from the payload alone (a payload that is no StageTask: the order's defaults).
std::vector<std::string> task_xadd(const std::string& stream, const std::string& payload);

}  // namespace h3pipe::state
