// Image reading (PNG/JPEG via libav's image demuxers) and a small bilinear resize.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

// The first picture of an opened input, as RGB24 (the caller owns `fmt`).
Result<Image> decode_first_picture(AVFormatContext* fmt, const std::filesystem::path& path) {
  int rc;
  if ((rc = avformat_find_stream_info(fmt, nullptr)) < 0)
    return image_error(path, "avformat_find_stream_info", rc);
  const AVCodec* codec = nullptr;
  const int si = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (si < 0 || !codec)
    return image_error(path, "no picture stream", si < 0 ? si : AVERROR_DECODER_NOT_FOUND);
  CodecCtxPtr dec(avcodec_alloc_context3(codec));
  if (!dec) return image_error(path, "avcodec_alloc_context3", AVERROR(ENOMEM));
  if ((rc = avcodec_parameters_to_context(dec.get(), fmt->streams[si]->codecpar)) < 0)
    return image_error(path, "avcodec_parameters_to_context", rc);
  if ((rc = avcodec_open2(dec.get(), codec, nullptr)) < 0)
    return image_error(path, "avcodec_open2", rc);

  PacketPtr pkt(av_packet_alloc());
  FramePtr frame(av_frame_alloc());
  if (!pkt || !frame) return image_error(path, "av_packet_alloc", AVERROR(ENOMEM));
  bool got = false;
  while (!got) {
    rc = av_read_frame(fmt, pkt.get());
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

// Reads an open file through pread at its own offset, so libav never opens a path (the caller
// opened the file beneath its root; docs/security.md).
struct FdSource {
  int fd = -1;
  std::int64_t pos = 0, size = 0;
};

int fd_read(void* opaque, std::uint8_t* buf, int n) {
  auto* s = static_cast<FdSource*>(opaque);
  ssize_t got;
  do got = ::pread(s->fd, buf, static_cast<std::size_t>(n), s->pos);
  while (got < 0 && errno == EINTR);
  if (got < 0) return AVERROR(errno);
  if (got == 0) return AVERROR_EOF;
  s->pos += got;
  return static_cast<int>(got);
}

std::int64_t fd_seek(void* opaque, std::int64_t offset, int whence) {
  auto* s = static_cast<FdSource*>(opaque);
  if (whence & AVSEEK_SIZE) return s->size;
  switch (whence & ~AVSEEK_FORCE) {
    case SEEK_SET:
      break;
    case SEEK_CUR:
      offset += s->pos;
      break;
    case SEEK_END:
      offset += s->size;
      break;
    default:
      return AVERROR(EINVAL);
  }
  if (offset < 0) return AVERROR(EINVAL);
  return s->pos = offset;
}

// The format context and its custom AVIOContext, freed in that order.
struct FdInput {
  FdSource src;
  AVIOContext* io = nullptr;
  AVFormatContext* fmt = nullptr;
  ~FdInput() {
    if (fmt) avformat_close_input(&fmt);
    if (io) {
      av_freep(&io->buffer);
      avio_context_free(&io);
    }
  }
};

constexpr int kIoBuffer = 64 * 1024;

}  // namespace

Result<Image> read_image(int fd, const std::string& name) {
  const std::filesystem::path path(name);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return image_error(path, "not a regular file");
  FdInput in;
  in.src = {fd, 0, static_cast<std::int64_t>(st.st_size)};
  auto* buf = static_cast<std::uint8_t*>(av_malloc(kIoBuffer));
  if (!buf) return image_error(path, "av_malloc", AVERROR(ENOMEM));
  in.io = avio_alloc_context(buf, kIoBuffer, 0, &in.src, fd_read, nullptr, fd_seek);
  if (!in.io) {
    av_free(buf);
    return image_error(path, "avio_alloc_context", AVERROR(ENOMEM));
  }
  in.fmt = avformat_alloc_context();
  if (!in.fmt) return image_error(path, "avformat_alloc_context", AVERROR(ENOMEM));
  in.fmt->pb = in.io;
  in.fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
  // No URL: the demuxer is chosen from the bytes (PNG, JPEG, ... image pipes), never a path.
  int rc = avformat_open_input(&in.fmt, nullptr, nullptr, nullptr);
  if (rc < 0) return image_error(path, "avformat_open_input", rc);  // fmt freed by libav
  return decode_first_picture(in.fmt, path);
}

Result<Image> read_image(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return image_error(path, "not a regular file");
  auto img = read_image(fd, path.string());
  ::close(fd);
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
