#pragma once
// Decoded pictures and sound of a movie file, for measuring decoders against each other: RGB24
// frames streamed one at a time (a clip is never held whole), the PCM of its audio, and PNG
// encoding for the HTML page.  libav underneath; errors carry code compare.media naming the file.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::compare {

// Frames of a movie's first video stream, in presentation order, converted to RGB24.
// One thread at a time.
class VideoReader final {
 public:
  static Result<std::unique_ptr<VideoReader>> open(const std::filesystem::path& path);
  int width() const;
  int height() const;
  // The next frame into `rgb` (width*height*3 bytes); false once the stream is exhausted.
  Result<bool> next(std::vector<std::uint8_t>& rgb);
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;
  struct Impl;

 private:
  explicit VideoReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Frame `index` (0-based) of a movie as RGB24 (decodes up to it).
Result<std::vector<std::uint8_t>> read_frame(const std::filesystem::path& path, long long index,
                                             int* width, int* height);

// PCM of the first audio stream as interleaved float, channels as stored; `channels` 0 and no
// samples when the movie has no audio.
struct Pcm {
  int channels = 0;
  int sample_rate = 0;
  std::vector<float> samples;
};
Result<Pcm> read_audio(const std::filesystem::path& path);

// A PNG file's bytes for an RGB24 image.
Result<std::string> encode_png(int width, int height, std::span<const std::uint8_t> rgb);

}  // namespace h3pipe::compare
