#pragma once
// input_reference on POST /v1/videos (issue #37 item 1; docs/api.md): the uploaded image is
// checked by its bytes (PNG, JPEG or WebP, whatever its name or Content-Type say) and stored
// where `h3pipe run` reads a job's referenceImage: beneath the first of limits.input_roots
// (default <state_dir>/inputs) as api-uploads/<video id>/reference.<ext>, written atomically
// (artifacts::write_atomic with that root: no symlink or ".." below it is followed).  The name
// comes from the video id only, never from the client's filename, so nothing escapes the root.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::api {

// "png", "jpg" or "webp" from the file's first bytes; nullopt for anything else.
std::optional<std::string> sniff_image(std::string_view bytes);

struct StoredUpload {
  std::filesystem::path root;      // the input root it lies under
  std::filesystem::path relative;  // api-uploads/<id>/reference.<ext>: the spec's referenceImage
};

// Stores an image already sniffed as `ext` for video `id`.  Errors: no input root configured
// (limits.input_roots is []), an id that is not one path component, or the write's.
Result<StoredUpload> store_reference(const config::Cluster& c, const std::string& id,
                                     const std::string& ext, std::string_view bytes);
// Removes what store_reference wrote (a refused request leaves nothing behind).
void remove_reference(const StoredUpload& u);

}  // namespace h3pipe::api
