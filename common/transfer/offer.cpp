#include "common/artifacts/artifacts.h"
#include "common/transfer/receiver.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;
namespace {

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

Result<fs::path> resolve_offer(const pb::Offer& o, const fs::path& root, std::uint64_t max_bytes) {
  if (auto s = artifacts::validate_id("offer.run_id", o.run_id()); !s.ok())
    return make_error(errc::transfer::kRefused, "{}", s.error().message);
  if (auto s = artifacts::validate_id("offer.job_id", o.job_id()); !s.ok())
    return make_error(errc::transfer::kRefused, "{}", s.error().message);
  if (o.size() == 0 || o.size() > max_bytes)
    return make_error(errc::transfer::kRefused, "offer.size: {} bytes, expected 1..{}", o.size(),
                      max_bytes);
  if (!is_hex64(o.sha256()))
    return make_error(errc::transfer::kRefused, "offer.sha256: expected 64 lower-case hex digits");
  if (o.transfer_id() == 0)
    return make_error(errc::transfer::kRefused, "offer.transfer_id: must be non-zero");
  std::vector<std::string> parts;
  std::string rel = o.relative_path();
  for (std::size_t at = 0; at <= rel.size();) {
    std::size_t slash = rel.find('/', at);
    if (slash == std::string::npos) slash = rel.size();
    parts.push_back(rel.substr(at, slash - at));
    at = slash + 1;
  }
  if (parts.empty() || parts.size() > 6)
    return make_error(errc::transfer::kRefused,
                      "offer.relative_path \"{}\": expected 1..6 components", rel);
  fs::path p = root;
  for (const auto& part : parts) {
    if (auto s = artifacts::validate_id("offer.relative_path", part); !s.ok())
      return make_error(errc::transfer::kRefused, "{} (in \"{}\")", s.error().message, rel);
    p /= part;
  }
  // One offer names one job: its file lies in that job's folder, and the decode task enqueued
  // once it is durable is that job's.  Otherwise a sender could replace another job's latent or
  // enqueue a decode of one job that reads another's file.
  if (parts.size() < 3 || parts[0] != o.run_id() || parts[1] != o.job_id())
    return make_error(errc::transfer::kRefused,
                      "offer.relative_path \"{}\": expected {}/{}/NAME, the offer's run and job",
                      rel, o.run_id(), o.job_id());
  if (o.next_task().run_id() != o.run_id() || o.next_task().job_id() != o.job_id())
    return make_error(
        errc::transfer::kRefused,
        "offer.next_task: names run \"{}\" job \"{}\", the offer run \"{}\" job \"{}\"",
        o.next_task().run_id(), o.next_task().job_id(), o.run_id(), o.job_id());
  return p;
}

}  // namespace h3pipe::transfer
