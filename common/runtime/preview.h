#pragma once
// A sampler's preview (#38 item 6): the middle frame of a video latent (C, T, H, W) projected to
// RGB by a fixed linear map (each third of the channels averaged into R, G and B, scaled around
// mid-grey), enlarged by pixel repetition to at most max_side pixels on its longer side, as a small
// baseline JPEG.  A look at where the sampler is going, not a decode: cheap (no VAE), bounded in
// size by the latent grid.  Returns the JPEG's base64 (what a `preview` event carries).
#include <string>
#include <string_view>

#include "common/core/result.h"

namespace h3pipe::runtime {

inline constexpr int kPreviewMaxSide = 128;

Result<std::string> latent_preview_jpeg_base64(const float* video, int channels, int t, int h,
                                               int w, int max_side = kPreviewMaxSide);

// A server's own preview image (ComfyUI's websocket frames: a JPEG or PNG, ~40-70 KB at 512 px)
// made as small as the sampler's: decoded with libav (media::read_image, from a memfd), shrunk
// bilinearly to at most max_side on its longer side (never enlarged; even sides), re-encoded as
// a baseline JPEG.  Errors: runtime.permanent_input for bytes that are not an image, or an image
// above 4096x4096 (what a server's preview never is).
Result<std::string> image_preview_jpeg_base64(std::string_view image,
                                              int max_side = kPreviewMaxSide);

}  // namespace h3pipe::runtime
