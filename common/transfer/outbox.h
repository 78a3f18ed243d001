#pragma once
// How a sampler hands a finished latent to its host's transfer sender, and how nothing is lost
// across restarts:
//   1. notify_latent_ready() records the decode task in the outbox (OUTBOX/RUN/JOB.task, an atomic
//      file holding the serialized StageTask), then nudges the sender over a local ZeroMQ PUSH.
//   2. The sender scans the outbox when it starts (and periodically) and takes every record; it
//      removes a record once the receiver acknowledged the latent durable, and renames it to
//      JOB.task.failed (reason beside it in JOB.task.failed.txt) when the transfer is given up.
// Records are idempotent: the receiver answers an offer of a file it already holds with
// already_complete, so a record taken twice sends nothing twice.
#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"

namespace h3pipe::transfer {

std::filesystem::path record_path(const std::filesystem::path& outbox, const pb::StageTask& task);
// Atomic: written to this execution's own temporary JOB.task.p<pid>-<16 hex>.part, fsynced,
// renamed, the directory fsynced (#35 D6: two writers of one record never share a temporary, and
// a killed writer's temporary is removed by the next record of that job and by every outbox
// scan, once its pid is gone and it is kDeadTemporaryAge old).  Errors: id.* for bad run/job
// ids, io.*.
Status record_task(const std::filesystem::path& outbox, const pb::StageTask& task);
inline constexpr std::chrono::seconds kDeadTemporaryAge{60};
// In the directory `dir_fd`: removes the record temporaries (JOB.task.p<pid>-<hex>.part, and the
// older shared JOB.task.part) whose writer's pid no longer exists here and that nothing touched
// for `min_age`; only those of the record named `only_record` ("JOB.task") unless it is empty.
// Returns how many went.
std::size_t remove_dead_temporaries(int dir_fd, std::string_view only_record,
                                    std::chrono::seconds min_age);
// Every OUTBOX/*/*.task (and removes dead writers' temporaries there); unreadable records are
// reported in `problems` and skipped.
std::vector<pb::StageTask> scan_outbox(const std::filesystem::path& outbox,
                                       std::vector<Error>* problems = nullptr);
void remove_record(const std::filesystem::path& outbox, const pb::StageTask& task);
void fail_record(const std::filesystem::path& outbox, const pb::StageTask& task,
                 const std::string& reason);

// The sampler's call, once the latent and its sidecar are durable: records the task in `outbox`
// (when given) and sends it to the sender's notify endpoint (ipc:// or tcp://127.0.0.1:PORT).
// The notification is best effort (the record is what survives); it waits at most timeout_ms.
Status notify_latent_ready(zmq::context_t& ctx, const std::string& endpoint,
                           const pb::StageTask& task, const std::filesystem::path& outbox = {},
                           int timeout_ms = 1000);
// Same, with a short-lived context of its own (for callers without one).
Status notify_latent_ready(const std::string& endpoint, const pb::StageTask& task,
                           const std::filesystem::path& outbox = {}, int timeout_ms = 1000);

}  // namespace h3pipe::transfer
