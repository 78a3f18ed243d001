// SHA-256 throughput of common/core/sha256 (OpenSSL EVP) on this CPU, the receiver's per-byte cost.
// Last line: {"sha256_gbps": GB/s}.
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/core/sha256.h"

int main() {
  std::vector<unsigned char> buf(64 << 20);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131);
  double best = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    h3pipe::Sha256 h;
    for (std::size_t at = 0; at < buf.size(); at += 256 * 1024)
      h.update(buf.data() + at, 256 * 1024);
    (void)h.hex_digest();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("{\"sha256_gbps\": %.3f}\n", buf.size() / best / 1e9);
  return 0;
}
