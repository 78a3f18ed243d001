#pragma once
// The socket-free part of the transfer protocol (docs/transfer.md): what the receiver and the
// sender make of the bytes of one inbound ZeroMQ message, and the bounds every chunk, credit,
// reply and done is checked against.  The receiver and the sender (receiver*.cpp, sender*.cpp)
// call exactly these on every frame from the network; fuzz/transfer drives them with hostile
// bytes.  Pure functions: no I/O, no globals, thread-safe.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/core/result.h"
#include "common/proto/h3pipe.pb.h"

namespace h3pipe::transfer {

// "offer", "chunk", ... for log lines ("empty" without a body).
std::string frame_name(const pb::TransferFrame& f);

// Which side reads the message.
enum class Reader { kReceiver, kSender };

// One inbound message, split in its parts.  The receiver (ROUTER) gets [routing id, frame] or,
// for a chunk, [routing id, frame, bytes]; the sender (DEALER) gets [frame].
// Errors (the caller counts each as a protocol error and drops the message):
//   transfer.frame.parts        the receiver got other than 2 or 3 parts (sender: other than 1)
//   transfer.frame.undecodable  the frame part is not one TransferFrame with a body
//   transfer.frame.unexpected   a frame the other side never sends (a sender's offer to a sender,
//                               a receiver's credit to a receiver, ...)
//   transfer.frame.no_data      a chunk without its bytes part
Result<pb::TransferFrame> parse_frame(Reader reader, std::span<const std::string_view> parts);

// The receiver's verdict on a chunk of `len` bytes at `offset` for a session that has received
// `received` bytes of `size`, `durable` of them on stable storage, under (chunk_bytes, window).
struct ChunkBounds {
  std::uint64_t received = 0, durable = 0, size = 0;
  std::uint32_t chunk_bytes = 0, window = 0;
};
struct ChunkCheck {
  enum class Verdict { kAccept, kDuplicate, kRefuse } verdict = Verdict::kRefuse;
  std::string problem;  // kRefuse: why (gap, size, past the end, beyond the credit)
};
ChunkCheck check_chunk(const ChunkBounds& b, std::uint64_t offset, std::uint64_t len);

// a + credits * chunk, saturating at UINT64_MAX (the highest offset the sender may send up to).
std::uint64_t grant_limit(std::uint64_t acked, std::uint32_t credits, std::uint64_t chunk);

// Length of the next chunk the sender sends at `next` of a `size`-byte file: at most `chunk`
// (the receiver's chunk size) and never past `limit` (the credit, which after eager chunks of
// another size need not fall on a chunk boundary).  The last kTailBytes go in chunks of at most
// kTailChunk: a chunk is decrypted, hashed and written only once all of it is in, so small last
// chunks leave less of that to do after the last byte arrives (13 MB with CURVE: ~1 ms less,
// six alternating runs of 30).  0 when nothing may be sent.
inline constexpr std::uint64_t kTailBytes = 512 * 1024;
inline constexpr std::uint64_t kTailChunk = 64 * 1024;
std::uint64_t next_chunk_len(std::uint64_t next, std::uint64_t size, std::uint64_t limit,
                             std::uint64_t chunk);

// The eager span (Offer.eager_bytes, eager_chunk) a sender uses towards a receiver configured
// with `chunk_bytes` x `window` (one cluster config gives both sides the same values): up to
// 1 MiB in chunks of up to 64 KiB, never more than the receiver grants at the start, so that a
// fresh offer's eager chunks are always taken.
struct EagerSpan {
  std::uint64_t bytes = 0;
  std::uint32_t chunk = 0;
};
EagerSpan eager_span_for(std::uint32_t chunk_bytes, std::uint32_t window);

// The receiver's side: an offer's eager span is taken (when the latent starts from 0) only if it
// is one the receiver would have granted anyway: at most its initial credit, in chunks of at most
// its chunk size, within the offered size.
bool eager_acceptable(const pb::Offer& o, std::uint32_t chunk_bytes, std::uint32_t window);

// The sender's check of a receiver's OfferReply (not already_complete) for a latent of `size`
// bytes.  Errors: transfer.protocol naming `peer`.
Status check_offer_reply(const pb::OfferReply& r, std::uint32_t max_chunk_bytes, std::uint64_t size,
                         std::string_view peer);

// What the sender does with a Done for its active transfer.
struct DoneDecision {
  enum class Action {
    kSucceed,     // durable on the receiver with the offered hash
    kFail,        // give the task up with `error`
    kResend,      // integrity failure: send again from the start (attempts + 1)
    kOfferAgain,  // the receiver asks for a new offer (restart, unknown transfer, I/O)
  } action = Action::kFail;
  Error error;                        // kFail: the task's error
  bool count_protocol_error = false;  // the receiver broke the protocol
  bool count_retry = false;           // an integrity failure (even the last one)
};
struct ActiveTransfer {
  std::string sha256;            // what was offered
  std::string latent;            // the source file, for messages
  bool source_mismatch = false;  // the re-read source did not hash to its sidecar
  int attempts = 1, max_attempts = 1;
};
DoneDecision decide_done(const pb::Done& d, const ActiveTransfer& t, std::string_view peer);

// An error code a receiver sent, kept if it looks like a code ([a-z0-9_.], 1..64 bytes), else
// `fallback`: a peer cannot smuggle arbitrary text into a job's error code.
std::string remote_code(std::string_view code, const ErrorCode& fallback);

}  // namespace h3pipe::transfer
