#include "common/worker/disk_files.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <map>
#include <utility>

#include "common/artifacts/artifacts.h"
#include "common/latent/latent.h"
#include "common/state/paths.h"

namespace h3pipe::worker {
namespace fs = std::filesystem;

DiskFiles::DiskFiles(const config::Cluster& c, std::string software_version, History history,
                     OnReceipt on_receipt)
    : cluster_(c),
      software_version_(std::move(software_version)),
      history_(std::move(history)),
      on_receipt_(std::move(on_receipt)) {}

Result<std::string> DiskFiles::verify(const fs::path& root, const fs::path& p) {
  return artifacts::verify(artifacts::Root(root), p);
}

void DiskFiles::remove(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
}

Result<std::uint64_t> DiskFiles::size(const fs::path& p) {
  std::error_code ec;
  auto n = fs::file_size(p, ec);
  if (ec) return make_error(errc::artifact::kSize, "{}: {}", p.string(), ec.message());
  return static_cast<std::uint64_t>(n);
}

Status DiskFiles::make_dirs(const fs::path& root, const fs::path& dir) {
  auto r = artifacts::make_dirs(artifacts::Root(root), dir);
  if (!r.ok()) return r.error();
  return {};
}

Status DiskFiles::fits(const fs::path& lat, const latent::Expected& want) {
  auto l = latent::read_latent(lat, &want);
  if (!l.ok()) return l.error();
  return {};
}

Result<std::string> DiskFiles::write_receipt(const pb::StageTask& t, const pb::StageRecord& own) {
  const auto& c = cluster_;
  auto path = paths::receipt(c, t.run_id(), t.job_id());
  if (!path.ok()) return path.error();
  auto hist = history_(t.run_id(), t.job_id());
  if (!hist.ok()) return hist.error();
  pb::Receipt r;
  r.set_run_id(t.run_id());
  r.set_job_id(t.job_id());
  *r.mutable_spec() = t.spec();
  std::uint64_t moved = 0;
  // Keep the last record of each stage (a re-delivered stage may have appended a skip record).
  std::map<int, pb::StageRecord> by_stage;
  for (const auto& h : *hist) by_stage[h.stage()] = h;
  by_stage[own.stage()] = own;
  for (const auto& [stage, rec] : by_stage) {
    *r.add_stages() = rec;
    if (stage == pb::STAGE_TRANSFER) moved += rec.bytes();
  }
  r.set_mp4_path(own.output_path());
  r.set_mp4_sha256(own.output_sha256());
  r.set_bytes_moved(moved);
  r.set_software_version(software_version_);
  // From the job's first enqueue (the first stage's start less its queue wait) to the decode's
  // end: what a user waits for its video (docs/report.md).
  if (!by_stage.empty()) {
    const auto& first = by_stage.begin()->second;
    const double from_ms =
        static_cast<double>(first.start_unix_ms()) - first.queue_wait_s() * 1000.0;
    r.set_end_to_end_s(std::max(0.0, (static_cast<double>(own.end_unix_ms()) - from_ms) / 1000.0));
  }
  // The real-time factor: seconds of pipeline per second of video (< 1: faster than real time).
  if (t.spec().fps() > 0) r.set_video_s(static_cast<double>(t.spec().frames()) / t.spec().fps());
  if (r.video_s() > 0) r.set_real_time_factor(r.end_to_end_s() / r.video_s());
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(r, &json, o);
  auto w = artifacts::write_atomic(artifacts::Root(std::filesystem::absolute(c.output_root)),
                                   std::filesystem::absolute(*path), json);
  if (w.ok() && on_receipt_) on_receipt_(r.end_to_end_s(), r.real_time_factor());
  if (!w.ok()) {
    // The error (io.*: the path and errno text; write_atomic left no .part) goes through the
    // engine's failed-attempt path, which records it as the job's reason.
    return rephrase(w.error(), "receipt: {}", w.error().message);
  }
  return json;
}

}  // namespace h3pipe::worker
