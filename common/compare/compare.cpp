// The comparison run: decode each latent with every decoder, measure against the reference.
#include "common/compare/compare.h"

#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <chrono>
#include <set>

#include "common/artifacts/artifacts.h"
#include "common/compare/quality.h"
#include "common/compare/report_json.h"
#include "common/core/sha256.h"
#include "common/runtime/runtime.h"

namespace h3pipe::compare {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSoftwareVersion = "0.1.0";  // as worker::Options::software_version

long long now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string spec_json(const pb::JobSpec& s) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = false;
  (void)google::protobuf::util::MessageToJsonString(s, &out, o);
  return out;
}

// Where a decode ran.  A comfyui pool's decode is a request to its server, so it runs on the
// pool's machine and GPUs; every other runtime (builtin, exec, sim) runs inside this process on
// the CLI's host, whatever the pool's host and gpus say: compare.json, the receipts and the page
// say so rather than credit the pool's GPUs with the seconds.
std::string cli_host() {
  char b[256] = {};
  if (::gethostname(b, sizeof b - 1) != 0) return "unknown";
  return b;
}

json ran_on(const config::Pool& pool, const std::string& runtime, const std::string& device) {
  if (runtime == "comfyui")
    return {{"where", "the pool's ComfyUI server"},
            {"local_to_cli", false},
            {"host", pool.host},
            {"device", device},
            {"gpus", pool.gpus}};
  const std::string host = cli_host();
  return {{"where", "local to the CLI"},
          {"local_to_cli", true},
          {"host", host},
          {"device", device},
          {"gpus", json::array()},
          {"note", fmt::format("the {} runtime decoded in the compare command's own process on {}, "
                               "not on pool {}'s host {} or its GPUs",
                               runtime, host, pool.name, pool.host)}};
}

// One decoder, loaded once for every job.
struct Decoder {
  const config::Pool* pool = nullptr;
  const config::RuntimeRef* runtime = nullptr;
  std::unique_ptr<runtime::StageRuntime> rt;
};

struct Decoded {
  fs::path mp4;
  runtime::StageOutput out;
  double seconds = 0;
  fs::path receipt;
  json ran;  // ran_on()
};

Result<Decoded> decode_one(const config::Cluster& c, Decoder& d, const Job& job,
                           const std::string& latent_sha, const Options& o) {
  runtime::StageContext ctx;
  ctx.run_id = o.run_id;
  ctx.spec = &job.spec;
  ctx.job_class = job.job_class;
  ctx.latent_profile = job.profile;
  ctx.input = job.latent;
  std::error_code ec;
  if (fs::is_regular_file(job.conditioning, ec)) ctx.conditioning = job.conditioning;
  ctx.root = o.out_dir;
  ctx.output = o.out_dir / d.pool->name / (job.spec.job_id() + ".mp4");
  ctx.host = d.pool->host;
  ctx.pool = d.pool->name;
  Decoded r;
  r.mp4 = ctx.output;
  const auto t0 = std::chrono::steady_clock::now();
  auto out = d.rt->run(ctx);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!out)
    return Error{out.error().code, fmt::format("decoder {} on job {}: {}", d.pool->name,
                                               job.spec.job_id(), out.error().message)};
  r.out = std::move(*out);
  r.ran = ran_on(*d.pool, d.runtime->name, r.out.device);
  // The receipt: everything needed to repeat this decode and check what it made.
  json rec = {
      {"format", "h3pipe.compare.receipt/1"},
      {"run_id", o.run_id},
      {"job_id", job.spec.job_id()},
      {"spec", json::parse(spec_json(job.spec), nullptr, false)},  // json-parse: own text
      {"latent_profile", job.profile.name},
      {"decoder",
       {{"pool", d.pool->name},
        {"host", d.pool->host},
        {"pool_gpus", d.pool->gpus},
        {"pool_gpu_model", d.pool->gpu_model},
        {"runtime", d.runtime->name},
        {"config_settings", d.runtime->settings}}},
      {"ran_on", r.ran},
      {"device", r.out.device},
      {"settings", r.out.settings},
      {"input", {{"path", job.latent.string()}, {"sha256", latent_sha}}},
      {"output", {{"path", r.mp4.string()}, {"sha256", r.out.sha256}, {"bytes", r.out.bytes}}},
      {"decode_seconds", r.seconds},
      {"finished_unix_ms", now_ms()},
      {"software_version", kSoftwareVersion}};
  r.receipt = o.out_dir / d.pool->name / (job.spec.job_id() + ".receipt.json");
  auto w = artifacts::write_atomic(artifacts::Root(o.out_dir), r.receipt, rec.dump(2) + "\n");
  if (!w) return w.error();
  return r;
}

}  // namespace

Status check_decoders(const config::Cluster& c, const Options& o) {
  if (o.decoders.empty())
    return make_error(errc::compare::kDecoder, "name at least one decoder (--decoder POOL)");
  std::set<std::string> seen;
  std::string decode_pools;
  for (const auto& p : c.pools)
    if (p.stage == config::StageKind::kDecode)
      decode_pools += (decode_pools.empty() ? "" : ", ") + p.name;
  for (const auto& n : o.decoders) {
    const config::Pool* p = c.find_pool(n);
    if (!p || p->stage != config::StageKind::kDecode)
      return make_error(
          errc::compare::kDecoder,
          "--decoder {}: no decode pool of that name in the config (decode pools: {})", n,
          decode_pools.empty() ? "none" : decode_pools);
    if (!seen.insert(n).second)
      return make_error(errc::compare::kDecoder, "--decoder {} is named twice", n);
  }
  if (!o.reference.empty() && !seen.count(o.reference))
    return make_error(errc::compare::kDecoder, "--reference {} is not one of the --decoder pools",
                      o.reference);
  return {};
}

Result<json> run(const config::Cluster& c, const std::vector<Job>& jobs, const Options& o) {
  H3_TRY(check_decoders(c, o));
  std::error_code ec;
  if (fs::exists(o.out_dir, ec) && !fs::is_empty(o.out_dir, ec))
    return make_error(
        errc::compare::kOutput,
        "{} is not empty: a comparison writes a folder of its own (choose another --out)",
        o.out_dir.string());
  fs::create_directories(o.out_dir, ec);
  if (ec)
    return make_error(errc::compare::kOutput, "cannot create {}: {}", o.out_dir.string(),
                      ec.message());
  const std::string reference = o.reference.empty() ? o.decoders.front() : o.reference;
  // Latents first: every one must verify against its sidecar before anything is decoded.
  std::vector<std::string> latent_sha;
  for (const auto& j : jobs) {
    auto v = artifacts::verify(j.latent);
    if (!v)
      return make_error(errc::compare::kLatent, "job {}: latent {} does not verify: {}",
                        j.spec.job_id(), j.latent.string(), v.error().message);
    latent_sha.push_back(*v);
  }
  std::vector<Decoder> decoders;
  for (const auto& n : o.decoders) {
    Decoder d;
    d.pool = c.find_pool(n);
    d.runtime = &c.runtime_for(*d.pool);
    runtime::FactoryArgs fa{&c, d.pool, &d.runtime->settings, 1};
    auto rt = runtime::make_runtime(config::StageKind::kDecode, d.runtime->name, fa);
    if (!rt) return Error{rt.error().code, fmt::format("decoder {}: {}", n, rt.error().message)};
    d.rt = std::move(*rt);
    decoders.push_back(std::move(d));
  }
  json doc = {{"format", "h3pipe.compare/1"},
              {"run_id", o.run_id},
              {"reference", reference},
              {"out_dir", o.out_dir.string()},
              {"command", o.command},
              {"started_unix_ms", now_ms()},
              {"software_version", kSoftwareVersion},
              {"decoders", json::array()},
              {"jobs", json::array()}};
  for (const auto& d : decoders)
    doc["decoders"].push_back({{"pool", d.pool->name},
                               {"host", d.pool->host},
                               {"pool_gpus", d.pool->gpus},
                               {"pool_gpu_model", d.pool->gpu_model},
                               {"runtime", d.runtime->name},
                               {"settings", d.runtime->settings}});
  for (std::size_t ji = 0; ji < jobs.size(); ++ji) {
    const Job& job = jobs[ji];
    std::vector<Decoded> outs;
    for (auto& d : decoders) {
      auto r = decode_one(c, d, job, latent_sha[ji], o);
      if (!r) return r.error();
      if (o.progress)
        o.progress(fmt::format("decoded {} with {} in {:.2f} s", job.spec.job_id(), d.pool->name,
                               r->seconds));
      outs.push_back(std::move(*r));
    }
    std::size_t ref_i = 0;
    for (std::size_t i = 0; i < decoders.size(); ++i)
      if (decoders[i].pool->name == reference) ref_i = i;
    const Decoded& ref = outs[ref_i];
    auto ref_pcm = read_audio(ref.mp4);
    if (!ref_pcm) return ref_pcm.error();
    json jj = job_header(job, latent_sha[ji]);
    for (std::size_t i = 0; i < decoders.size(); ++i) {
      Measured m;
      m.is_reference = i == ref_i;
      if (m.is_reference) {
        auto looks = scan(ref.mp4);
        if (!looks) return looks.error();
        m.summary.frames = looks->frames;
        m.summary.identical = true;
        m.summary.black_frames = looks->black_frames;
        m.summary.saturated_frames = looks->saturated_frames;
      } else {
        auto f = psnr_ssim(ref.mp4, outs[i].mp4);
        if (!f) return f.error();
        auto p = pixel_compare(ref.mp4, outs[i].mp4);
        if (!p) return p.error();
        m.summary = summarize(*f, *p);
        if (o.per_frame) {
          m.filter_frames = std::move(*f);
          m.pixel_frames = std::move(*p);
        }
        auto pcm = read_audio(outs[i].mp4);
        if (!pcm) return pcm.error();
        m.audio = audio_diff(*ref_pcm, *pcm);
      }
      jj["results"].push_back(result_json(*decoders[i].pool, outs[i].mp4, outs[i].out,
                                          outs[i].seconds, outs[i].receipt, ref.out.sha256, m,
                                          o.out_dir, outs[i].ran));
      if (!doc["decoders"][i].contains("ran_on")) doc["decoders"][i]["ran_on"] = outs[i].ran;
    }
    doc["jobs"].push_back(std::move(jj));
  }
  doc["summary"] = summary_json(doc);
  doc["finished_unix_ms"] = now_ms();
  auto w = artifacts::write_atomic(artifacts::Root(o.out_dir), o.out_dir / "compare.json",
                                   doc.dump(2) + "\n");
  if (!w) return w.error();
  return doc;
}

}  // namespace h3pipe::compare
