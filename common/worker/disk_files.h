#pragma once
// The engine's Files (engine.h) on this host's disk: the artifact roots, the latent check and the
// receipt JOB.pipeline.json (every stage's record: the chain of custody conditioning -> latent ->
// mp4), written atomically by the last stage before it acks.
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/worker/engine.h"

namespace h3pipe::worker {

class DiskFiles final : public Files {
 public:
  // The job's stage records so far (RedisTasks::history).
  using History = std::function<Result<std::vector<pb::StageRecord>>(const std::string& run_id,
                                                                     const std::string& job_id)>;
  // Told each receipt written: the job's end-to-end seconds and its real-time factor.
  using OnReceipt = std::function<void(double end_to_end_s, double real_time_factor)>;
  DiskFiles(const config::Cluster& c, std::string software_version, History history,
            OnReceipt on_receipt);

  Result<std::string> verify(const std::filesystem::path& root,
                             const std::filesystem::path& p) override;
  void remove(const std::filesystem::path& p) override;
  Result<std::uint64_t> size(const std::filesystem::path& p) override;
  Status make_dirs(const std::filesystem::path& root, const std::filesystem::path& dir) override;
  Status fits(const std::filesystem::path& latent, const latent::Expected& want) override;
  Result<std::string> write_receipt(const pb::StageTask& t, const pb::StageRecord& own) override;

 private:
  const config::Cluster& cluster_;
  std::string software_version_;
  History history_;
  OnReceipt on_receipt_;
};

}  // namespace h3pipe::worker
