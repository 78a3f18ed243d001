// libFuzzer target for the transfer protocol (common/transfer): the code the receiver and the
// sender run on every multipart message from the network, driven by a sequence of hostile
// messages through the same state the services keep (a session on the receiver, the active
// transfer on the sender), plus the sender's notify socket (a StageTask from a local process).
//
// Input (fuzz/transfer/make_seeds.cpp writes valid ones):
//   byte 0: mode % 4   0 = messages to the receiver, 1 = messages to the sender,
//                      2 = the rest is one notification (StageTask) to the sender,
//                      3 = AES-256-GCM data frames to one transfer's FrameOpener (#36 item 8)
//   modes 0 and 1, then records to the end of the input:
//     u8 header        receiver: parts = 1 + (header & 3); bit 2: the I/O thread checkpoints after
//                      this message (durable = received, a Credit is granted)
//                      sender: bit 0: the re-read source did not match its sidecar
//     per part         u16 little-endian length, then that many bytes (fewer at the end)
//   The receiver reads [routing id, frame, bytes]; the sender reads [frame].
//   mode 3, records to the end: u8 header, then one part (u16 length + bytes):
//     bit 0 clear      the part is a raw data frame
//     bit 0 set        the part is plaintext the fuzzer's own sealer (same key) seals as its next
//                      frame (bit 1: flagged last); bit 2: one byte of the sealed frame, at
//                      (header >> 3) * size / 32, is flipped; bit 3 (without bit 2): the frame is
//                      sent twice (a replay)
//
// Abort (a finding) when: a parser crashes, throws, leaks or trips ASan/UBSan; a frame is
// accepted that the reading side must not take (a chunk without bytes, a receiver's frame at the
// receiver); an accepted offer's path leaves root/RUN/JOB or its next_task names another job; a
// chunk is accepted that leaves a gap, overruns the offer, the chunk size or the granted credit;
// the durable or credited offsets go backwards or wrap; a Done counts as success without the
// offered hash; an error has no code or message or a peer's code is taken verbatim when it is not
// a code; an accepted frame does not survive re-encoding.
#include <google/protobuf/stubs/logging.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/artifacts/artifacts.h"
#include "common/core/sha256.h"
#include "common/transfer/data_cipher.h"
#include "common/transfer/frames.h"
#include "common/transfer/receiver.h"
#include "common/transfer/sender_parts.h"

using namespace h3pipe;
using namespace h3pipe::transfer;
namespace fs = std::filesystem;

namespace {

// Receiver limits as in a service, only small so that short inputs reach every branch.
constexpr std::uint32_t kChunk = 64;
constexpr std::uint32_t kWindow = 4;
constexpr std::uint64_t kMaxFile = 4096;
const fs::path kRoot = "/srv/h3pipe/artifacts";
// The sender's active job (make_seeds.cpp uses the same values).
constexpr std::uint64_t kJobSize = 1000;
constexpr std::uint64_t kTid = 7;
constexpr std::uint32_t kMaxChunk = 1u << 20;
const std::string kJobSha(64, 'a');

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_transfer: invariant broken: %s\n", what);
  std::abort();
}
void check(bool ok, const char* what) {
  if (!ok) finding(what);
}
void check_error(const Error& e) {
  check(!e.code.empty() && !e.message.empty(), "an error without code or message");
}
bool is_code(std::string_view c) {
  if (c.empty() || c.size() > 64) return false;
  for (char ch : c)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.'))
      return false;
  return true;
}

class Input final {
 public:
  Input(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  bool done() const { return at_ >= n_; }
  std::uint8_t byte() { return at_ < n_ ? d_[at_++] : 0; }
  std::string_view part() {
    std::size_t len = byte();
    len |= std::size_t{byte()} << 8;
    len = std::min(len, n_ - at_);
    std::string_view v(reinterpret_cast<const char*>(d_ + at_), len);
    at_ += len;
    return v;
  }
  std::string_view rest() {
    std::string_view v(reinterpret_cast<const char*>(d_ + at_), n_ - at_);
    at_ = n_;
    return v;
  }

 private:
  const std::uint8_t* d_;
  std::size_t n_, at_ = 0;
};

// An accepted frame is what the peer would have sent: it re-encodes and parses the same.
void check_reencodes(Reader reader, const pb::TransferFrame& f, std::size_t parts) {
  std::string again = f.SerializeAsString();
  std::vector<std::string_view> v(parts, std::string_view("x"));
  v[reader == Reader::kReceiver ? 1 : 0] = again;
  auto g = parse_frame(reader, v);
  check(g.ok() && g->body_case() == f.body_case(), "an accepted frame does not re-parse");
}

// ---------------------------------------------------------------- receiver

struct Session {
  pb::Offer offer;
  bool eager_ok = false;  // a fresh start (the model's receiver holds nothing) whose span fits
  std::string routing;
  std::uint64_t received = 0, durable = 0;
  Sha256 hasher;
};

void check_offer(const pb::Offer& o, const fs::path& p) {
  check(o.size() >= 1 && o.size() <= kMaxFile, "an offer outside 1..max_file_bytes was accepted");
  check(o.transfer_id() != 0, "an offer without a transfer id was accepted");
  check(o.next_task().run_id() == o.run_id() && o.next_task().job_id() == o.job_id(),
        "an offer whose next_task names another job was accepted");
  auto rel = p.lexically_relative(kRoot);
  auto it = rel.begin();
  check(!rel.empty() && it != rel.end() && *it == o.run_id(), "accepted offer path: not root/RUN");
  ++it;
  check(it != rel.end() && *it == o.job_id(), "accepted offer path: not root/RUN/JOB");
  std::size_t n = 0;
  for (const auto& c : rel) {
    ++n;
    check(artifacts::validate_id("c", c.string()).ok(), "accepted offer path: a bad component");
  }
  check(n >= 3 && n <= 6, "accepted offer path: component count");
  check(artifacts::check_relative(rel).ok(), "accepted offer path fails check_relative");
}

void run_receiver(Input& in) {
  std::optional<Session> s;
  while (!in.done()) {
    const std::uint8_t h = in.byte();
    std::vector<std::string_view> parts(1 + (h & 3));
    for (auto& p : parts) p = in.part();
    auto f = parse_frame(Reader::kReceiver, parts);
    if (!f.ok()) {
      check_error(f.error());
      const std::string& c = f.error().code;
      check(c == errc::transfer::kFrameNoData || c == errc::transfer::kFrameParts ||
                c == errc::transfer::kFrameUndecodable || c == errc::transfer::kFrameUnexpected,
            "a parse error outside transfer.frame.*");
    } else {
      check(parts.size() == 2 || parts.size() == 3, "a message of the wrong part count accepted");
      check_reencodes(Reader::kReceiver, *f, parts.size());
      const std::string routing(parts[0]);
      switch (f->body_case()) {
        case pb::TransferFrame::kPing:
          break;
        case pb::TransferFrame::kOffer: {
          const pb::Offer& o = f->offer();
          auto p = resolve_offer(o, kRoot, kMaxFile);
          if (!p.ok()) {
            check_error(p.error());
            check(p.error().code == errc::transfer::kRefused,
                  "an offer refusal is not transfer.refused");
            break;
          }
          check_offer(o, *p);
          if (s && s->offer.transfer_id() == o.transfer_id() && s->routing == routing) break;
          s.emplace();
          s->offer = o;
          s->eager_ok = eager_acceptable(o, kChunk, kWindow);
          if (s->eager_ok)
            check(o.eager_bytes() <= std::uint64_t{kWindow} * kChunk && o.eager_chunk() <= kChunk,
                  "an eager span beyond the initial credit or the chunk size was accepted");
          s->routing = routing;
          break;
        }
        case pb::TransferFrame::kChunk: {
          check(parts.size() == 3, "a chunk without its bytes was accepted");
          const pb::Chunk& c = f->chunk();
          if (!s || s->offer.transfer_id() != c.transfer_id() || s->routing != routing) break;
          if (c.eager() && !s->eager_ok) break;  // dropped silently, never a protocol error
          const std::uint64_t len = parts[2].size();
          auto v = check_chunk({s->received, s->durable, s->offer.size(), kChunk, kWindow},
                               c.offset(), len);
          if (v.verdict == ChunkCheck::Verdict::kDuplicate) {
            check(c.offset() < s->received, "a new chunk was called a duplicate");
            break;
          }
          if (v.verdict == ChunkCheck::Verdict::kRefuse) {
            check(!v.problem.empty(), "a refused chunk without a reason");
            s.reset();  // the receiver closes the session (keeping the durable prefix)
            break;
          }
          check(c.offset() == s->received, "an accepted chunk leaves a gap");
          check(len >= 1 && len <= kChunk, "an accepted chunk exceeds the chunk size");
          check(len <= s->offer.size() - s->received, "an accepted chunk overruns the offer");
          check(c.offset() + len <= s->durable + std::uint64_t{kWindow} * kChunk,
                "an accepted chunk is beyond the granted credit");
          s->hasher.update(parts[2].data(), len);
          s->received += len;
          if (s->received == s->offer.size()) {
            (void)(s->hasher.hex_digest() == s->offer.sha256());  // commit or integrity failure
            s.reset();
          }
          break;
        }
        default:
          finding("the receiver accepted a frame a sender never sends");
      }
    }
    if ((h & 4) && s) {  // checkpoint: durable catches up, credit is granted against it
      const std::uint64_t before = grant_limit(s->durable, kWindow, kChunk);
      check(s->received >= s->durable, "durable beyond received");
      s->durable = s->received;
      check(grant_limit(s->durable, kWindow, kChunk) >= before, "the granted credit went back");
    }
  }
}

// ---------------------------------------------------------------- sender

void run_sender(Input& in) {
  enum class St { kOffered, kStreaming, kAwaitDone, kFinished } st = St::kOffered;
  ActiveTransfer t{kJobSha, "/srv/h3pipe/artifacts/r/j/latent.h3latent", false, 1, 3};
  std::uint64_t chunk = 0, next = 0, limit = 0;
  auto pump = [&] {
    next = std::max(next, std::min(kJobSize, limit));
    if (next == kJobSize) st = St::kAwaitDone;
  };
  while (!in.done() && st != St::kFinished) {
    const std::uint8_t h = in.byte();
    t.source_mismatch = h & 1;
    std::string_view part = in.part();
    auto f = parse_frame(Reader::kSender, std::span(&part, 1));
    if (!f.ok()) {
      check_error(f.error());
      continue;
    }
    check_reencodes(Reader::kSender, *f, 1);
    switch (f->body_case()) {
      case pb::TransferFrame::kPong:
        break;
      case pb::TransferFrame::kOfferReply: {
        const pb::OfferReply& r = f->offer_reply();
        if (st != St::kOffered || r.transfer_id() != kTid) break;
        if (r.already_complete()) {
          st = St::kFinished;
          break;
        }
        auto ok = check_offer_reply(r, kMaxChunk, kJobSize, "B");
        if (!ok.ok()) {
          check_error(ok.error());
          st = St::kFinished;
          break;
        }
        check(r.chunk_size() >= 1 && r.chunk_size() <= kMaxChunk && r.window() >= 1 &&
                  r.have_offset() <= kJobSize,
              "an offer reply outside the limits was accepted");
        chunk = r.chunk_size();
        next = r.have_offset();
        limit = grant_limit(next, r.window(), chunk);
        check(limit > next, "an accepted reply grants no credit");
        st = St::kStreaming;
        pump();
        break;
      }
      case pb::TransferFrame::kCredit: {
        const pb::Credit& c = f->credit();
        if (st != St::kStreaming || c.transfer_id() != kTid) break;
        const std::uint64_t g = grant_limit(c.acked_offset(), c.credits(), chunk);
        check(g >= c.acked_offset(), "a credit wrapped around");
        limit = std::max(limit, g);
        pump();
        break;
      }
      case pb::TransferFrame::kDone: {
        const pb::Done& d = f->done();
        if (d.transfer_id() != kTid) break;
        auto what = decide_done(d, t, "B");
        using A = DoneDecision::Action;
        switch (what.action) {
          case A::kSucceed:
            check(d.ok() && d.sha256() == kJobSha, "success without the offered hash");
            st = St::kFinished;
            break;
          case A::kFail:
            check_error(what.error);
            check(is_code(what.error.code), "a peer's text became an error code");
            if (d.ok()) check(what.count_protocol_error, "a wrong hash not counted");
            st = St::kFinished;
            break;
          case A::kResend:
            check(!d.ok() && d.retry() && t.attempts < t.max_attempts && what.count_retry,
                  "a resend outside an integrity retry");
            ++t.attempts;
            st = St::kOffered, next = 0, limit = 0;
            break;
          case A::kOfferAgain:
            check(!d.ok() && d.retry(), "offered again without a retry");
            st = St::kOffered, next = 0, limit = 0;
            break;
        }
        break;
      }
      default:
        finding("the sender accepted a frame a receiver never sends");
    }
  }
}

// ---------------------------------------------------------------- data frames

// Abort when: a tampered or replayed frame, or any frame after a refusal or after the last one,
// is accepted; a genuine in-order frame is refused; an accepted frame's plaintext differs from
// what was sealed, or its index/offset are not the next; a refusal is not transfer.protocol.
void run_data(Input& in) {
  static const std::string kKeyBytes(kDataKeyBytes, 'K');
  auto key = DataKey::from_bytes(kKeyBytes);
  check(key.ok(), "a 32-byte key refused");
  auto sealer = FrameSealer::make(*key, kTid);
  auto opener = FrameOpener::make(*key, kTid, 0);
  check(sealer.ok() && opener.ok(), "cipher setup failed");
  std::uint64_t seal_off = 0, accepted = 0;
  bool sealer_done = false;  // the fuzzer's sealer sealed a last frame
  std::vector<unsigned char> out;
  auto feed = [&](std::span<const unsigned char> frame, const std::string* plain, bool genuine) {
    const bool was_failed = opener->failed(), was_complete = opener->complete();
    const std::uint64_t next = opener->next_index(), off = opener->next_offset();
    out.assign(frame.size(), 0xA5);
    auto r = opener->open(frame, out);
    if (!r.ok()) {
      check_error(r.error());
      check(r.error().code == errc::transfer::kProtocol, "a data refusal is not transfer.protocol");
      check(opener->failed(), "a refusal did not poison the opener");
      check(!genuine || was_failed || was_complete || next != accepted,
            "a genuine in-order frame was refused");
      return;
    }
    check(!was_failed && !was_complete, "a frame accepted after a refusal or the last frame");
    check(r->index == next && r->offset == off, "an accepted frame is not the next one");
    check(opener->next_offset() == off + r->len, "the offset did not advance by the length");
    check(plain != nullptr && genuine, "a forged, tampered or replayed frame was accepted");
    check(r->len == plain->size() && std::equal(plain->begin(), plain->end(), out.begin(),
                                                [](char a, unsigned char b) {
                                                  return static_cast<unsigned char>(a) == b;
                                                }),
          "the opened plaintext differs from the sealed one");
    ++accepted;
  };
  while (!in.done()) {
    const std::uint8_t h = in.byte();
    std::string_view part = in.part();
    if (!(h & 1)) {
      feed({reinterpret_cast<const unsigned char*>(part.data()), part.size()}, nullptr, false);
      continue;
    }
    if (sealer_done) continue;
    const std::string plain(part);
    std::vector<unsigned char> f(sealed_size(plain.size()));
    const std::uint64_t index = sealer->next_index();
    auto st = sealer->seal(
        seal_off, {reinterpret_cast<const unsigned char*>(plain.data()), plain.size()}, h & 2, f);
    check(st.ok(), "a seal failed");
    check(sealer->next_index() == index + 1, "the sealer's counter did not advance");
    seal_off += plain.size();
    sealer_done = h & 2;
    // The opener has taken exactly the sealer's earlier frames (no tampering so far) when
    // `accepted` equals this frame's index: only then is this frame the genuine next one.
    const bool in_step = accepted == index;
    if (h & 4) {
      f[(h >> 3) * f.size() / 32] ^= 0x01;
      feed(f, &plain, false);
    } else {
      feed(f, &plain, in_step);
      if (h & 8) feed(f, &plain, false);  // the same frame again
    }
  }
}

// ---------------------------------------------------------------- notify

SenderOptions* g_sender = nullptr;

void run_notify(Input& in) {
  std::string_view bytes = in.rest();
  pb::StageTask task;
  if (!task.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  // TransferSender::accept: ids first, then the job (the file must lie under the root).
  if (!artifacts::validate_id("task.run_id", task.run_id()).ok() ||
      !artifacts::validate_id("task.job_id", task.job_id()).ok())
    return;
  auto j = detail::make_job(*g_sender, task);
  if (!j.ok()) {
    check_error(j.error());
    return;
  }
  auto rel = j->latent.lexically_relative(g_sender->root);
  check(!rel.empty() && artifacts::check_relative(rel).ok(), "a job outside the sender's root");
  check(j->sha.size() == 64 && j->size > 0, "a job without sidecar or size");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // protobuf logs every string field with invalid UTF-8 it parses; that is not a finding.
  google::protobuf::SetLogHandler(nullptr);
  // The sender's root: one latent with its sidecar at r/j/latent.h3latent (the seeds name it).
  char tmpl[] = "/tmp/fuzz_transfer.XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  if (!dir) std::abort();
  static SenderOptions opts;
  opts.host = "A";
  opts.root = dir;
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(g_sender->root, ec);
  });
  if (!artifacts::write_atomic(opts.root / "r/j/latent.h3latent", std::string(kJobSize, 'L')).ok())
    std::abort();
  g_sender = &opts;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Input in(data, size);
  switch (in.byte() % 4) {
    case 0:
      run_receiver(in);
      break;
    case 1:
      run_sender(in);
      break;
    case 3:
      run_data(in);
      break;
    default:
      run_notify(in);
  }
  // Codes from a peer: either one of ours in shape, or the fallback.
  std::string_view raw(reinterpret_cast<const char*>(data), std::min<std::size_t>(size, 80));
  std::string c = remote_code(raw, errc::transfer::kRefused);
  check(c == errc::transfer::kRefused || (c == raw && is_code(c)), "remote_code");
  return 0;
}
