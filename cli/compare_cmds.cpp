// `h3pipe compare RUN_ID --decoder A --decoder B ...`: decoder A/B on a run's latents
// (docs/compare.md).  The work is common/compare; this file finds the run's jobs in Redis, picks
// the output folder, and prints.
#include <CLI/CLI.hpp>
#include <ctime>
#include <iostream>
#include <memory>

#include "cli/cli.h"
#include "common/artifacts/artifacts.h"
#include "common/compare/compare.h"
#include "common/compare/html.h"
#include "common/media/media.h"
#include "common/spec/spec.h"
#include "common/state/paths.h"
#include "common/state/state.h"

namespace h3pipe::cli {
namespace {
namespace fs = std::filesystem;

struct CompareArgs {
  std::string run_id, reference, out, html;
  std::vector<std::string> decoders;
  int jobs = 0;
  bool json = false, no_per_frame = false;
};

// <output_root>/<run>/compare/<UTC time>: beside the run's outputs, never one of them.
fs::path default_out(const config::Cluster& c, const std::string& run) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
  fs::path base = c.output_root / run / "compare" / stamp;
  fs::path p = base;
  std::error_code ec;
  for (int i = 2; fs::exists(p, ec); ++i) p = base.string() + "-" + std::to_string(i);
  return p;
}

int cmd_compare(const Global& g, const CompareArgs& a, const std::vector<std::string>& argv) {
  media::set_libav_log_level(16);  // AV_LOG_ERROR: no x264 / psnr / ssim statistics per decode
  auto c = load_stack_cluster(g);
  if (!c.ok()) {
    fmt::print(stderr, "{}\n", c.error().message);
    return kExitUsage;
  }
  compare::Options o;
  o.run_id = a.run_id;
  o.decoders = a.decoders;
  o.reference = a.reference;
  o.command = argv;
  o.per_frame = !a.no_per_frame;
  o.progress = [](const std::string& line) { fmt::print(stderr, "compare: {}\n", line); };
  if (auto s = compare::check_decoders(*c, o); !s.ok()) {
    fail(s.error(), "compare");
    return kExitUsage;
  }
  if (auto s = artifacts::validate_id("run id", a.run_id); !s.ok()) {
    fail(s.error(), "compare");
    return kExitUsage;
  }
  auto redis = connect(g, *c);
  if (!redis.ok()) return fail(redis.error());
  state::Store store(**redis);
  if (auto rs = store.run_status(a.run_id); !rs.ok()) return fail(rs.error());
  auto rows = store.jobs(a.run_id);
  if (!rows.ok()) return fail(rows.error());
  std::vector<compare::Job> jobs;
  int without_latent = 0;
  for (const auto& j : *rows) {
    auto it = j.fields.find("spec");
    if (it == j.fields.end()) continue;  // refused at submission
    auto spec = spec::parse_json(it->second);
    if (!spec.ok()) continue;
    auto lat = paths::latent(*c, a.run_id, j.job_id);
    auto cond = paths::conditioning(*c, a.run_id, j.job_id);
    std::error_code ec;
    if (!lat.ok() || !cond.ok() || !fs::exists(*lat, ec)) {
      ++without_latent;
      continue;
    }
    auto prof = spec::latent_profile(*spec, *c);
    if (!prof.ok()) return fail(prof.error(), "compare " + j.job_id);
    compare::Job job;
    job.spec = *spec;
    job.job_class = spec::job_class(*spec, *c);
    job.profile = *prof;
    job.latent = *lat;
    job.conditioning = *cond;
    jobs.push_back(std::move(job));
    if (a.jobs > 0 && static_cast<int>(jobs.size()) >= a.jobs) break;
  }
  if (jobs.empty())
    return fail(
        make_error(errc::compare::kRun, "run {}: no job has a latent under {} ({} without one)",
                   a.run_id, c->artifact_root.string(), without_latent),
        "compare");
  o.out_dir = a.out.empty() ? default_out(*c, a.run_id) : fs::absolute(a.out);
  auto doc = compare::run(*c, jobs, o);
  if (!doc.ok()) return fail(doc.error(), "compare");
  if (!a.html.empty()) {
    auto page = compare::render_html(*doc);
    if (!page.ok()) return fail(page.error(), "compare --html");
    auto w = artifacts::write_atomic(fs::absolute(a.html), *page);
    if (!w.ok()) return fail(w.error(), "compare --html");
    fmt::print(stderr, "compare: wrote {}\n", a.html);
  }
  if (a.json)
    fmt::print("{}\n", doc->dump(2));
  else
    fmt::print("{}", compare::table(*doc));
  return kExitOk;
}

}  // namespace

void register_compare_commands(CLI::App& app, Global& g, int& rc) {
  // Lives as long as the app's callbacks (the options write into it during parse).
  auto args = std::make_shared<CompareArgs>();
  CompareArgs& a = *args;
  CLI::App* s = app.add_subcommand(
      "compare",
      "decode a run's latents with several decode pools and measure them against a reference "
      "(PSNR/SSIM via FFmpeg, MAE, black/saturated frames, audio, seconds); docs/compare.md");
  s->add_option("run_id", a.run_id, "the run whose latents to decode")->required();
  s->add_option("--decoder", a.decoders,
                "a decode pool of the config (repeat: at least two to compare)")
      ->required();
  s->add_option("--reference", a.reference,
                "the decoder the others are measured against (default: the first)");
  s->add_option("--jobs", a.jobs, "only the first N jobs with a latent (default: all)")
      ->check(CLI::PositiveNumber);
  s->add_option("--out", a.out, "output folder (default: <output_root>/<run>/compare/<UTC time>)");
  s->add_option("--html", a.html, "also write a self-contained HTML report to FILE");
  s->add_flag("--json", a.json, "print compare.json instead of the table");
  s->add_flag("--no-per-frame", a.no_per_frame, "leave the per-frame figures out of compare.json");
  s->callback([&g, &rc, args] {
    const CompareArgs& a = *args;
    std::vector<std::string> argv = {"h3pipe", "compare", a.run_id};
    for (const auto& d : a.decoders) {
      argv.push_back("--decoder");
      argv.push_back(d);
    }
    if (!a.reference.empty()) {
      argv.push_back("--reference");
      argv.push_back(a.reference);
    }
    if (a.jobs > 0) {
      argv.push_back("--jobs");
      argv.push_back(std::to_string(a.jobs));
    }
    rc = cmd_compare(g, a, argv);
  });
}

}  // namespace h3pipe::cli
