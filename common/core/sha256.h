#pragma once
// SHA-256 through OpenSSL's EVP interface (RAII over EVP_MD_CTX).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "common/core/result.h"

struct evp_md_ctx_st;

namespace h3pipe {

class Sha256 final {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(const void* data, std::size_t len);
  void update(std::span<const std::uint8_t> bytes) { update(bytes.data(), bytes.size()); }
  // Lower-case hex digest; the object is reset and can be reused.
  std::string hex_digest();

 private:
  struct Deleter {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, Deleter> ctx_;
};

std::string sha256_hex(const void* data, std::size_t len);
inline std::string sha256_hex(std::string_view s) {
  return sha256_hex(s.data(), s.size());
}
Result<std::string> sha256_file(const std::filesystem::path& path);
// SHA-1, lower-case hex: only for naming Redis scripts (EVALSHA takes the script's SHA-1), never
// for integrity.
std::string sha1_hex(std::string_view s);

}  // namespace h3pipe
