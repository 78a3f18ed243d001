#include "common/runtime/preview.h"

#include <openssl/evp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "common/artifacts/artifacts.h"
#include "common/media/media.h"

namespace h3pipe::runtime {
namespace {

Result<std::string> jpeg_base64(const media::Image& img) {
  auto jpeg = media::encode_jpeg(img, 8);
  if (!jpeg.ok()) return jpeg.error();
  std::string out(4 * ((jpeg->size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(jpeg->data()),
                                static_cast<int>(jpeg->size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

}  // namespace

Result<std::string> latent_preview_jpeg_base64(const float* video, int channels, int t, int h,
                                               int w, int max_side) {
  if (!video || channels < 3 || t < 1 || h < 1 || w < 1)
    return make_error(errc::runtime::kPermanentInput, "preview: no latent grid");
  const int scale = std::max(1, max_side / std::max(h, w));
  media::Image img;
  // Even sides: the JPEG encoder's 4:2:0 chroma wants them.
  img.width = (w * scale + 1) & ~1;
  img.height = (h * scale + 1) & ~1;
  img.rgb.assign(static_cast<std::size_t>(img.width) * img.height * 3, 0);
  const std::size_t hw = static_cast<std::size_t>(h) * w;
  const float* frame = video + static_cast<std::size_t>(t / 2) * hw;  // channel 0's middle frame
  const std::size_t cstride = static_cast<std::size_t>(t) * hw;
  const int third = channels / 3;
  for (int y = 0; y < img.height; ++y) {
    const int ly = std::min(h - 1, y / scale);
    for (int x = 0; x < img.width; ++x) {
      const int lx = std::min(w - 1, x / scale);
      const std::size_t at = static_cast<std::size_t>(ly) * w + lx;
      for (int k = 0; k < 3; ++k) {
        float s = 0;
        for (int c = k * third; c < (k + 1) * third; ++c) s += frame[c * cstride + at];
        const float v = 128.0f + 60.0f * s / static_cast<float>(third);
        img.rgb[(static_cast<std::size_t>(y) * img.width + x) * 3 + k] =
            static_cast<std::uint8_t>(std::clamp(std::isfinite(v) ? v : 128.0f, 0.0f, 255.0f));
      }
    }
  }
  return jpeg_base64(img);
}

Result<std::string> image_preview_jpeg_base64(std::string_view image, int max_side) {
  if (image.empty() || max_side < 2)
    return make_error(errc::runtime::kPermanentInput, "preview: no image bytes");
  artifacts::UniqueFd fd(::memfd_create("h3pipe-preview", MFD_CLOEXEC));
  if (!fd || ::write(fd.get(), image.data(), image.size()) != static_cast<ssize_t>(image.size()))
    return make_error(errc::runtime::kPermanentInput, "preview: cannot stage the image");
  auto src = media::read_image(fd.get(), "preview frame");
  if (!src.ok())
    return make_error(errc::runtime::kPermanentInput, "preview: {}", src.error().message);
  if (src->width > 4096 || src->height > 4096)
    return make_error(errc::runtime::kPermanentInput, "preview: {}x{} is above 4096x4096",
                      src->width, src->height);
  const int longer = std::max(src->width, src->height);
  const double f = longer > max_side ? static_cast<double>(max_side) / longer : 1.0;
  // Even sides: the JPEG encoder's 4:2:0 chroma wants them.
  const int w = std::max(2, static_cast<int>(src->width * f) & ~1);
  const int h = std::max(2, static_cast<int>(src->height * f) & ~1);
  return jpeg_base64(media::resize_bilinear(*src, w, h));
}

}  // namespace h3pipe::runtime
