#pragma once
// GET /v1/videos/{id}/content?variant=thumbnail|spritesheet (issue #37 item 1): a JPEG of the
// first frame, and a sheet of up to kSheetFrames frames spread over the video (kSheetColumns per
// row, kSheetTileWidth pixels wide each), made from the MP4 with libav (common/media) and cached
// beside it as JOB.thumbnail.jpg / JOB.spritesheet.jpg (written atomically under the output
// root, remade when the MP4 is newer).
#include <filesystem>
#include <string>

#include "common/config/config.h"
#include "common/core/result.h"

namespace h3pipe::api {

inline constexpr int kSheetFrames = 10;
inline constexpr int kSheetColumns = 5;
inline constexpr int kSheetTileWidth = 160;

// The cached file beside `mp4` for `variant` ("thumbnail" or "spritesheet").
std::filesystem::path preview_path(const std::filesystem::path& mp4, const std::string& variant);

// The JPEG's path, made first when missing or older than the MP4.  Errors: media.* naming the
// MP4, or the write's.
Result<std::filesystem::path> preview(const config::Cluster& c, const std::filesystem::path& mp4,
                                      const std::string& variant);

}  // namespace h3pipe::api
