#pragma once
// What the video decoder on the CPU (vae_decoder.cpp) and the one on the device
// (cuda/decoders.cpp) share beside their kernels, so that both cut a clip the same way: the
// constants the memory plan and the seams depend on, the tiles of a DecodePlan, the output
// frames of a segment, and the bookkeeping of the frames handed to the sink.  Internal to
// common/model.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/core/error_codes.h"
#include "common/core/result.h"
#include "common/model/model.h"

namespace h3pipe::model {

inline constexpr int kResChunk = 4;  // frames per residual-block pass (bounds its temporaries)
// Receptive radius in latent pixels: conv_in + res0 (3) + 1/8 stage (1.5) + 1/4 stage (0.75) +
// 1/2 stage (0.25) + full-resolution convs (0.125), rounded up.
inline constexpr int kReceptiveRadius = 6;

// Half-width (latent pixels) of the blend zone at a seam: where both tiles are exact when the
// overlap allows it, else half the overlap (approximate seams).
inline int blend_width(int overlap) {
  return overlap > kReceptiveRadius ? overlap - kReceptiveRadius : overlap / 2;
}

// One spatial tile's region in latent pixels: its core and the core extended by the overlap.
struct TileRect {
  int y0, y1, x0, x1;
  int ey0, ey1, ex0, ex1;
  int eh() const { return ey1 - ey0; }
  int ew() const { return ex1 - ex0; }
};

// The tiles of an H x W latent frame under `plan`, row by row.
inline std::vector<TileRect> tile_rects(const DecodePlan& plan, int H, int W, int overlap) {
  std::vector<TileRect> out;
  for (int y = 0; y < H; y += plan.tile_h)
    for (int x = 0; x < W; x += plan.tile_w) {
      TileRect t{};
      t.y0 = y, t.y1 = std::min(H, y + plan.tile_h), t.x0 = x, t.x1 = std::min(W, x + plan.tile_w);
      t.ey0 = std::max(0, t.y0 - overlap), t.ey1 = std::min(H, t.y1 + overlap);
      t.ex0 = std::max(0, t.x0 - overlap), t.ex1 = std::min(W, t.x1 + overlap);
      out.push_back(t);
    }
  return out;
}

// Output frames of a segment of s latent frames: the clip's first latent frame gives one.
inline int segment_output_frames(int s, bool clip_start) {
  return clip_start ? 1 + 4 * (s - 1) : 4 * s;
}

// Hands finished rgb24 frames to the sink, never more than the job's `frames`.
class FrameEmitter {
 public:
  FrameEmitter(const FrameSink& sink, int frames, std::size_t frame_px)
      : sink_(sink), frames_(frames), frame_bytes_(frame_px * 3), last_(frame_bytes_) {}

  Status emit(const std::uint8_t* px) {
    if (emitted_ >= frames_) return Status::Ok();
    ++emitted_;
    std::copy_n(px, frame_bytes_, last_.data());
    return sink_({px, frame_bytes_});
  }
  // The causal decoder yields 1 + 4*(T-1) frames; a spec whose (frames-1) is not a multiple of 4
  // gets its last frame repeated (at most 3 times).
  Status finish() {
    while (emitted_ < frames_ && emitted_ > 0) {
      ++emitted_;
      H3_TRY(sink_({last_.data(), frame_bytes_}));
    }
    if (emitted_ != frames_)
      return make_error(errc::runtime::kPermanentInput, "decoder produced {} of {} frames",
                        emitted_, frames_);
    return Status::Ok();
  }
  int emitted() const { return emitted_; }
  bool done() const { return emitted_ >= frames_; }

 private:
  const FrameSink& sink_;
  const int frames_;
  const std::size_t frame_bytes_;
  std::vector<std::uint8_t> last_;
  int emitted_ = 0;
};

}  // namespace h3pipe::model
