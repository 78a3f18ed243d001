#include "common/transfer/data_cipher.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstring>
#include <limits>

namespace h3pipe::transfer {
namespace {

constexpr unsigned char kMagic[4] = {'h', '3', 'd', '1'};
constexpr std::uint32_t kFlagLast = 1;

void put_u32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint32_t get_u32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::array<unsigned char, 12> nonce_for(std::uint64_t index) {
  std::array<unsigned char, 12> n{};
  put_u64(n.data() + 4, index);
  return n;
}
EVP_CIPHER_CTX* raw(const EvpCtx& c) {
  return static_cast<EVP_CIPHER_CTX*>(c.get());
}

// A context with AES-256-GCM and the key set (the key schedule is computed once per transfer;
// each frame only sets its nonce).  `encrypt` picks the direction.
Result<EvpCtx> make_ctx(const DataKey& key, bool encrypt) {
  EvpCtx c(EVP_CIPHER_CTX_new());
  if (!c) return make_error(errc::transfer::kConfig, "EVP_CIPHER_CTX_new failed");
  const auto* k = reinterpret_cast<const unsigned char*>(key.bytes().data());
  int ok = encrypt ? EVP_EncryptInit_ex(raw(c), EVP_aes_256_gcm(), nullptr, nullptr, nullptr)
                   : EVP_DecryptInit_ex(raw(c), EVP_aes_256_gcm(), nullptr, nullptr, nullptr);
  if (ok != 1 || EVP_CIPHER_CTX_ctrl(raw(c), EVP_CTRL_GCM_SET_IVLEN, 12, nullptr) != 1)
    return make_error(errc::transfer::kConfig, "AES-256-GCM is not available from OpenSSL");
  ok = encrypt ? EVP_EncryptInit_ex(raw(c), nullptr, nullptr, k, nullptr)
               : EVP_DecryptInit_ex(raw(c), nullptr, nullptr, k, nullptr);
  if (ok != 1) return make_error(errc::transfer::kConfig, "AES-256-GCM key setup failed");
  return c;
}

}  // namespace

void EvpCtxFree::operator()(void* p) const {
  EVP_CIPHER_CTX_free(static_cast<EVP_CIPHER_CTX*>(p));
}

DataKey::~DataKey() {
  OPENSSL_cleanse(k_.data(), k_.size());
}

Result<DataKey> DataKey::random() {
  DataKey k;
  if (RAND_bytes(k.k_.data(), static_cast<int>(k.k_.size())) != 1)
    return make_error(errc::transfer::kConfig, "OpenSSL RAND_bytes failed for a transfer key");
  return k;
}

Result<DataKey> DataKey::from_bytes(std::string_view bytes) {
  if (bytes.size() != kDataKeyBytes)
    return make_error(errc::transfer::kProtocol, "offer data_key: {} bytes, expected {}",
                      bytes.size(), kDataKeyBytes);
  DataKey k;
  std::memcpy(k.k_.data(), bytes.data(), kDataKeyBytes);
  return k;
}

Result<DataHeader> parse_data_header(std::span<const unsigned char> frame) {
  if (frame.size() < kHeaderBytes + kTagBytes)
    return make_error(errc::transfer::kProtocol, "data frame: {} bytes, shorter than {}",
                      frame.size(), kHeaderBytes + kTagBytes);
  const unsigned char* p = frame.data();
  if (std::memcmp(p, kMagic, 4) != 0)
    return make_error(errc::transfer::kProtocol, "data frame: bad magic (expected \"h3d1\")");
  std::uint32_t flags = get_u32(p + 4);
  if ((flags & ~kFlagLast) != 0 || get_u32(p + 36) != 0)
    return make_error(errc::transfer::kProtocol, "data frame: reserved header bits set");
  DataHeader h;
  h.last = (flags & kFlagLast) != 0;
  h.tid = get_u64(p + 8);
  h.index = get_u64(p + 16);
  h.offset = get_u64(p + 24);
  h.len = get_u32(p + 32);
  if (frame.size() != sealed_size(h.len))
    return make_error(errc::transfer::kProtocol,
                      "data frame: {} bytes, header says {} of data ({} sealed)", frame.size(),
                      h.len, sealed_size(h.len));
  return h;
}

Result<FrameSealer> FrameSealer::make(const DataKey& key, std::uint64_t tid) {
  auto c = make_ctx(key, true);
  if (!c) return c.error();
  return FrameSealer(std::move(*c), tid);
}

Status FrameSealer::seal(std::uint64_t offset, std::span<const unsigned char> plain, bool last,
                         std::span<unsigned char> out) {
  if (plain.size() > std::numeric_limits<std::uint32_t>::max() ||
      plain.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    return make_error(errc::transfer::kProtocol, "data frame of {} bytes is too large",
                      plain.size());
  if (out.size() != sealed_size(plain.size()))
    return make_error(errc::transfer::kProtocol, "sealed buffer {} bytes, need {}", out.size(),
                      sealed_size(plain.size()));
  if (next_ == std::numeric_limits<std::uint64_t>::max())
    return make_error(errc::transfer::kProtocol, "transfer {}: frame counter exhausted", tid_);
  unsigned char* h = out.data();
  std::memcpy(h, kMagic, 4);
  put_u32(h + 4, last ? kFlagLast : 0);
  put_u64(h + 8, tid_);
  put_u64(h + 16, next_);
  put_u64(h + 24, offset);
  put_u32(h + 32, static_cast<std::uint32_t>(plain.size()));
  put_u32(h + 36, 0);
  auto iv = nonce_for(next_);
  int n = 0;
  EVP_CIPHER_CTX* c = raw(ctx_);
  if (EVP_EncryptInit_ex(c, nullptr, nullptr, nullptr, iv.data()) != 1 ||
      EVP_EncryptUpdate(c, nullptr, &n, h, static_cast<int>(kHeaderBytes)) != 1 ||
      EVP_EncryptUpdate(c, h + kHeaderBytes, &n, plain.data(), static_cast<int>(plain.size())) !=
          1 ||
      EVP_EncryptFinal_ex(c, h + kHeaderBytes + plain.size(), &n) != 1 ||
      EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes),
                          h + kHeaderBytes + plain.size()) != 1)
    return make_error(errc::transfer::kConfig, "transfer {}: AES-256-GCM seal failed", tid_);
  ++next_;  // < UINT64_MAX: the last index is never used, so no nonce repeats
  return Status::Ok();
}

Result<FrameOpener> FrameOpener::make(const DataKey& key, std::uint64_t tid,
                                      std::uint64_t start_offset) {
  auto c = make_ctx(key, false);
  if (!c) return c.error();
  return FrameOpener(std::move(*c), tid, start_offset);
}

Error FrameOpener::refuse(std::string what, bool fail_transfer) {
  if (fail_transfer) failed_ = true;
  return make_error(errc::transfer::kProtocol, "transfer {}: data frame refused: {}", tid_, what);
}

Result<DataHeader> FrameOpener::open(std::span<const unsigned char> frame,
                                     std::span<unsigned char> out, bool fail_transfer) {
  auto no = [&](std::string what) { return refuse(std::move(what), fail_transfer); };
  auto wipe = [&](std::size_t n) {
    if (n > out.size()) n = out.size();
    if (n) OPENSSL_cleanse(out.data(), n);
  };
  if (failed_) return refuse("an earlier frame of this transfer was refused");
  auto hr = parse_data_header(frame);
  if (!hr) return no(hr.error().message);
  const DataHeader h = *hr;
  if (out.size() < h.len) return no(fmt::format("output buffer {} < {}", out.size(), h.len));
  if (complete_) return no("a frame after the last one");
  if (h.tid != tid_) return no(fmt::format("it names transfer {}", h.tid));
  if (h.index < next_) return no(fmt::format("replayed frame {} (next is {})", h.index, next_));
  if (h.index > next_)
    return no(fmt::format("frame {} out of order or one lost (next is {})", h.index, next_));
  if (h.offset != offset_) return no(fmt::format("offset {} (next is {})", h.offset, offset_));
  if (h.index == std::numeric_limits<std::uint64_t>::max() ||
      h.len > std::numeric_limits<std::uint64_t>::max() - h.offset)
    return no("frame index or offset at the end of its range");
  auto iv = nonce_for(h.index);
  int n = 0;
  EVP_CIPHER_CTX* c = raw(ctx_);
  const unsigned char* ct = frame.data() + kHeaderBytes;
  // The tag is copied out: EVP_CTRL_GCM_SET_TAG takes a non-const pointer.
  unsigned char tag[kTagBytes];
  std::memcpy(tag, ct + h.len, kTagBytes);
  bool ok = EVP_DecryptInit_ex(c, nullptr, nullptr, nullptr, iv.data()) == 1 &&
            EVP_DecryptUpdate(c, nullptr, &n, frame.data(), static_cast<int>(kHeaderBytes)) == 1 &&
            EVP_DecryptUpdate(c, out.data(), &n, ct, static_cast<int>(h.len)) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), tag) == 1 &&
            EVP_DecryptFinal_ex(c, out.data() + h.len, &n) == 1;
  if (!ok) {
    wipe(h.len);
    return no(fmt::format("frame {} at offset {} failed authentication", h.index, h.offset));
  }
  ++next_;
  offset_ += h.len;
  complete_ = h.last;
  return h;
}

}  // namespace h3pipe::transfer
