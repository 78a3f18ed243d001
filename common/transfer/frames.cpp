#include "common/transfer/frames.h"

#include <algorithm>
#include <climits>

namespace h3pipe::transfer {
namespace {

using Body = pb::TransferFrame::BodyCase;

bool sent_by_sender(Body b) {
  return b == pb::TransferFrame::kOffer || b == pb::TransferFrame::kChunk ||
         b == pb::TransferFrame::kPing;
}
bool sent_by_receiver(Body b) {
  return b == pb::TransferFrame::kOfferReply || b == pb::TransferFrame::kCredit ||
         b == pb::TransferFrame::kDone || b == pb::TransferFrame::kPong;
}

}  // namespace

std::string frame_name(const pb::TransferFrame& f) {
  switch (f.body_case()) {
    case pb::TransferFrame::kOffer:
      return "offer";
    case pb::TransferFrame::kOfferReply:
      return "offer_reply";
    case pb::TransferFrame::kChunk:
      return "chunk";
    case pb::TransferFrame::kCredit:
      return "credit";
    case pb::TransferFrame::kDone:
      return "done";
    case pb::TransferFrame::kPing:
      return "ping";
    case pb::TransferFrame::kPong:
      return "pong";
    default:
      return "empty";
  }
}

Result<pb::TransferFrame> parse_frame(Reader reader, std::span<const std::string_view> parts) {
  const bool rx = reader == Reader::kReceiver;
  if (rx ? parts.size() != 2 && parts.size() != 3 : parts.size() != 1)
    return make_error(errc::transfer::kFrameParts, "a message of {} parts (expected {})",
                      parts.size(), rx ? "2 or 3" : "1");
  const std::string_view bytes = parts[rx ? 1 : 0];
  pb::TransferFrame f;
  if (bytes.size() > static_cast<std::size_t>(INT_MAX) ||
      !f.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) ||
      f.body_case() == pb::TransferFrame::BODY_NOT_SET)
    return make_error(errc::transfer::kFrameUndecodable, "undecodable frame of {} bytes dropped",
                      bytes.size());
  if (!(rx ? sent_by_sender(f.body_case()) : sent_by_receiver(f.body_case())))
    return make_error(errc::transfer::kFrameUnexpected, "unexpected {} frame from a {}",
                      frame_name(f), rx ? "sender" : "receiver");
  if (f.body_case() == pb::TransferFrame::kChunk && parts.size() != 3)
    return make_error(errc::transfer::kFrameNoData, "a chunk frame without its bytes");
  return f;
}

std::uint64_t next_chunk_len(std::uint64_t next, std::uint64_t size, std::uint64_t limit,
                             std::uint64_t chunk) {
  if (next >= size || next >= limit) return 0;
  const std::uint64_t n = size - next <= kTailBytes ? std::min(chunk, kTailChunk) : chunk;
  return std::min({n, size - next, limit - next});
}

EagerSpan eager_span_for(std::uint32_t chunk_bytes, std::uint32_t window) {
  constexpr std::uint64_t kEagerMax = 1u << 20;
  constexpr std::uint32_t kEagerChunk = 64u << 10;
  return {std::min(kEagerMax, grant_limit(0, window, chunk_bytes)),
          std::min(kEagerChunk, chunk_bytes)};
}

bool eager_acceptable(const pb::Offer& o, std::uint32_t chunk_bytes, std::uint32_t window) {
  return o.eager_bytes() > 0 && o.eager_bytes() <= o.size() && o.eager_chunk() > 0 &&
         o.eager_chunk() <= chunk_bytes && o.eager_bytes() <= grant_limit(0, window, chunk_bytes);
}

std::uint64_t grant_limit(std::uint64_t acked, std::uint32_t credits, std::uint64_t chunk) {
  if (credits != 0 && chunk > (UINT64_MAX - acked) / credits) return UINT64_MAX;
  return acked + std::uint64_t{credits} * chunk;
}

ChunkCheck check_chunk(const ChunkBounds& b, std::uint64_t offset, std::uint64_t len) {
  using V = ChunkCheck::Verdict;
  if (offset < b.received) return {V::kDuplicate, {}};  // duplicate after a re-offer race
  const std::uint64_t credit = grant_limit(b.durable, b.window, b.chunk_bytes);
  std::string problem;
  if (offset > b.received)
    problem = fmt::format("chunk at {} leaves a gap after {}", offset, b.received);
  else if (len == 0 || len > b.chunk_bytes)
    problem = fmt::format("chunk of {} bytes (allowed 1..{})", len, b.chunk_bytes);
  else if (offset > b.size || len > b.size - offset)
    problem = fmt::format("chunk [{}, {}) past the offered size {}", offset, offset + len, b.size);
  else if (offset > credit || len > credit - offset)
    problem = fmt::format("chunk at {} beyond the granted credit", offset);
  if (!problem.empty()) return {V::kRefuse, std::move(problem)};
  return {V::kAccept, {}};
}

Status check_offer_reply(const pb::OfferReply& r, std::uint32_t max_chunk_bytes, std::uint64_t size,
                         std::string_view peer) {
  if (r.chunk_size() == 0 || r.chunk_size() > max_chunk_bytes || r.window() == 0 ||
      r.have_offset() > size)
    return make_error(errc::transfer::kProtocol,
                      "receiver {} replied chunk {} window {} have {} (size {})", peer,
                      r.chunk_size(), r.window(), r.have_offset(), size);
  return {};
}

std::string remote_code(std::string_view code, const ErrorCode& fallback) {
  if (code.empty() || code.size() > 64) return std::string(fallback.id);
  for (char c : code)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
      return std::string(fallback.id);
  return std::string(code);
}

DoneDecision decide_done(const pb::Done& d, const ActiveTransfer& t, std::string_view peer) {
  using A = DoneDecision::Action;
  DoneDecision r;
  if (d.ok()) {
    if (d.sha256() != t.sha256) {
      r.action = A::kFail;
      r.count_protocol_error = true;
      r.error = make_error(errc::transfer::kProtocol, "receiver acknowledged sha256 {}, offered {}",
                           d.sha256(), t.sha256);
      return r;
    }
    r.action = A::kSucceed;
    return r;
  }
  if (!d.retry()) {
    r.action = A::kFail;
    // The receiver's own code travels on unchanged (it may be one this build does not know).
    r.error = Error{remote_code(d.code(), errc::transfer::kRefused),
                    fmt::format("receiver {}: {}", peer, d.reason())};
    return r;
  }
  if (d.code() != errc::transfer::kIntegrity) {
    r.action = A::kOfferAgain;
    return r;
  }
  if (t.source_mismatch) {
    r.action = A::kFail;
    r.error = make_error(errc::transfer::kSource,
                         "{} does not match its sidecar {} (corrupt on the sending host)", t.latent,
                         t.sha256);
    return r;
  }
  r.count_retry = true;
  if (t.attempts >= t.max_attempts) {
    r.action = A::kFail;
    r.error = make_error(errc::transfer::kIntegrity, "{} attempts failed verification; last: {}",
                         t.attempts, d.reason());
    return r;
  }
  r.action = A::kResend;
  return r;
}

}  // namespace h3pipe::transfer
