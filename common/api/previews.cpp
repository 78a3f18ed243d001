#include "common/api/previews.h"

#include <sys/stat.h>

#include "common/artifacts/artifacts.h"
#include "common/media/media.h"

namespace h3pipe::api {
namespace {

long long mtime_ns(const std::filesystem::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return -1;
  return static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

}  // namespace

std::filesystem::path preview_path(const std::filesystem::path& mp4, const std::string& variant) {
  auto p = mp4;
  return p.replace_extension("." + variant + ".jpg");
}

Result<std::filesystem::path> preview(const config::Cluster& c, const std::filesystem::path& mp4,
                                      const std::string& variant) {
  const auto out = preview_path(mp4, variant);
  const long long made = mtime_ns(out), source = mtime_ns(mp4);
  if (made >= 0 && made >= source) return out;
  std::vector<long long> at = {0};
  if (variant == "spritesheet") {
    auto info = media::probe_movie(mp4);
    if (!info.ok()) return info.error();
    const long long n = std::max(1LL, info->frames);
    const long long k = std::min<long long>(kSheetFrames, n);
    at.clear();
    for (long long i = 0; i < k; ++i) at.push_back(i * n / k);
  }
  auto frames = media::read_frames(mp4, at);
  if (!frames.ok()) return frames.error();
  const media::Image img = variant == "spritesheet"
                               ? media::sprite_sheet(*frames, kSheetTileWidth, kSheetColumns)
                               : frames->front();
  auto jpeg = media::encode_jpeg(img);
  if (!jpeg.ok()) return jpeg.error();
  auto w = artifacts::write_atomic(artifacts::Root(c.output_root), out, *jpeg);
  if (!w.ok()) return w.error();
  return out;
}

}  // namespace h3pipe::api
