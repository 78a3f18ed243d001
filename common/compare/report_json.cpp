// compare.json's fields and the text table (docs/compare.md lists every field).
#include "common/compare/report_json.h"

#include <cmath>

namespace h3pipe::compare {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json num(double v) {
  return std::isfinite(v) ? json(v) : json(nullptr);
}
json idx(long long i) {
  return i < 0 ? json(nullptr) : json(i);
}
std::string rel(const fs::path& p, const fs::path& base) {
  return p.lexically_relative(base).generic_string();
}

std::string fmt_db(const json& v) {
  return v.is_null() ? std::string("inf") : fmt::format("{:.2f}", v.get<double>());
}

}  // namespace

json job_header(const Job& job, const std::string& latent_sha) {
  std::error_code ec;
  const auto bytes = fs::file_size(job.latent, ec);
  return {{"job_id", job.spec.job_id()},
          {"width", job.spec.width()},
          {"height", job.spec.height()},
          {"frames", job.spec.frames()},
          {"fps", job.spec.fps()},
          {"latent_profile", job.profile.name},
          {"latent",
           {{"path", job.latent.string()}, {"sha256", latent_sha}, {"bytes", ec ? 0 : bytes}}},
          {"results", json::array()}};
}

json result_json(const config::Pool& pool, const fs::path& mp4, const runtime::StageOutput& out,
                 double seconds, const fs::path& receipt, const std::string& reference_sha,
                 const Measured& m, const fs::path& out_dir, const json& ran_on) {
  const Summary& s = m.summary;
  json r = {{"decoder", pool.name},
            {"reference", m.is_reference},
            {"mp4", rel(mp4, out_dir)},
            {"mp4_sha256", out.sha256},
            {"mp4_bytes", out.bytes},
            {"receipt", rel(receipt, out_dir)},
            {"byte_equal_to_reference", out.sha256 == reference_sha},
            {"decode_seconds", seconds},
            {"device", out.device},
            {"where", ran_on.value("where", "")},
            {"ran_on_host", ran_on.value("host", "")},
            {"gpus", ran_on.value("gpus", json::array())},
            {"frames", s.frames},
            {"identical", s.identical},
            {"psnr_db", num(s.psnr_db)},
            {"psnr_min_db", num(s.psnr_min_db)},
            {"worst_frame", idx(s.worst_frame)},
            {"ssim_mean", s.ssim_mean},
            {"ssim_min", s.ssim_min},
            {"ssim_worst_frame", idx(s.ssim_worst_frame)},
            {"mae", s.mae},
            {"mae_max", s.mae_max},
            {"black_frames", s.black_frames},
            {"saturated_frames", s.saturated_frames},
            {"audio", nullptr}};
  if (m.audio)
    r["audio"] = {{"snr_db", num(m.audio->snr_db)},
                  {"lsd_db", m.audio->lsd_db},
                  {"max_abs", m.audio->max_abs},
                  {"samples", m.audio->samples},
                  {"length_difference", m.audio->length_difference}};
  if (!m.filter_frames.empty()) {
    json pf = json::array();
    for (std::size_t i = 0; i < m.filter_frames.size() && i < m.pixel_frames.size(); ++i) {
      const auto& f = m.filter_frames[i];
      const auto& p = m.pixel_frames[i];
      pf.push_back({{"psnr_db", num(f.psnr_db)},
                    {"mse", f.mse},
                    {"ssim", f.ssim},
                    {"mae", p.mae},
                    {"black_share", p.look.black_share},
                    {"saturated_share", p.look.saturated_share}});
    }
    r["per_frame"] = std::move(pf);
  }
  return r;
}

json summary_json(const json& doc) {
  json out = json::array();
  for (const auto& d : doc["decoders"]) {
    const std::string name = d["pool"];
    double secs = 0, ssim = 0, mae = 0, mse_db_inv = 0;
    double psnr_min = INFINITY;
    long long n = 0, black = 0, sat = 0, identical = 0, byte_equal = 0;
    bool reference = false;
    for (const auto& j : doc["jobs"])
      for (const auto& r : j["results"]) {
        if (r["decoder"] != name) continue;
        ++n;
        reference = r["reference"];
        secs += r["decode_seconds"].get<double>();
        ssim += r["ssim_mean"].get<double>();
        mae += r["mae"].get<double>();
        black += static_cast<long long>(r["black_frames"].size());
        sat += static_cast<long long>(r["saturated_frames"].size());
        identical += r["identical"].get<bool>() ? 1 : 0;
        byte_equal += r["byte_equal_to_reference"].get<bool>() ? 1 : 0;
        // Mean PSNR over jobs through their MSE (10^(-psnr/10) is MSE / 255^2).
        if (!r["psnr_db"].is_null()) mse_db_inv += std::pow(10.0, -r["psnr_db"].get<double>() / 10);
        if (!r["psnr_min_db"].is_null())
          psnr_min = std::min(psnr_min, r["psnr_min_db"].get<double>());
      }
    if (n == 0) continue;
    out.push_back(
        {{"decoder", name},
         {"reference", reference},
         {"device", nullptr},
         {"where", d.contains("ran_on") ? d["ran_on"].value("where", "") : ""},
         {"ran_on_host", d.contains("ran_on") ? d["ran_on"].value("host", "") : ""},
         {"jobs", n},
         {"decode_seconds_mean", secs / n},
         {"psnr_db", mse_db_inv == 0 ? json(nullptr) : json(-10 * std::log10(mse_db_inv / n))},
         {"psnr_min_db", num(psnr_min)},
         {"ssim_mean", ssim / n},
         {"mae", mae / n},
         {"black_frames", black},
         {"saturated_frames", sat},
         {"identical_jobs", identical},
         {"byte_equal_jobs", byte_equal}});
  }
  // The device each decoder ran on (its first job's).
  for (auto& s : out)
    for (const auto& j : doc["jobs"])
      for (const auto& r : j["results"])
        if (r["decoder"] == s["decoder"] && s["device"].is_null()) s["device"] = r["device"];
  return out;
}

std::string table(const json& doc) {
  std::string t =
      fmt::format("compare {}: reference {}, output {}\n", doc["run_id"].get<std::string>(),
                  doc["reference"].get<std::string>(), doc["out_dir"].get<std::string>());
  t += fmt::format(
      "{:<12} {:<14} {:>9} {:<8} {:>9} {:>9} {:>6} {:>8} {:>8} {:>6} {:>6} {:>6} {:>9}\n", "job",
      "decoder", "seconds", "device", "PSNR dB", "min dB", "worst", "SSIM", "SSIM min", "MAE",
      "black", "sat", "audio LSD");
  for (const auto& j : doc["jobs"])
    for (const auto& r : j["results"]) {
      const bool ref = r["reference"];
      std::string audio = "-";
      if (!r["audio"].is_null()) audio = fmt::format("{:.2f}", r["audio"]["lsd_db"].get<double>());
      t += fmt::format(
          "{:<12} {:<14} {:>9.2f} {:<8} {:>9} {:>9} {:>6} {:>8.5f} {:>8.5f} {:>6.2f} {:>6} {:>6} "
          "{:>9}\n",
          j["job_id"].get<std::string>(), r["decoder"].get<std::string>() + (ref ? " (ref)" : ""),
          r["decode_seconds"].get<double>(), r["device"].get<std::string>(),
          ref ? "-" : fmt_db(r["psnr_db"]), ref ? "-" : fmt_db(r["psnr_min_db"]),
          r["worst_frame"].is_null() ? "-" : std::to_string(r["worst_frame"].get<long long>()),
          r["ssim_mean"].get<double>(), r["ssim_min"].get<double>(), r["mae"].get<double>(),
          r["black_frames"].size(), r["saturated_frames"].size(), ref ? "-" : audio);
    }
  t += "summary (mean over jobs):\n";
  for (const auto& s : doc["summary"])
    t += fmt::format(
        "  {:<14} {:>8.2f} s  PSNR {} dB (worst frame {} dB)  SSIM {:.5f}  MAE {:.2f}  black {}  "
        "saturated {}\n",
        s["decoder"].get<std::string>() + (s["reference"].get<bool>() ? " (ref)" : ""),
        s["decode_seconds_mean"].get<double>(),
        s["reference"].get<bool>() ? "-" : fmt_db(s["psnr_db"]),
        s["reference"].get<bool>() ? "-" : fmt_db(s["psnr_min_db"]), s["ssim_mean"].get<double>(),
        s["mae"].get<double>(), s["black_frames"].get<long long>(),
        s["saturated_frames"].get<long long>());
  // Where each decoder ran: a builtin or exec pool decodes in this process, on this host.
  for (const auto& d : doc["decoders"])
    if (d.contains("ran_on"))
      t += fmt::format("  {} ran {} (host {}, device {})\n", d["pool"].get<std::string>(),
                       d["ran_on"].value("where", ""), d["ran_on"].value("host", ""),
                       d["ran_on"].value("device", ""));
  return t;
}

}  // namespace h3pipe::compare
