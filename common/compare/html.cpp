// The self-contained HTML report of a comparison.
#include "common/compare/html.h"

#include <algorithm>

#include "common/compare/frames.h"
#include "common/core/xml_escape.h"

namespace h3pipe::compare {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string base64(const std::string& in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    for (int k = 3; k >= 0; --k) out += kAlphabet[(v >> (6 * k)) & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string esc(const std::string& s) {
  return xml_escape(s);
}

std::string db(const json& v) {
  return v.is_null() ? "&infin;" : fmt::format("{:.2f}", v.get<double>());
}

Result<std::string> img(int w, int h, const std::vector<std::uint8_t>& rgb,
                        const std::string& caption) {
  auto png = encode_png(w, h, rgb);
  if (!png) return png.error();
  return fmt::format(
      "<figure><img alt=\"{0}\" "
      "src=\"data:image/png;base64,{1}\"><figcaption>{0}</figcaption></figure>",
      esc(caption), base64(*png));
}

std::string frames_list(const json& a) {
  if (a.empty()) return "none";
  std::string s;
  for (std::size_t i = 0; i < a.size() && i < 12; ++i)
    s += (i ? ", " : "") + std::to_string(a[i].get<long long>());
  if (a.size() > 12) s += fmt::format(" (+{})", a.size() - 12);
  return s;
}

// The page's head, styles and the opening paragraph.
std::string page_head(const json& doc) {
  std::string h = R"(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>h3pipe compare )" +
                  esc(doc["run_id"].get<std::string>()) + R"(</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #bbb;padding:.25em .6em;text-align:right}
th{background:#eee} td.l,th.l{text-align:left}
tr.ref td{background:#f4f8ff}
.strip{display:flex;flex-wrap:wrap;gap:.8em;align-items:flex-start}
figure{margin:0} figcaption{font-size:.8em;text-align:center}
img{image-rendering:pixelated;max-width:420px;border:1px solid #999}
</style></head><body>
)";
  h += fmt::format(
      "<h1>Decoder comparison of run {}</h1>\n<p>Reference decoder: <b>{}</b>. Output: {}. "
      "PSNR and SSIM from FFmpeg's psnr and ssim filters (per frame), MAE on 0-255 RGB; "
      "&infin; = identical frames.</p>\n",
      esc(doc["run_id"].get<std::string>()), esc(doc["reference"].get<std::string>()),
      esc(doc["out_dir"].get<std::string>()));
  return h;
}

// Where each decoder ran: the seconds and the device are that machine's, not necessarily the
// pool's (a builtin or exec pool decodes in the compare command's own process).
std::string ran_on_table(const json& doc) {
  std::string h =
      "<h2>Where each decoder ran</h2>\n<table id=\"ran-on\"><tr><th class=\"l\">decoder</th>"
      "<th class=\"l\">ran</th><th class=\"l\">host</th><th class=\"l\">device</th>"
      "<th class=\"l\">GPUs</th></tr>\n";
  for (const auto& d : doc["decoders"]) {
    if (!d.contains("ran_on")) continue;
    const json& r = d["ran_on"];
    std::string gpus;
    for (const auto& g : r.value("gpus", json::array()))
      gpus += (gpus.empty() ? "" : ", ") + (g.is_string() ? g.get<std::string>() : g.dump());
    h += fmt::format(
        "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>"
        "<td class=\"l\">{}</td><td class=\"l\">{}</td></tr>\n",
        esc(d["pool"].get<std::string>()), esc(r.value("where", "")), esc(r.value("host", "")),
        esc(r.value("device", "")),
        gpus.empty() ? std::string(r.value("local_to_cli", false) ? "none of the pool's" : "-")
                     : esc(gpus));
  }
  h += "</table>\n";
  return h;
}

// One row per decoder: its means over the jobs.
std::string summary_table(const json& doc) {
  std::string h =
      "<h2>Summary</h2>\n<table id=\"summary\"><tr><th "
      "class=\"l\">decoder</th><th>device</th><th>jobs</th>"
      "<th>decode s (mean)</th><th>PSNR dB</th><th>worst frame dB</th><th>SSIM</th><th>MAE</th>"
      "<th>black frames</th><th>saturated frames</th></tr>\n";
  for (const auto& s : doc["summary"]) {
    const bool ref = s["reference"];
    h += fmt::format(
        "<tr{}><td class=\"l\">{}{}</td><td>{}</td><td>{}</td><td>{:.2f}</td><td>{}</td><td>{}</td>"
        "<td>{:.5f}</td><td>{:.2f}</td><td>{}</td><td>{}</td></tr>\n",
        ref ? " class=\"ref\"" : "", esc(s["decoder"].get<std::string>()),
        ref ? " (reference)" : "",
        esc(s["device"].is_string() ? s["device"].get<std::string>() : ""),
        s["jobs"].get<long long>(), s["decode_seconds_mean"].get<double>(),
        ref ? "-" : db(s["psnr_db"]), ref ? "-" : db(s["psnr_min_db"]),
        s["ssim_mean"].get<double>(), s["mae"].get<double>(), s["black_frames"].get<long long>(),
        s["saturated_frames"].get<long long>());
  }
  h += "</table>\n";
  return h;
}

// One row per job and decoder.
std::string per_job_table(const json& doc) {
  std::string h =
      "<h2>Per job</h2>\n<table id=\"results\"><tr><th class=\"l\">job</th><th "
      "class=\"l\">decoder</th>"
      "<th>decode s</th><th>device</th><th>PSNR dB</th><th>min dB</th><th>worst "
      "frame</th><th>SSIM</th>"
      "<th>SSIM min</th><th>MAE</th><th>black</th><th>saturated</th><th>audio LSD "
      "dB</th><th>audio SNR dB</th><th>audio max |d|</th>"
      "<th class=\"l\">output SHA-256</th></tr>\n";
  for (const auto& j : doc["jobs"])
    for (const auto& r : j["results"]) {
      const bool ref = r["reference"];
      const json& a = r["audio"];
      h += fmt::format(
          "<tr{}><td class=\"l\">{}</td><td "
          "class=\"l\">{}</td><td>{:.2f}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td>{}</td><td>{:.5f}</td><td>{:.5f}</td><td>{:.2f}</td><td>{}</td><td>{}</td><td>{}</"
          "td><td>{}</td><td>{}</td>"
          "<td class=\"l\"><code>{}</code></td></tr>\n",
          ref ? " class=\"ref\"" : "", esc(j["job_id"].get<std::string>()),
          esc(r["decoder"].get<std::string>()) + (ref ? " (reference)" : ""),
          r["decode_seconds"].get<double>(), esc(r["device"].get<std::string>()),
          ref ? "-" : db(r["psnr_db"]), ref ? "-" : db(r["psnr_min_db"]),
          r["worst_frame"].is_null() ? "-" : std::to_string(r["worst_frame"].get<long long>()),
          r["ssim_mean"].get<double>(), r["ssim_min"].get<double>(), r["mae"].get<double>(),
          frames_list(r["black_frames"]), frames_list(r["saturated_frames"]),
          ref || a.is_null() ? "-" : fmt::format("{:.2f}", a.value("lsd_db", 0.0)),
          ref || a.is_null() ? "-" : db(a["snr_db"]),
          ref || a.is_null() ? "-" : fmt::format("{:.5f}", a["max_abs"].get<double>()),
          r["mp4_sha256"].get<std::string>().substr(0, 16));
    }
  h += "</table>\n";
  return h;
}

// Each decoder's worst frame beside the reference's same frame, and their difference.
Result<std::string> worst_frames(const json& doc, const fs::path& out_dir) {
  std::string h =
      "<h2>Worst frames</h2>\n<p>Each decoder's worst frame (lowest PSNR) beside the "
      "reference's "
      "same frame, and their difference |reference &minus; decoder| &times; " +
      std::to_string(kDiffGain) + ".</p>\n";
  int strips = 0;
  for (const auto& j : doc["jobs"]) {
    if (strips++ >= kMaxStripJobs) break;
    const json* ref = nullptr;
    for (const auto& r : j["results"])
      if (r["reference"].get<bool>()) ref = &r;
    if (!ref) continue;
    h += fmt::format("<h3>{}</h3>\n", esc(j["job_id"].get<std::string>()));
    for (const auto& r : j["results"]) {
      if (r["reference"].get<bool>()) continue;
      const long long w = r["worst_frame"].is_null() ? 0 : r["worst_frame"].get<long long>();
      int fw = 0, fh = 0;
      auto a = read_frame(out_dir / (*ref)["mp4"].get<std::string>(), w, &fw, &fh);
      if (!a) return a.error();
      auto b = read_frame(out_dir / r["mp4"].get<std::string>(), w, nullptr, nullptr);
      if (!b) return b.error();
      std::vector<std::uint8_t> d(a->size());
      for (std::size_t i = 0; i < d.size() && i < b->size(); ++i) {
        const int v = std::abs(int((*a)[i]) - int((*b)[i])) * kDiffGain;
        d[i] = static_cast<std::uint8_t>(std::min(v, 255));
      }
      const std::string dec = r["decoder"];
      h += "<div class=\"strip\">";
      for (auto [pix, cap] :
           {std::pair{&*a, fmt::format("{} (reference), frame {}",
                                       (*ref)["decoder"].get<std::string>(), w)},
            std::pair{&*b,
                      fmt::format("{}, frame {} ({} dB)", dec, w,
                                  r["psnr_min_db"].is_null()
                                      ? "inf"
                                      : fmt::format("{:.2f}", r["psnr_min_db"].get<double>()))},
            std::pair{&d, fmt::format("difference x{}", kDiffGain)}}) {
        auto tag = img(fw, fh, *pix, cap);
        if (!tag) return tag.error();
        h += *tag;
      }
      h += "</div>\n";
    }
  }
  return h;
}

}  // namespace

Result<std::string> render_html(const json& doc) {
  const fs::path out_dir = doc["out_dir"].get<std::string>();
  auto worst = worst_frames(doc, out_dir);
  if (!worst) return worst.error();
  return page_head(doc) + ran_on_table(doc) + summary_table(doc) + per_job_table(doc) + *worst +
         "</body></html>\n";
}

}  // namespace h3pipe::compare
