#include "common/api/run_receipts.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "common/artifacts/artifacts.h"
#include "common/core/bounded_file.h"
#include "common/core/error_codes.h"
#include "common/core/json_parse.h"
#include "common/state/receipts.h"

namespace h3pipe::api {

Result<RunReceipts> run_receipts(queue::Redis* redis, const config::Cluster& c,
                                 const std::string& run_id, std::string redis_error) {
  auto dir = artifacts::join_under(c.output_root, {run_id});
  if (!dir.ok()) return dir.error();
  RunReceipts r;
  std::map<std::string, nlohmann::json> by_job;
  if (redis) {
    if (auto held = state::receipts(*redis, run_id); !held.ok()) {
      redis_error = held.error().message;
    } else {
      for (auto& [job, text] : *held) {
        auto j =
            json_reader::parse_json(text, "receipt of " + job + " in Redis", errc::report::kNone);
        if (j.ok())
          by_job[job] = std::move(*j);
        else
          r.warnings.push_back("receipt left out: " + j.error().message);
      }
    }
  }
  std::vector<nlohmann::json> disk;
  std::error_code ec;
  constexpr std::string_view kSuffix = ".pipeline.json";
  for (const auto& e : std::filesystem::directory_iterator(*dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= kSuffix.size() || !name.ends_with(kSuffix)) continue;
    if (by_job.count(name.substr(0, name.size() - kSuffix.size()))) continue;  // Redis's copy
    // A receipt that cannot be read is left out, with why (issue #35 D2: a deep one once
    // overflowed the stack of whoever read it).
    auto text = read_bounded_file(e.path(), {"a receipt", kMaxJsonFileBytes});
    auto j = text.ok() ? json_reader::parse_json(*text, e.path().string(), errc::report::kNone)
                       : Result<nlohmann::json>(text.error());
    if (j.ok())
      disk.push_back(std::move(*j));
    else
      r.warnings.push_back("receipt left out: " + j.error().message);
  }
  if (by_job.empty() && disk.empty())
    return make_error(errc::report::kNone, "no receipts of run {} in Redis{} or under {}", run_id,
                      redis_error.empty() ? "" : " (" + redis_error + ")", dir->string());
  const auto job_of = [](const nlohmann::json& j) {
    const auto it = j.is_object() ? j.find("jobId") : j.end();
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::stable_sort(disk.begin(), disk.end(), [&](const nlohmann::json& a, const nlohmann::json& b) {
    return job_of(a) < job_of(b);
  });
  r.receipts.reserve(by_job.size() + disk.size());
  for (auto& [_, j] : by_job) r.receipts.push_back(std::move(j));
  for (auto& j : disk) r.receipts.push_back(std::move(j));
  r.redis_error = std::move(redis_error);
  return r;
}

}  // namespace h3pipe::api
