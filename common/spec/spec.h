#pragma once
// Job specs: the proto3 JSON mapping of h3pipe.pb.JobSpec, validated at every door (CLI batch,
// the Redis submission stream).  Errors name the field and say what was expected.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/latent/latent.h"
#include "common/proto/h3pipe.pb.h"

namespace h3pipe::spec {

struct FieldError {
  std::string field;  // proto3 JSON name, e.g. "width"; "" for the whole line
  std::string reason;
  std::string to_string() const { return field.empty() ? reason : field + ": " + reason; }
};

inline constexpr std::uint32_t kDefaultFps = 24;  // a spec's fps when absent (0)
// A spec's priority lies in [-kMaxPriority, kMaxPriority] (docs/design.md, "The claim order").
inline constexpr int kMaxPriority = 1000;

// Parses one JSON object (unknown fields are errors).  Defaults: fps 24 (kDefaultFps), steps 6,
// frames 49, width 256, height 256 when absent (0).
Result<pb::JobSpec> parse_json(std::string_view json);
// What validate checks beyond the spec's own fields.  kSubmission also opens the referenceImage
// beneath limits.input_roots (input_file.h).  kTask is a stage worker checking a task's spec
// before it allocates anything (a task may be forged straight onto a stage stream): the same
// rules, except that the referenceImage is left to the runtime, which opens it beneath the roots
// at the time of use (common/runtime/inputs.h) on the host that reads it.
enum class Check { kSubmission, kTask };
// Every rule; empty = valid.  Width, height and frames are checked against the job's latent
// profile (docs/latent.md); this overload uses the builtin profile.
std::vector<FieldError> validate(const pb::JobSpec& s, const config::Limits& limits,
                                 Check check = Check::kSubmission);
// Every rule with the job's own latent profile (latent_profile below); an unknown
// params["latent_profile"] is an error on that field, and so is a jobClass the cluster does not
// define (known: "default" and the names under /classes).
std::vector<FieldError> validate(const pb::JobSpec& s, const config::Cluster& cluster,
                                 Check check = Check::kSubmission);

// The job's class: its jobClass, else the /classes entry its width, height, frames (and steps)
// match, else "default" (config::Cluster::class_of).
std::string job_class(const pb::JobSpec& s, const config::Cluster& cluster);
// The job's latent profile: params["latent_profile"], else its job class's, else the cluster's
// (config::Cluster::latent_profile_for).  Error config.latent_profile for an unknown name.
Result<latent::LatentProfile> latent_profile(const pb::JobSpec& s, const config::Cluster& cluster);
// What the one decode-host choice (dispatch::route_latent, dispatch::decode_hosts) takes from a
// job: its class (job_class) and its latent's float32 bytes by its own latent profile
// (latent_profile; an unknown one, refused at submission, counts as builtin) at its fps (0:
// kDefaultFps).  The one derivation for every live caller: the sampler's choice and `resume`
// (worker/decode_choice.h), the transfer sender's fallback (transfer/config_map.cpp).  The
// planner sizes a class by the class's geometry instead (dispatch::class_latent_bytes).
struct RouteInputs {
  std::string job_class;
  std::uint64_t latent_bytes = 0;
};
RouteInputs route_inputs(const pb::JobSpec& s, const config::Cluster& cluster);
// The job geometry as the latent reader takes it, and what every reader expects of the job's
// latent.
latent::JobSize job_size(const pb::JobSpec& s);
Result<latent::Expected> expected_latent(const pb::JobSpec& s, const config::Cluster& cluster);
// Canonical JSON (proto3 mapping) for storage and receipts.
std::string to_json(const pb::JobSpec& s);
nlohmann::json to_json_object(const pb::JobSpec& s);

struct BatchLineError {
  std::size_t line = 0;
  FieldError error;
};
struct Batch {
  std::vector<pb::JobSpec> specs;
  std::vector<std::size_t> lines;      // the batch line of each spec (specs[i] is on lines[i])
  std::vector<BatchLineError> errors;  // all of them; a batch with any error enqueues nothing
};
// Reads a JSON-lines batch (blank lines and lines starting with '#' skipped); duplicate job ids
// within the batch are errors; job ids default to "job-<line>".
Batch parse_batch(std::string_view text, const config::Limits& limits);
Batch parse_batch(std::string_view text, const config::Cluster& cluster);  // validate(s, cluster)

}  // namespace h3pipe::spec
