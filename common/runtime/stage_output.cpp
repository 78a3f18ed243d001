#include "common/runtime/stage_output.h"

#include <array>
#include <fstream>

#include "common/artifacts/artifacts.h"
#include "common/latent/latent.h"
#include "common/media/media.h"

namespace h3pipe::runtime {
namespace fs = std::filesystem;

std::string settings_path(const FactoryArgs& a, config::StageKind stage) {
  if (!a.cluster || !a.pool) return "settings";
  if (a.pool->runtime) {
    for (std::size_t i = 0; i < a.cluster->pools.size(); ++i)
      if (&a.cluster->pools[i] == a.pool) return fmt::format("/pools/{}/runtime/settings", i);
    return fmt::format("/pools/{}/runtime/settings", a.pool->name);
  }
  return fmt::format("/stages/{}/runtime/settings", config::stage_name(stage));
}

latent::Expected expected_latent(const StageContext& ctx) {
  const pb::JobSpec& s = *ctx.spec;
  return {ctx.latent_profile, {s.width(), s.height(), s.frames(), s.fps()}};
}

namespace {

// The movie a decode stage made against the job: width x height x frames, and an audio stream
// when the job's latent profile has audio.  A movie of another size is what the decoder makes of
// this job on every attempt, so the mismatch is permanent.
Status check_movie(const fs::path& file, const pb::JobSpec& spec,
                   const latent::LatentProfile& profile) {
  auto m = media::probe_movie(file);
  if (!m.ok())
    return make_error(errc::runtime::kInvalidOutput, "{} is not a playable movie: {}",
                      file.string(), m.error().message);
  if (m->width != static_cast<int>(spec.width()) || m->height != static_cast<int>(spec.height()) ||
      m->frames != static_cast<long long>(spec.frames()))
    return make_error(
        errc::runtime::kPermanentOutputGeometry,
        "{}: decode output is {}x{}x{}, the job is {}x{}x{} (width x height x frames)",
        file.string(), m->width, m->height, m->frames, spec.width(), spec.height(), spec.frames());
  if (profile.has_audio() && !m->has_audio)
    return make_error(
        errc::runtime::kPermanentOutputGeometry,
        "{}: decode output has no audio stream; the job's latent profile {} has audio",
        file.string(), profile.name);
  return {};
}

}  // namespace

Status validate_stage_output(config::StageKind stage, const fs::path& file, const pb::JobSpec& spec,
                             const latent::LatentProfile& profile) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec))
    return make_error(errc::runtime::kNoOutput, "no output was written at {}", file.string());
  switch (stage) {
    case config::StageKind::kEncode: {
      auto t = latent::read_tensors(file);
      if (!t.ok())
        return make_error(errc::runtime::kInvalidOutput, "{} is not a valid tensor file: {}",
                          file.string(), t.error().to_string());
      if (t->empty())
        return make_error(errc::runtime::kInvalidOutput, "{} holds no tensors", file.string());
      return {};
    }
    case config::StageKind::kSample: {
      const latent::Expected want{profile,
                                  {spec.width(), spec.height(), spec.frames(), spec.fps()}};
      auto l = latent::read_latent(file, &want);
      // NaN/Inf is what the sampler made of this job: every retry makes it again.
      if (!l.ok() && l.error().code == errc::latent::kNonfinite.id)
        return make_error(errc::runtime::kPermanentNonfinite, "{}: {}", file.string(),
                          l.error().to_string());
      if (!l.ok())
        return make_error(errc::runtime::kInvalidOutput,
                          "{} is not a valid latent of profile {} for {}: {}", file.string(),
                          profile.name, latent::to_string(want.job), l.error().to_string());
      return {};
    }
    case config::StageKind::kDecode: {
      // ISO BMFF: the first box of an MP4 is `ftyp` (4-byte big-endian size, then the type).
      std::array<char, 8> head{};
      std::ifstream in(file, std::ios::binary);
      in.read(head.data(), head.size());
      if (in.gcount() != 8 || std::string_view(head.data() + 4, 4) != "ftyp")
        return make_error(errc::runtime::kInvalidOutput,
                          "{} is not an MP4 file (no ftyp box at the start)", file.string());
      std::uint32_t box = (std::uint32_t(std::uint8_t(head[0])) << 24) |
                          (std::uint32_t(std::uint8_t(head[1])) << 16) |
                          (std::uint32_t(std::uint8_t(head[2])) << 8) |
                          std::uint32_t(std::uint8_t(head[3]));
      if (box < 8 || box > fs::file_size(file, ec))
        return make_error(errc::runtime::kInvalidOutput, "{}: ftyp box size {} is invalid",
                          file.string(), box);
      return check_movie(file, spec, profile);
    }
  }
  return make_error(errc::runtime::kInvalidOutput, "unknown stage");
}

Result<StageOutput> commit_stage_output(config::StageKind stage, const StageContext& ctx,
                                        const fs::path& part, std::string device,
                                        nlohmann::json settings) {
  std::error_code ec;
  if (auto s = validate_stage_output(stage, part, *ctx.spec, ctx.latent_profile); !s.ok()) {
    fs::remove(part, ec);
    return s.error();
  }
  bool reused = false;
  const OutputTarget target = output_target(ctx, stage);
  auto sha = artifacts::commit_own_part(target.root, target.path, part, {}, &reused);
  if (!sha.ok()) {
    fs::remove(part, ec);
    return sha.error();
  }
  StageOutput out;
  out.reused = reused;
  out.sha256 = *sha;
  out.bytes = fs::file_size(ctx.output, ec);
  out.device = std::move(device);
  out.settings = std::move(settings);
  return out;
}

Result<StageOutput> write_stage_output(config::StageKind stage, const StageContext& ctx,
                                       std::span<const std::uint8_t> bytes, std::string device,
                                       nlohmann::json settings) {
  StageOutput out;
  const OutputTarget target = output_target(ctx, stage);
  auto sha = artifacts::write_once(target.root, target.path, bytes, &out.reused);
  if (!sha.ok()) return sha.error();
  out.sha256 = *sha;
  out.bytes = bytes.size();
  out.device = std::move(device);
  out.settings = std::move(settings);
  return out;
}

OutputTarget output_target(const StageContext& ctx, config::StageKind stage) {
  std::error_code ec;
  fs::path out = fs::absolute(ctx.output, ec);
  if (ec) out = ctx.output;
  if (!ctx.root.empty()) {
    fs::path root = fs::absolute(ctx.root, ec);
    return {artifacts::Root(ec ? ctx.root : root), out};
  }
  const fs::path dir = out.parent_path();
  const fs::path run_dir = stage == config::StageKind::kDecode ? dir : dir.parent_path();
  if (!ctx.run_id.empty() && run_dir.filename() == ctx.run_id && run_dir.has_parent_path() &&
      run_dir.parent_path() != run_dir)
    return {artifacts::Root(run_dir.parent_path()), out};
  return {artifacts::Root(dir), out};
}

Result<fs::path> prepare_output(const StageContext& ctx, config::StageKind stage) {
  const OutputTarget target = output_target(ctx, stage);
  const artifacts::Root& root = target.root;
  const fs::path dir = target.path.parent_path();
  std::error_code ec;
  fs::create_directories(root.path, ec);  // the configured root itself is trusted
  if (ec)
    return make_error(errc::io::kMkdir, "cannot create {}: {}", root.path.string(), ec.message());
  fs::path rel;
  if (dir != root.path) {
    auto r = artifacts::relative_beneath(root.path, dir);
    if (!r.ok()) return r.error();
    rel = *r;
  }
  auto fd = artifacts::open_dir_beneath(root.path, rel, !rel.empty());
  if (!fd.ok()) return fd.error();
  auto removed = artifacts::remove_dead_temps(root, target.path);
  if (!removed.ok()) return removed.error();
  return artifacts::own_part_path(ctx.output);
}

}  // namespace h3pipe::runtime
