#pragma once
// The sealed data frames of a hand-off (issue #36 item 8, docs/transfer.md "Data frames under
// AES-256-GCM"): the bytes of a latent encrypted with AES-256-GCM (OpenSSL EVP, AES-NI) under a
// fresh random 256-bit key per transfer.  The key travels to the receiver inside the
// CURVE-protected control channel (the offer); only the bulk bytes leave CURVE.
//
// One sealed frame:
//   header (kHeaderBytes, little-endian, authenticated as GCM associated data):
//     "h3d1" magic | u32 flags (bit 0: last frame; other bits 0) | u64 transfer id |
//     u64 frame index | u64 byte offset | u32 plaintext length | u32 0
//   ciphertext (length bytes) | GCM tag (kTagBytes)
// Nonce (96 bits): 4 zero bytes | u64 frame index.  The sender's FrameSealer numbers its frames
// 0, 1, 2, ... and never uses index 2^64-1, so a nonce is never used twice under one key.
//
// The receiver's FrameOpener takes frames only in order: the next index, the next offset
// (contiguous from the start offset it was made with), the transfer id it was made for, and
// nothing after the frame flagged last.  A frame that fails any check, or whose tag does not
// verify, is refused (transfer.protocol) and poisons the opener: every later frame of that
// transfer is refused too, so the transfer fails and is retried under a fresh key (the existing
// retry policy) and no unauthenticated byte is ever handed to the caller (the output is wiped).
//
// Threading: a sealer or opener belongs to one thread.  RAII over EVP_CIPHER_CTX (design
// convention 12); the key bytes are wiped on destruction.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/core/result.h"

namespace h3pipe::transfer {

inline constexpr std::size_t kDataKeyBytes = 32;
inline constexpr std::size_t kHeaderBytes = 40;
inline constexpr std::size_t kTagBytes = 16;
inline constexpr std::size_t sealed_size(std::size_t len) {
  return kHeaderBytes + len + kTagBytes;
}

// A per-transfer key.  random() draws it from OpenSSL's CSPRNG (errors: transfer.config when the
// generator fails); from_bytes() takes the 32 bytes an offer carried (transfer.protocol when the
// length is wrong).
class DataKey final {
 public:
  static Result<DataKey> random();
  static Result<DataKey> from_bytes(std::string_view bytes);
  DataKey(const DataKey&) = default;
  DataKey& operator=(const DataKey&) = default;
  ~DataKey();
  std::string_view bytes() const { return {reinterpret_cast<const char*>(k_.data()), k_.size()}; }

 private:
  DataKey() = default;
  std::array<unsigned char, kDataKeyBytes> k_{};
};

// The parsed header of a frame (not yet authenticated unless FrameOpener::open returned it).
struct DataHeader {
  std::uint64_t tid = 0, index = 0, offset = 0;
  std::uint32_t len = 0;
  bool last = false;
};
// Parses the header of `frame` and checks its shape: magic, reserved bits zero, total size
// equals sealed_size(len).  Errors: transfer.protocol naming what is wrong.
Result<DataHeader> parse_data_header(std::span<const unsigned char> frame);

struct EvpCtxFree {
  void operator()(void* p) const;
};
using EvpCtx = std::unique_ptr<void, EvpCtxFree>;  // an EVP_CIPHER_CTX*

// The sender's side of one transfer: seals frames in order.
class FrameSealer final {
 public:
  // Errors: transfer.config when OpenSSL cannot set the cipher up.
  static Result<FrameSealer> make(const DataKey& key, std::uint64_t tid);
  // Seals `plain` at `offset` into `out` (exactly sealed_size(plain.size()) bytes) as the next
  // frame.  Errors: transfer.protocol (wrong out size, plain over 4 GiB, counter exhausted),
  // transfer.config (OpenSSL failed).
  Status seal(std::uint64_t offset, std::span<const unsigned char> plain, bool last,
              std::span<unsigned char> out);
  std::uint64_t next_index() const { return next_; }

 private:
  FrameSealer(EvpCtx c, std::uint64_t tid) : ctx_(std::move(c)), tid_(tid) {}
  EvpCtx ctx_;
  std::uint64_t tid_ = 0, next_ = 0;
};

// The receiver's side of one transfer: opens frames in order, refuses anything else.
class FrameOpener final {
 public:
  // `start_offset`: the offset the first frame must carry (where the receiver asked the sender
  // to start).  Errors: transfer.config when OpenSSL cannot set the cipher up.
  static Result<FrameOpener> make(const DataKey& key, std::uint64_t tid,
                                  std::uint64_t start_offset);
  // Authenticates and decrypts `frame` into `out` (at least the header's len bytes; `out` may
  // alias the ciphertext at frame.subspan(kHeaderBytes)).  On success the header is returned and
  // out[0, len) holds the plaintext; on any error the opener refuses every later frame, and
  // out[0, len) is either untouched (refused before decrypting) or zeroed (failed
  // authentication): unauthenticated plaintext never stays in it.  Errors: transfer.protocol
  // naming the check (header, transfer id, replayed or reordered index, offset, after the last
  // frame, authentication).
  // `fail_transfer` false (a frame from a data connection not yet bound to this transfer by an
  // authenticated frame): a refusal leaves the opener as it was, so a stranger who can reach the
  // data port cannot fail someone else's transfer by sending junk in its name.
  Result<DataHeader> open(std::span<const unsigned char> frame, std::span<unsigned char> out,
                          bool fail_transfer = true);
  bool failed() const { return failed_; }
  bool complete() const { return complete_; }  // the frame flagged last was opened
  std::uint64_t next_index() const { return next_; }
  std::uint64_t next_offset() const { return offset_; }

 private:
  FrameOpener(EvpCtx c, std::uint64_t tid, std::uint64_t off)
      : ctx_(std::move(c)), tid_(tid), offset_(off) {}
  Error refuse(std::string what, bool fail_transfer = true);
  EvpCtx ctx_;
  std::uint64_t tid_ = 0, next_ = 0, offset_ = 0;
  bool failed_ = false, complete_ = false;
};

}  // namespace h3pipe::transfer
