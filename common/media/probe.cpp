// Reads what a movie holds (its first video stream's size and frame count, whether it has an
// audio stream) from the container, without decoding a picture.
#include "common/media/libav_raii.h"
#include "common/media/media.h"

namespace h3pipe::media {

using namespace detail;

Result<MovieInfo> probe_movie(const std::filesystem::path& path) {
  auto fail = [&](std::string_view what, int rc) {
    return make_error(errc::media::kProbe, "{}: {}: {}", path.string(), what, av_error_text(rc));
  };
  AVFormatContext* raw = nullptr;
  int rc = avformat_open_input(&raw, path.c_str(), nullptr, nullptr);
  if (rc < 0) return fail("avformat_open_input", rc);
  InputCtxPtr in(raw);
  if ((rc = avformat_find_stream_info(in.get(), nullptr)) < 0)
    return fail("avformat_find_stream_info", rc);
  const int vi = av_find_best_stream(in.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (vi < 0) return make_error(errc::media::kProbe, "{}: holds no video stream", path.string());
  const AVStream* v = in->streams[vi];
  MovieInfo info;
  info.width = v->codecpar->width;
  info.height = v->codecpar->height;
  info.has_audio = av_find_best_stream(in.get(), AVMEDIA_TYPE_AUDIO, -1, -1, nullptr, 0) >= 0;
  if (v->avg_frame_rate.den > 0) info.fps = av_q2d(v->avg_frame_rate);
  // The packets of the video stream are its frames (one picture per packet in MP4); counted
  // rather than taken from the header's nb_frames, which a muxer may leave at 0.
  PacketPtr pkt(av_packet_alloc());
  if (!pkt) return fail("av_packet_alloc", AVERROR(ENOMEM));
  while ((rc = av_read_frame(in.get(), pkt.get())) >= 0) {
    if (pkt->stream_index == vi) ++info.frames;
    av_packet_unref(pkt.get());
  }
  if (rc != AVERROR_EOF) return fail("av_read_frame", rc);
  return info;
}

}  // namespace h3pipe::media
