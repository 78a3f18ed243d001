#include "common/latent/latent.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>

#include "common/artifacts/artifacts.h"
#include "common/latent/safetensors.h"

namespace h3pipe::latent {
namespace {

constexpr std::uint64_t kAudioHop = 86;
constexpr std::uint64_t kAudioRate = 48000;

std::string shape_str(const std::vector<std::uint64_t>& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

// Geometry from the two tensors' shapes (structure only) or a check against `expected`.
Result<Geometry> check_geometry(const st::Layout& layout, const Geometry* expected) {
  const st::TensorInfo* v = layout.find("video");
  const st::TensorInfo* a = layout.find("audio");
  if (v == nullptr) return make_error("latent.missing_tensor", "latent has no \"video\" tensor");
  if (a == nullptr) return make_error("latent.missing_tensor", "latent has no \"audio\" tensor");
  for (const auto& t : layout.tensors) {
    if (t.name != "video" && t.name != "audio")
      return make_error("latent.unexpected_tensor",
                        "latent holds an unexpected tensor \"{}\" (only video and audio)", t.name);
  }
  if (expected != nullptr) {
    if (v->shape != expected->video_shape())
      return make_error("latent.geometry", "tensor \"video\": shape {}, expected {}",
                        shape_str(v->shape), shape_str(expected->video_shape()));
    if (a->shape != expected->audio_shape())
      return make_error("latent.geometry", "tensor \"audio\": shape {}, expected {}",
                        shape_str(a->shape), shape_str(expected->audio_shape()));
    return *expected;
  }
  auto fits = [](std::uint64_t x) { return x <= 0xffffffffu; };
  if (v->shape.size() != 5 || v->shape[0] != 1 || !fits(v->shape[1]) || !fits(v->shape[2]) ||
      !fits(v->shape[3]) || !fits(v->shape[4]))
    return make_error("latent.geometry", "tensor \"video\": shape {}, expected (1, C, T, H, W)",
                      shape_str(v->shape));
  if (a->shape.size() != 4 || a->shape[0] != 1 || a->shape[2] != 2 || !fits(a->shape[1]) ||
      !fits(a->shape[3]))
    return make_error("latent.geometry", "tensor \"audio\": shape {}, expected (1, C, 2, L)",
                      shape_str(a->shape));
  Geometry g;
  g.video_channels = static_cast<std::uint32_t>(v->shape[1]);
  g.t = static_cast<std::uint32_t>(v->shape[2]);
  g.h = static_cast<std::uint32_t>(v->shape[3]);
  g.w = static_cast<std::uint32_t>(v->shape[4]);
  g.audio_channels = static_cast<std::uint32_t>(a->shape[1]);
  g.audio_len = static_cast<std::uint32_t>(a->shape[3]);
  return g;
}

// A file descriptor that closes itself (CONVENTIONS.md rule 12).
class Fd final {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Status pread_all(int fd, std::uint8_t* dst, std::uint64_t len, std::uint64_t off,
                 const std::filesystem::path& p) {
  while (len > 0) {
    ssize_t n = ::pread(fd, dst, len, static_cast<off_t>(off));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error("io.read", "cannot read {}: {}", p.string(), std::strerror(errno));
    if (n == 0) return make_error("latent.truncated", "{} shrank while being read", p.string());
    dst += n;
    off += static_cast<std::uint64_t>(n);
    len -= static_cast<std::uint64_t>(n);
  }
  return {};
}

// Opens a file and validates its prefix and header, reading only those bytes.
struct OpenedFile {
  std::unique_ptr<Fd> fd;
  st::Layout layout;
};

Result<OpenedFile> open_validated(const std::filesystem::path& path) {
  auto fd = std::make_unique<Fd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd->get() < 0)
    return make_error("io.open", "cannot open {}: {}", path.string(), std::strerror(errno));
  struct stat sb {};
  if (::fstat(fd->get(), &sb) != 0)
    return make_error("io.stat", "cannot stat {}: {}", path.string(), std::strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return make_error("latent.not_a_file", "{} is not a regular file", path.string());
  const auto size = static_cast<std::uint64_t>(sb.st_size);
  std::uint8_t prefix[8] = {};
  if (size >= 8) H3_TRY(pread_all(fd->get(), prefix, 8, 0, path));
  auto n = st::check_prefix({prefix, size >= 8 ? 8u : 0u}, size);
  if (!n.ok()) return n.error();
  std::vector<std::uint8_t> header(*n);  // <= 1 MiB, and within the file
  H3_TRY(pread_all(fd->get(), header.data(), header.size(), 8, path));
  auto layout = st::parse_header(header, size - 8 - *n);
  if (!layout.ok()) return layout.error();
  return OpenedFile{std::move(fd), std::move(*layout)};
}

// Reads one validated tensor into floats.  The byte buffer is bounded by the file's size (the
// layout proved that the tensor lies inside the file).
Status read_tensor(const OpenedFile& f, const st::TensorInfo& t, std::vector<float>* out,
                   const std::filesystem::path& path) {
  out->resize(t.elems);
  const std::uint64_t bytes = t.end - t.begin;
  const std::uint64_t at = f.layout.data_offset() + t.begin;
  if (t.dtype == DType::kF32 && std::endian::native == std::endian::little) {
    H3_TRY(pread_all(f.fd->get(), reinterpret_cast<std::uint8_t*>(out->data()), bytes, at, path));
    return st::decode(t, {reinterpret_cast<const std::uint8_t*>(out->data()), bytes}, out->data());
  }
  std::vector<std::uint8_t> raw(bytes);
  H3_TRY(pread_all(f.fd->get(), raw.data(), bytes, at, path));
  return st::decode(t, raw, out->data());
}

Status decode_into(std::span<const std::uint8_t> bytes, const st::Layout& layout,
                   const st::TensorInfo& t, std::vector<float>* out) {
  out->resize(t.elems);
  return st::decode(t, bytes.subspan(layout.data_offset() + t.begin, t.end - t.begin), out->data());
}

}  // namespace

Result<st::Layout> st::read_layout(const std::filesystem::path& path) {
  auto f = open_validated(path);
  if (!f.ok()) return f.error();
  return std::move(f->layout);
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

std::size_t dtype_size(DType d) {
  return d == DType::kF32 ? 4 : 2;
}

Geometry Geometry::for_job(std::uint32_t width, std::uint32_t height, std::uint32_t frames,
                           std::uint32_t fps) {
  Geometry g;
  g.t = frames == 0 ? 0 : (frames - 1) / 4 + 1;
  g.h = height / 16;
  g.w = width / 16;
  const std::uint64_t den = std::uint64_t{fps} * kAudioHop;
  g.audio_len =
      den == 0 ? 0
               : static_cast<std::uint32_t>((std::uint64_t{frames} * kAudioRate + den - 1) / den);
  return g;
}

std::size_t Geometry::video_elems() const {
  return std::size_t{video_channels} * t * h * w;
}
std::size_t Geometry::audio_elems() const {
  return std::size_t{audio_channels} * 2 * audio_len;
}
std::size_t Geometry::data_bytes() const {
  return 4 * (video_elems() + audio_elems());
}
std::vector<std::uint64_t> Geometry::video_shape() const {
  return {1, video_channels, t, h, w};
}
std::vector<std::uint64_t> Geometry::audio_shape() const {
  return {1, audio_channels, 2, audio_len};
}

std::vector<std::uint8_t> serialize(const Latent& l, DType dtype) {
  return st::serialize(
      {{"video", l.geometry.video_shape(), l.video}, {"audio", l.geometry.audio_shape(), l.audio}},
      l.metadata, dtype);
}

Result<std::string> write_latent(const std::filesystem::path& path, const Latent& l) {
  if (l.video.size() != l.geometry.video_elems() || l.audio.size() != l.geometry.audio_elems())
    return make_error("latent.geometry",
                      "{}: video holds {} values and audio {}, the geometry needs {} and {}",
                      path.string(), l.video.size(), l.audio.size(), l.geometry.video_elems(),
                      l.geometry.audio_elems());
  auto bytes = serialize(l);
  return artifacts::write_atomic(path, bytes);
}

Result<Latent> parse_latent(std::span<const std::uint8_t> bytes, const Geometry* expected) {
  auto layout = st::parse_layout(bytes);
  if (!layout.ok()) return layout.error();
  auto g = check_geometry(*layout, expected);
  if (!g.ok()) return g.error();
  Latent l;
  l.geometry = *g;
  l.metadata = std::move(layout->metadata);
  H3_TRY(decode_into(bytes, *layout, *layout->find("video"), &l.video));
  H3_TRY(decode_into(bytes, *layout, *layout->find("audio"), &l.audio));
  return l;
}

Result<Latent> read_latent(const std::filesystem::path& path, const Geometry* expected) {
  auto f = open_validated(path);
  if (!f.ok()) return Error{f.error().code, path.string() + ": " + f.error().message};
  auto g = check_geometry(f->layout, expected);
  if (!g.ok()) return Error{g.error().code, path.string() + ": " + g.error().message};
  Latent l;
  l.geometry = *g;
  l.metadata = f->layout.metadata;
  for (auto [name, dst] : {std::pair{"video", &l.video}, std::pair{"audio", &l.audio}}) {
    Status s = read_tensor(*f, *f->layout.find(name), dst, path);
    if (!s.ok()) return Error{s.error().code, path.string() + ": " + s.error().message};
  }
  return l;
}

std::vector<std::uint8_t> serialize_tensors(const std::map<std::string, TensorF32>& tensors,
                                            const std::map<std::string, std::string>& metadata,
                                            DType dtype) {
  std::vector<st::TensorRef> refs;
  for (const auto& [name, t] : tensors) refs.push_back({name, t.shape, t.data});
  return st::serialize(refs, metadata, dtype);
}

Result<std::string> write_tensors(const std::filesystem::path& path,
                                  const std::map<std::string, TensorF32>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  for (const auto& [name, t] : tensors) {
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    if (n != t.data.size())
      return make_error("latent.geometry", "{}: tensor \"{}\" holds {} values, shape {} needs {}",
                        path.string(), name, t.data.size(), shape_str(t.shape), n);
    if (name == "__metadata__")
      return make_error("latent.header_schema", "{}: \"__metadata__\" is not a tensor name",
                        path.string());
  }
  return artifacts::write_atomic(path, serialize_tensors(tensors, metadata));
}

Result<std::map<std::string, TensorF32>> parse_tensors(std::span<const std::uint8_t> bytes,
                                                       std::map<std::string, std::string>* meta) {
  auto layout = st::parse_layout(bytes);
  if (!layout.ok()) return layout.error();
  std::map<std::string, TensorF32> out;
  for (const auto& t : layout->tensors) {
    TensorF32& dst = out[t.name];
    dst.shape = t.shape;
    H3_TRY(decode_into(bytes, *layout, t, &dst.data));
  }
  if (meta) *meta = std::move(layout->metadata);
  return out;
}

Result<std::map<std::string, TensorF32>> read_tensors(const std::filesystem::path& path,
                                                      std::map<std::string, std::string>* meta) {
  auto f = open_validated(path);
  if (!f.ok()) return Error{f.error().code, path.string() + ": " + f.error().message};
  std::map<std::string, TensorF32> out;
  for (const auto& t : f->layout.tensors) {
    TensorF32& dst = out[t.name];
    dst.shape = t.shape;
    Status s = read_tensor(*f, t, &dst.data, path);
    if (!s.ok()) return Error{s.error().code, path.string() + ": " + s.error().message};
  }
  if (meta) *meta = f->layout.metadata;
  return out;
}

}  // namespace h3pipe::latent
