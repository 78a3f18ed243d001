#pragma once
// Generic media I/O on libav (FFmpeg): a streaming MP4 writer (H.264 via libx264 + AAC) and an
// image reader (PNG/JPEG -> RGB24).  Knows nothing about latents or jobs.
//
// Threading: an Mp4Writer is used by one thread at a time.  Errors are returned (Status/Result),
// never thrown; messages name the file and libav's own text (av_strerror).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/core/result.h"

namespace h3pipe::media {

struct VideoParams {
  int width = 0, height = 0, fps = 24;  // width and height must be even (yuv420p)
  int crf = 23;
  std::string preset = "veryfast";
  std::string tune{};  // x264 tune ("zerolatency": no lookahead, no B-frames); empty = none
  // Encoder threads; 0 = libx264's own choice (about 1.5 per core).  Each open starts that many
  // threads, which costs more than it gains for small frames (see fast_video_params).
  int threads = 0;
};

struct AudioParams {
  int sample_rate = 48000;
  int channels = 2;  // only stereo is supported
  int bitrate = 128000;
  // libav's native AAC coder: "twoloop" (its default, best quality) or "fast" (several times
  // cheaper at modest bitrates, no cheaper at 128 kbit/s: see fast_audio_params).
  std::string coder = "twoloop";
};

// Settings for an MP4 written on a deadline (the sim decoder, previews): x264 ultrafast; for
// frames up to kSingleThreadPixels one encoder thread and tune zerolatency (thread start-up costs
// more than a thread gains there), x264's own frame threads above; the fast AAC coder at
// 48 kbit/s.  bench/media (bench_mp4) measures each part.
inline constexpr int kSingleThreadPixels = 320 * 240;
VideoParams fast_video_params(int width, int height, int fps);
AudioParams fast_audio_params();

// Streaming MP4 writer: H.264 (libx264, yuv420p) + AAC stereo, faststart (moov before mdat).
// Writes to `path` exactly (the caller passes artifacts::part_path(final) and commits it after
// finish()).  Frames get pts 0,1,2,... in a 1/fps time base, so the container holds exactly the
// frames added at exactly `fps`.  Destroying an unfinished writer closes the file without a
// trailer (the .part is garbage then, as docs/design.md rule 2 expects).
class Mp4Writer final {
 public:
  static Result<std::unique_ptr<Mp4Writer>> open(const std::filesystem::path& path,
                                                 const VideoParams& video,
                                                 const AudioParams& audio);
  // width*height*3 bytes, RGB24, row-major, no padding.
  Status add_frame(std::span<const std::uint8_t> rgb24);
  // Interleaved stereo float samples in [-1, 1] (clipped); any length, buffered to the encoder's
  // frame size.
  Status add_audio(std::span<const float> interleaved_stereo);
  // Flushes both encoders (pads the last audio frame) and writes the trailer.  Call once.
  Status finish();

  std::int64_t frames_written() const;
  std::int64_t audio_samples_written() const;  // per channel

  ~Mp4Writer();
  Mp4Writer(const Mp4Writer&) = delete;
  Mp4Writer& operator=(const Mp4Writer&) = delete;

  struct Impl;

 private:
  explicit Mp4Writer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A decoded image, RGB24 row-major.
struct Image {
  int width = 0, height = 0;
  std::vector<std::uint8_t> rgb;
};

// Decodes the first picture of a PNG or JPEG (anything libav's image demuxers read) to RGB24.
// Errors: "media.image" naming the file.
Result<Image> read_image(const std::filesystem::path& path);
// The same from a regular file the caller opened (a job's input, opened beneath its root by
// spec::open_input): libav reads it through pread on `fd` (a custom AVIOContext), never by a
// path, and the format comes from the bytes.  `name` is for messages only; fd stays the caller's.
Result<Image> read_image(int fd, const std::string& name);

// What a movie file holds, as its container says: the first video stream's size and frame
// count (its packets, not decoded), its frame rate, and whether it has an audio stream.
struct MovieInfo {
  int width = 0, height = 0;
  long long frames = 0;
  double fps = 0;
  bool has_audio = false;
};

// Errors: "media.probe" naming the file (not a movie libav opens, no video stream).
Result<MovieInfo> probe_movie(const std::filesystem::path& path);

// The frames at `indices` (0-based, in decode order) of the movie's first video stream, RGB24,
// in increasing index order; indices past the end are left out (an empty result is an error).
// Decodes up to the last index asked for.  Errors: "media.probe" naming the file.  frames.cpp.
Result<std::vector<Image>> read_frames(const std::filesystem::path& path,
                                       const std::vector<long long>& indices);
// A baseline JPEG of `img` (libav's mjpeg encoder, yuvj420p) at quantiser `qscale` 2 (best) to
// 31.  Odd sizes are fine.  Errors: "media.image".
Result<std::string> encode_jpeg(const Image& img, int qscale = 3);
// The frames side by side, `columns` per row, each resized to tile_width (even) and the first
// frame's aspect; an empty image for no frames.
Image sprite_sheet(const std::vector<Image>& frames, int tile_width, int columns);

// Bilinear resize of an RGB24 image (used to fit reference images to a model's grid).
Image resize_bilinear(const Image& src, int width, int height);

// Runs both encoders and the MP4 muxer once on a small clip (128x128, two frames, under the
// system temp directory, removed afterwards), so that libav's one-time set-up (codec tables,
// x264's first open, the heap pages a small clip needs) happens at service start rather than in
// the first job's deadline.  Idempotent; errors are returned for logging only.
Status warm_up();

// libav logs to stderr at INFO by default (x264 prints its statistics).  Services call this once
// at start-up with e.g. AV_LOG_ERROR (16); it sets libav's process-wide level.
void set_libav_log_level(int level);

}  // namespace h3pipe::media
