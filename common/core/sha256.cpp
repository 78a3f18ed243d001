#include "common/core/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace h3pipe {

void Sha256::Deleter::operator()(evp_md_ctx_st* ctx) const {
  EVP_MD_CTX_free(ctx);
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL: EVP_DigestInit_ex(sha256) failed");
}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, std::size_t len) {
  EVP_DigestUpdate(ctx_.get(), data, len);
}

std::string Sha256::hex_digest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_.get(), md, &n);
  EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (unsigned i = 0; i < n; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

std::string sha256_hex(const void* data, std::size_t len) {
  Sha256 h;
  h.update(data, len);
  return h.hex_digest();
}

Result<std::string> sha256_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return make_error(errc::io::kOpen, "cannot open {}: {}", path.string(), std::strerror(errno));
  Sha256 h;
  // Not zero-filled: only the pages read() fills get touched.
  constexpr std::size_t kBuf = 1 << 20;
  auto buf = std::make_unique_for_overwrite<char[]>(kBuf);
  for (;;) {
    ssize_t n = ::read(fd, buf.get(), kBuf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return make_error(errc::io::kRead, "cannot read {}: {}", path.string(), std::strerror(e));
    }
    if (n == 0) break;
    h.update(buf.get(), static_cast<std::size_t>(n));
  }
  ::close(fd);
  return h.hex_digest();
}

std::string sha1_hex(std::string_view s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha1(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

}  // namespace h3pipe
