#include "common/api/upload.h"

#include "common/artifacts/artifacts.h"
#include "common/core/error_codes.h"

namespace h3pipe::api {

std::optional<std::string> sniff_image(std::string_view b) {
  if (b.size() >= 8 && b.substr(0, 8) == std::string_view("\x89PNG\r\n\x1a\n", 8)) return "png";
  if (b.size() >= 3 && b.substr(0, 3) == std::string_view("\xff\xd8\xff", 3)) return "jpg";
  if (b.size() >= 12 && b.substr(0, 4) == "RIFF" && b.substr(8, 4) == "WEBP") return "webp";
  return std::nullopt;
}

Result<StoredUpload> store_reference(const config::Cluster& c, const std::string& id,
                                     const std::string& ext, std::string_view bytes) {
  if (c.limits.input_roots.empty())
    return make_error(errc::input::kRefused,
                      "input_reference: this cluster allows no input files (limits.input_roots "
                      "is [])");
  H3_TRY(artifacts::validate_id("id", id));
  StoredUpload u{c.limits.input_roots.front(),
                 std::filesystem::path("api-uploads") / id / ("reference." + ext)};
  std::error_code ec;
  std::filesystem::create_directories(u.root, ec);  // the operator's root itself, as start does
  auto w = artifacts::write_atomic(artifacts::Root(u.root), u.relative, bytes);
  if (!w.ok()) return w.error();
  return u;
}

void remove_reference(const StoredUpload& u) {
  std::error_code ec;
  const auto p = u.root / u.relative;
  std::filesystem::remove(p, ec);
  std::filesystem::remove(artifacts::sidecar_path(p), ec);
  std::filesystem::remove(p.parent_path(), ec);
}

}  // namespace h3pipe::api
