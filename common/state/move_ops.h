#pragma once
// What a move of the job state machine does beside the state change (state::Move::record and
// Move::next), said as what happens to the job: its history and counters, the task it enqueues,
// the reason it keeps.  Store::apply turns each into its Redis commands inside the move's Lua
// script (move_commands.cpp, the only place that knows their keys); an in-memory ledger applies
// them directly (tests/support/fake_stage_ports.h).  Each names its own job: the move's.
#include <string>
#include <variant>
#include <vector>

#include "common/proto/h3pipe.pb.h"

namespace h3pipe::state {

namespace op {

// The stage's record appended to the job's history, and done:<stage>++ (a stage completion).
struct RecordStage {
  pb::StageRecord record;
};
// wrote:<stage>++: this execution committed the stage's output (the chaos test's duplicate check).
struct CountWritten {
  pb::Stage stage = pb::STAGE_UNSPECIFIED;
};
// The job's receipt (JSON, state/receipts.h) kept in the run's receipts hash.
struct KeepReceipt {
  std::string json;
};
// A stage task (a serialized pb::StageTask) enqueued on a stage stream, with the fields the claim
// order reads (task_entry.h).
struct Enqueue {
  std::string stream, payload;
};
// The job's error field (the reason it failed or was cancelled).
struct SetError {
  std::string text;
};
// The task filed on the dead-letter stream with the reason (queue::dead_letter_record).
struct DeadLetter {
  pb::Stage stage = pb::STAGE_UNSPECIFIED;
  std::string reason, payload;
};
// A reopened job starts afresh: its attempts at every stage and its error cleared.
struct ClearAttempts {};
// A submission refused by validation becomes a failed job of the run: its reason and submission
// time, and the run registered (created, listed, the job in its order) if it was not.
struct RegisterRejected {
  std::string reason;
  long long at_ms = 0;
};

}  // namespace op

using Op = std::variant<op::RecordStage, op::CountWritten, op::KeepReceipt, op::Enqueue,
                        op::SetError, op::DeadLetter, op::ClearAttempts, op::RegisterRejected>;
using Ops = std::vector<Op>;

}  // namespace h3pipe::state
