// libav decoding for the comparison: video to RGB24, audio to float PCM, RGB24 to PNG.
#include "common/compare/frames.h"

#include <algorithm>

#include "common/compare/libav.h"

extern "C" {
#include <libavutil/imgutils.h>
}

namespace h3pipe::compare {

using namespace detail;

namespace {

Error media_error(const std::filesystem::path& p, std::string_view what, int rc) {
  return make_error(errc::compare::kMedia, "{}: {}: {}", p.string(), what, av_text(rc));
}

// An input file with a decoder open on its best stream of `type`.
struct Input {
  Ptr<AVFormatContext> fmt;
  Ptr<AVCodecContext> dec;
  int stream = -1;
};

Result<Input> open_input(const std::filesystem::path& path, AVMediaType type, bool required) {
  AVFormatContext* raw = nullptr;
  int rc = avformat_open_input(&raw, path.c_str(), nullptr, nullptr);
  if (rc < 0) return media_error(path, "avformat_open_input", rc);
  Input in;
  in.fmt.reset(raw);
  if ((rc = avformat_find_stream_info(in.fmt.get(), nullptr)) < 0)
    return media_error(path, "avformat_find_stream_info", rc);
  const AVCodec* codec = nullptr;
  in.stream = av_find_best_stream(in.fmt.get(), type, -1, -1, &codec, 0);
  if (in.stream < 0) {
    if (!required) return in;
    return make_error(errc::compare::kMedia, "{}: holds no {} stream", path.string(),
                      av_get_media_type_string(type));
  }
  in.dec.reset(avcodec_alloc_context3(codec));
  if (!in.dec) return media_error(path, "avcodec_alloc_context3", AVERROR(ENOMEM));
  avcodec_parameters_to_context(in.dec.get(), in.fmt->streams[in.stream]->codecpar);
  in.dec->thread_count = 1;  // bit-for-bit the same frames on every run
  if ((rc = avcodec_open2(in.dec.get(), codec, nullptr)) < 0)
    return media_error(path, "avcodec_open2", rc);
  return in;
}

// Pulls the next decoded frame of in.stream into `f`; false at the end of the stream.
Result<bool> next_decoded(Input& in, AVFrame* f, AVPacket* pkt, bool& flushing,
                          const std::filesystem::path& path) {
  for (;;) {
    int rc = avcodec_receive_frame(in.dec.get(), f);
    if (rc == 0) return true;
    if (rc == AVERROR_EOF) return false;
    if (rc != AVERROR(EAGAIN)) return media_error(path, "avcodec_receive_frame", rc);
    if (flushing) return false;
    rc = av_read_frame(in.fmt.get(), pkt);
    if (rc == AVERROR_EOF) {
      flushing = true;
      avcodec_send_packet(in.dec.get(), nullptr);
      continue;
    }
    if (rc < 0) return media_error(path, "av_read_frame", rc);
    if (pkt->stream_index == in.stream) rc = avcodec_send_packet(in.dec.get(), pkt);
    av_packet_unref(pkt);
    if (rc < 0 && rc != AVERROR(EAGAIN)) return media_error(path, "avcodec_send_packet", rc);
  }
}

}  // namespace

struct VideoReader::Impl {
  std::filesystem::path path;
  Input in;
  Ptr<AVFrame> frame{av_frame_alloc()};
  Ptr<AVPacket> pkt{av_packet_alloc()};
  Ptr<SwsContext> sws;
  bool flushing = false;
};

VideoReader::VideoReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VideoReader::~VideoReader() = default;
int VideoReader::width() const {
  return impl_->in.dec->width;
}
int VideoReader::height() const {
  return impl_->in.dec->height;
}

Result<std::unique_ptr<VideoReader>> VideoReader::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  auto in = open_input(path, AVMEDIA_TYPE_VIDEO, true);
  if (!in) return in.error();
  impl->in = std::move(*in);
  if (!impl->frame || !impl->pkt) return media_error(path, "av_frame_alloc", AVERROR(ENOMEM));
  return std::unique_ptr<VideoReader>(new VideoReader(std::move(impl)));
}

Result<bool> VideoReader::next(std::vector<std::uint8_t>& rgb) {
  Impl& m = *impl_;
  auto got = next_decoded(m.in, m.frame.get(), m.pkt.get(), m.flushing, m.path);
  if (!got) return got.error();
  if (!*got) return false;
  AVFrame* f = m.frame.get();
  const int w = f->width, h = f->height;
  if (!m.sws) {
    // Exact conversion (no dithering, accurate rounding): the same bytes for the same frame.
    m.sws.reset(sws_getContext(w, h, static_cast<AVPixelFormat>(f->format), w, h, AV_PIX_FMT_RGB24,
                               SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr,
                               nullptr, nullptr));
    if (!m.sws) return media_error(m.path, "sws_getContext", AVERROR(EINVAL));
  }
  rgb.resize(static_cast<std::size_t>(w) * h * 3);
  std::uint8_t* dst[1] = {rgb.data()};
  const int stride[1] = {w * 3};
  sws_scale(m.sws.get(), f->data, f->linesize, 0, h, dst, stride);
  av_frame_unref(f);
  return true;
}

Result<std::vector<std::uint8_t>> read_frame(const std::filesystem::path& path, long long index,
                                             int* width, int* height) {
  auto r = VideoReader::open(path);
  if (!r) return r.error();
  std::vector<std::uint8_t> rgb;
  for (long long i = 0; i <= index; ++i) {
    auto got = (*r)->next(rgb);
    if (!got) return got.error();
    if (!*got)
      return make_error(errc::compare::kMedia, "{}: has no frame {} (only {})", path.string(),
                        index, i);
  }
  if (width) *width = (*r)->width();
  if (height) *height = (*r)->height();
  return rgb;
}

Result<Pcm> read_audio(const std::filesystem::path& path) {
  auto in = open_input(path, AVMEDIA_TYPE_AUDIO, false);
  if (!in) return in.error();
  Pcm pcm;
  if (in->stream < 0) return pcm;
  pcm.channels = in->dec->ch_layout.nb_channels;
  pcm.sample_rate = in->dec->sample_rate;
  Ptr<AVFrame> f(av_frame_alloc());
  Ptr<AVPacket> pkt(av_packet_alloc());
  bool flushing = false;
  for (;;) {
    auto got = next_decoded(*in, f.get(), pkt.get(), flushing, path);
    if (!got) return got.error();
    if (!*got) break;
    const int ch = f->ch_layout.nb_channels, n = f->nb_samples;
    const auto fmt = static_cast<AVSampleFormat>(f->format);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < ch; ++c) {
        float v = 0;
        switch (fmt) {
          case AV_SAMPLE_FMT_FLTP:
            v = reinterpret_cast<const float*>(f->extended_data[c])[i];
            break;
          case AV_SAMPLE_FMT_FLT:
            v = reinterpret_cast<const float*>(f->extended_data[0])[i * ch + c];
            break;
          case AV_SAMPLE_FMT_S16P:
            v = reinterpret_cast<const int16_t*>(f->extended_data[c])[i] / 32768.0f;
            break;
          case AV_SAMPLE_FMT_S16:
            v = reinterpret_cast<const int16_t*>(f->extended_data[0])[i * ch + c] / 32768.0f;
            break;
          default:
            return make_error(errc::compare::kMedia, "{}: audio sample format {} is not read here",
                              path.string(), av_get_sample_fmt_name(fmt));
        }
        pcm.samples.push_back(v);
      }
    av_frame_unref(f.get());
  }
  return pcm;
}

Result<std::string> encode_png(int width, int height, std::span<const std::uint8_t> rgb) {
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
  if (!codec) return make_error(errc::compare::kMedia, "this libav has no PNG encoder");
  Ptr<AVCodecContext> c(avcodec_alloc_context3(codec));
  c->width = width;
  c->height = height;
  c->pix_fmt = AV_PIX_FMT_RGB24;
  c->time_base = {1, 1};
  int rc = avcodec_open2(c.get(), codec, nullptr);
  if (rc < 0) return make_error(errc::compare::kMedia, "PNG encoder: {}", av_text(rc));
  Ptr<AVFrame> f(av_frame_alloc());
  f->width = width;
  f->height = height;
  f->format = AV_PIX_FMT_RGB24;
  if ((rc = av_frame_get_buffer(f.get(), 0)) < 0)
    return make_error(errc::compare::kMedia, "PNG frame: {}", av_text(rc));
  for (int y = 0; y < height; ++y)
    std::copy_n(rgb.data() + static_cast<std::size_t>(y) * width * 3, width * 3,
                f->data[0] + static_cast<std::ptrdiff_t>(y) * f->linesize[0]);
  Ptr<AVPacket> pkt(av_packet_alloc());
  std::string out;
  if ((rc = avcodec_send_frame(c.get(), f.get())) < 0 ||
      (rc = avcodec_send_frame(c.get(), nullptr)) < 0)
    return make_error(errc::compare::kMedia, "PNG encode: {}", av_text(rc));
  while (avcodec_receive_packet(c.get(), pkt.get()) == 0) {
    out.append(reinterpret_cast<const char*>(pkt->data), static_cast<std::size_t>(pkt->size));
    av_packet_unref(pkt.get());
  }
  if (out.empty()) return make_error(errc::compare::kMedia, "PNG encoder produced nothing");
  return out;
}

}  // namespace h3pipe::compare
