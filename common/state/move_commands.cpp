#include "common/state/move_commands.h"

#include <google/protobuf/util/json_util.h>

#include <variant>

#include "common/queue/keys.h"
#include "common/state/receipts.h"
#include "common/state/state.h"
#include "common/state/task_entry.h"

namespace h3pipe::state {

namespace {

// Appends the commands of one operation of job `job` in run `run`.
class OpCommands {
 public:
  OpCommands(const std::string& run, const std::string& job, queue::Commands& out)
      : run_(run), job_(job), out_(out) {}

  void operator()(const op::RecordStage& o) {
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(o.record, &json);
    out_.push_back({"RPUSH", keys::history(run_, job_), json});
    out_.push_back({"HINCRBY", keys::job(run_, job_),
                    std::string("done:") + stage_key(o.record.stage()), "1"});
  }
  void operator()(const op::CountWritten& o) {
    out_.push_back(
        {"HINCRBY", keys::job(run_, job_), std::string("wrote:") + stage_key(o.stage), "1"});
  }
  void operator()(const op::KeepReceipt& o) {
    out_.push_back({"HSET", receipts_key(run_), job_, o.json});
  }
  void operator()(const op::Enqueue& o) { out_.push_back(task_xadd(o.stream, o.payload)); }
  void operator()(const op::SetError& o) {
    out_.push_back({"HSET", keys::job(run_, job_), "error", o.text});
  }
  void operator()(const op::DeadLetter& o) {
    out_.push_back(queue::dead_letter_record(stage_key(o.stage), run_, job_, o.reason, o.payload));
  }
  void operator()(const op::ClearAttempts&) {
    out_.push_back({"HDEL", keys::job(run_, job_), "attempts:encode", "attempts:sample",
                    "attempts:decode", "error"});
  }
  void operator()(const op::RegisterRejected& o) {
    const std::string at = std::to_string(o.at_ms);
    out_.push_back({"HSET", keys::job(run_, job_), "error", o.reason, "submitted_ms", at});
    out_.push_back({"HSETNX", keys::run(run_), "created_ms", at});
    out_.push_back({"ZADD", keys::runs(), "NX", at, run_});
    out_.push_back({"ZADD", keys::run_jobs(run_), "NX", at, job_});
  }

 private:
  const std::string& run_;
  const std::string& job_;
  queue::Commands& out_;
};

}  // namespace

queue::Commands op_commands(const std::string& run_id, const std::string& job_id, const Ops& ops) {
  queue::Commands out;
  OpCommands to(run_id, job_id, out);
  for (const auto& o : ops) std::visit(to, o);
  return out;
}

}  // namespace h3pipe::state
