#pragma once
// Where each stage's output lives: derived from (run id, job id, stage) alone (docs/design.md rule
// 1), so any worker, the resume command and the receipt agree without asking anyone.
//   <artifact_root>/<run>/<job>/cond.safetensors      encode
//   <artifact_root>/<run>/<job>/latent.h3latent       sample (and, on the decode host, transfer)
//   <output_root>/<run>/<job>.mp4                     decode
//   <output_root>/<run>/<job>.pipeline.json           receipt
#include <filesystem>
#include <string>

#include "common/artifacts/artifacts.h"
#include "common/config/config.h"

namespace h3pipe::paths {
namespace fs = std::filesystem;

inline Result<fs::path> job_dir(const config::Cluster& c, const std::string& run,
                                const std::string& job) {
  return artifacts::join_under(c.artifact_root, {run, job});
}
inline Result<fs::path> conditioning(const config::Cluster& c, const std::string& run,
                                     const std::string& job) {
  auto d = job_dir(c, run, job);
  if (!d.ok()) return d.error();
  return *d / "cond.safetensors";
}
inline Result<fs::path> latent(const config::Cluster& c, const std::string& run,
                               const std::string& job) {
  auto d = job_dir(c, run, job);
  if (!d.ok()) return d.error();
  return *d / "latent.h3latent";
}
inline Result<fs::path> mp4(const config::Cluster& c, const std::string& run,
                            const std::string& job) {
  H3_TRY(artifacts::validate_id("job id", job));
  auto d = artifacts::join_under(c.output_root, {run});
  if (!d.ok()) return d.error();
  return *d / (job + ".mp4");
}
inline Result<fs::path> receipt(const config::Cluster& c, const std::string& run,
                                const std::string& job) {
  H3_TRY(artifacts::validate_id("job id", job));
  auto d = artifacts::join_under(c.output_root, {run});
  if (!d.ok()) return d.error();
  return *d / (job + ".pipeline.json");
}

}  // namespace h3pipe::paths
