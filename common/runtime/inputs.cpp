#include "common/runtime/inputs.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/core/error_codes.h"

namespace h3pipe::runtime {

Result<spec::InputFile> open_reference(const pb::JobSpec& spec,
                                       const std::vector<std::filesystem::path>& roots,
                                       std::string_view who) {
  auto f = spec::open_input(roots, spec.reference_image());
  if (!f.ok())
    return make_error(errc::runtime::kPermanentInput, "{}: referenceImage {}", who,
                      f.error().message);
  return f;
}

Result<std::string> read_reference(const spec::InputFile& f, std::string_view who,
                                   std::uint64_t max_bytes) {
  if (f.size > max_bytes)
    return make_error(errc::runtime::kPermanentInput,
                      "{}: referenceImage {}: {} bytes, at most {} are read", who, f.path.string(),
                      f.size, max_bytes);
  std::string bytes(f.size, '\0');
  std::size_t at = 0;
  while (at < bytes.size()) {
    ssize_t n = ::pread(f.fd.get(), bytes.data() + at, bytes.size() - at, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return make_error(errc::io::kRead, "{}: referenceImage {}: {}", who, f.path.string(),
                        std::strerror(errno));
    if (n == 0) break;  // shrank since it was opened: what is there is what is read
    at += static_cast<std::size_t>(n);
  }
  bytes.resize(at);
  return bytes;
}

Error input_error(const Error& cause, std::string_view what, const std::filesystem::path& path) {
  if (errc::is_permanent(cause.code))
    return rephrase(cause, "{} {}: {}", what, path.string(), cause.message);
  return make_error(errc::runtime::kInput, "{} {}: {}", what, path.string(), cause.message);
}

}  // namespace h3pipe::runtime
