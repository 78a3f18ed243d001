// Image reading (PNG/JPEG via libav's image demuxers) and a small bilinear resize.
#include <algorithm>
#include <cmath>

#include "common/media/libav_raii.h"

extern "C" {
#include <libavutil/macros.h>
}
#include "common/media/media.h"

namespace h3pipe::media {

using namespace detail;

namespace {

Error image_error(const std::filesystem::path& p, std::string_view what, int rc) {
  return make_error(errc::media::kImage, "image {}: {}: {}", p.string(), what, av_error_text(rc));
}
Error image_error(const std::filesystem::path& p, std::string_view what) {
  return make_error(errc::media::kImage, "image {}: {}", p.string(), what);
}

// Receives frames until one is out; sends `pkt` first (nullptr = drain).
int decode_one(AVCodecContext* dec, const AVPacket* pkt, AVFrame* out) {
  int rc = avcodec_send_packet(dec, pkt);
  if (rc < 0 && rc != AVERROR(EAGAIN) && rc != AVERROR_EOF) return rc;
  return avcodec_receive_frame(dec, out);
}

}  // namespace

Result<Image> read_image(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return image_error(path, "not a regular file");
  AVFormatContext* raw = nullptr;
  int rc = avformat_open_input(&raw, path.c_str(), nullptr, nullptr);
  if (rc < 0) return image_error(path, "avformat_open_input", rc);
  InputCtxPtr in(raw);
  if ((rc = avformat_find_stream_info(in.get(), nullptr)) < 0)
    return image_error(path, "avformat_find_stream_info", rc);
  const AVCodec* codec = nullptr;
  const int si = av_find_best_stream(in.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (si < 0 || !codec)
    return image_error(path, "no picture stream", si < 0 ? si : AVERROR_DECODER_NOT_FOUND);
  CodecCtxPtr dec(avcodec_alloc_context3(codec));
  if (!dec) return image_error(path, "avcodec_alloc_context3", AVERROR(ENOMEM));
  if ((rc = avcodec_parameters_to_context(dec.get(), in->streams[si]->codecpar)) < 0)
    return image_error(path, "avcodec_parameters_to_context", rc);
  if ((rc = avcodec_open2(dec.get(), codec, nullptr)) < 0)
    return image_error(path, "avcodec_open2", rc);

  PacketPtr pkt(av_packet_alloc());
  FramePtr frame(av_frame_alloc());
  if (!pkt || !frame) return image_error(path, "av_packet_alloc", AVERROR(ENOMEM));
  bool got = false;
  while (!got) {
    rc = av_read_frame(in.get(), pkt.get());
    if (rc == AVERROR_EOF) {
      rc = decode_one(dec.get(), nullptr, frame.get());  // drain
      if (rc < 0) return image_error(path, "no decodable picture", rc);
      got = true;
      break;
    }
    if (rc < 0) return image_error(path, "av_read_frame", rc);
    if (pkt->stream_index == si) {
      rc = decode_one(dec.get(), pkt.get(), frame.get());
      if (rc == 0)
        got = true;
      else if (rc != AVERROR(EAGAIN)) {
        av_packet_unref(pkt.get());
        return image_error(path, "decode", rc);
      }
    }
    av_packet_unref(pkt.get());
  }
  const int w = frame->width, h = frame->height;
  if (w <= 0 || h <= 0 || w > 16384 || h > 16384)
    return image_error(path, fmt::format("picture size {}x{} out of range", w, h));
  SwsPtr sws(sws_getContext(w, h, static_cast<AVPixelFormat>(frame->format), w, h, AV_PIX_FMT_RGB24,
                            SWS_BICUBIC, nullptr, nullptr, nullptr));
  if (!sws) return image_error(path, "no conversion to RGB24 from this pixel format");
  Image img;
  img.width = w;
  img.height = h;
  // swscale's SIMD paths may write past the end of a tightly packed row, so convert into a
  // padded, aligned buffer and copy the rows out.
  const int stride = FFALIGN(w * 3, 64);
  std::vector<std::uint8_t> padded(static_cast<std::size_t>(stride) * (h + 1) + 64);
  std::uint8_t* dst[1] = {padded.data()};
  const int dst_stride[1] = {stride};
  sws_scale(sws.get(), frame->data, frame->linesize, 0, h, dst, dst_stride);
  img.rgb.resize(static_cast<std::size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    std::copy_n(padded.data() + static_cast<std::size_t>(y) * stride,
                static_cast<std::size_t>(w) * 3,
                img.rgb.data() + static_cast<std::size_t>(y) * w * 3);
  return img;
}

Image resize_bilinear(const Image& src, int width, int height) {
  Image out;
  out.width = width;
  out.height = height;
  out.rgb.assign(static_cast<std::size_t>(width) * height * 3, 0);
  if (src.width <= 0 || src.height <= 0 || width <= 0 || height <= 0) return out;
  const float sx = static_cast<float>(src.width) / width,
              sy = static_cast<float>(src.height) / height;
  for (int y = 0; y < height; ++y) {
    const float fy = std::clamp((y + 0.5f) * sy - 0.5f, 0.0f, src.height - 1.0f);
    const int y0 = static_cast<int>(fy), y1 = std::min(y0 + 1, src.height - 1);
    const float wy = fy - y0;
    for (int x = 0; x < width; ++x) {
      const float fx = std::clamp((x + 0.5f) * sx - 0.5f, 0.0f, src.width - 1.0f);
      const int x0 = static_cast<int>(fx), x1 = std::min(x0 + 1, src.width - 1);
      const float wx = fx - x0;
      for (int c = 0; c < 3; ++c) {
        auto at = [&](int yy, int xx) {
          return static_cast<float>(
              src.rgb[(static_cast<std::size_t>(yy) * src.width + xx) * 3 + c]);
        };
        const float v = (1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) +
                        wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1));
        out.rgb[(static_cast<std::size_t>(y) * width + x) * 3 + c] =
            static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return out;
}

}  // namespace h3pipe::media
