#pragma once
// `h3pipe compare` (docs/compare.md): the latents a run already produced, decoded again by every
// named decode pool (its runtime and settings, as the pool's own service would run them) into a
// separate folder, and each decoder's output measured against the reference decoder's.  The
// run's own outputs are never touched.  Nothing here knows Redis: the CLI hands in the jobs.
//
// Layout of the output folder (`out_dir`):
//   <pool>/<job>.mp4 (+ .sha256)          each decoder's output
//   <pool>/<job>.receipt.json (+ .sha256) what made it: spec, pool, runtime, settings, device,
//                                         latent and output SHA-256, seconds
//   compare.json (+ .sha256)              the results (fields: docs/compare.md)
// Errors: compare.decoder (a name that is no decode pool), compare.latent (a latent missing or
// failing its sidecar), compare.output (the folder is not empty), a decoder's own error (the
// runtime's code, naming pool and job), compare.filter / compare.media / compare.mismatch.
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/latent/profile.h"
#include "common/proto/h3pipe.pb.h"

namespace h3pipe::compare {

struct Job {
  pb::JobSpec spec;
  std::string job_class;
  latent::LatentProfile profile;
  std::filesystem::path latent;        // <artifact_root>/<run>/<job>/latent.h3latent
  std::filesystem::path conditioning;  // beside it; may not exist
};

struct Options {
  std::string run_id;
  std::vector<std::string> decoders;  // decode pool names, in report order (no repeats)
  std::string reference;              // one of decoders; empty = the first
  std::filesystem::path out_dir;      // must not exist or be empty
  std::vector<std::string> command;   // argv, recorded for repeating
  bool per_frame = true;              // per-frame figures in compare.json
  std::function<void(const std::string&)> progress;  // one line per decode; may be empty
};

// The names are decode pools of `c`, the reference is one of them: else compare.decoder.
Status check_decoders(const config::Cluster& c, const Options& o);

// Decodes every job with every decoder (jobs in order, decoders in order, one at a time) and
// returns compare.json's document, also written to out_dir/compare.json.
Result<nlohmann::json> run(const config::Cluster& c, const std::vector<Job>& jobs,
                           const Options& o);

// The text table of a compare.json document (one line per job and decoder, then the summary).
std::string table(const nlohmann::json& doc);

}  // namespace h3pipe::compare
