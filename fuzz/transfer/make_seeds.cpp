// Writes the checked-in inputs of fuzz_transfer (fuzz/transfer/corpus) in its input format
// (fuzz_transfer.cpp): valid conversations for the receiver and the sender, a notification, and
// the malformed messages kept as regress_* (each once got past a check, or guards one).
//   make_transfer_seeds OUT_DIR
// Deterministic: rerunning it rewrites the same bytes.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/core/error_codes.h"
#include "common/core/sha256.h"
#include "common/proto/h3pipe.pb.h"

using namespace h3pipe;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kTid = 7;  // fuzz_transfer's sender transfer id
const std::string kJobSha(64, 'a');

class Seed {
 public:
  explicit Seed(std::uint8_t mode) { b_.push_back(static_cast<char>(mode)); }
  // One message: header byte (receiver: parts - 1 in bits 0-1, bit 2 checkpoint), then parts.
  Seed& msg(std::uint8_t header, const std::vector<std::string>& parts) {
    b_.push_back(static_cast<char>(header));
    for (const auto& p : parts) {
      b_.push_back(static_cast<char>(p.size() & 0xff));
      b_.push_back(static_cast<char>(p.size() >> 8));
      b_ += p;
    }
    return *this;
  }
  Seed& rx(const pb::TransferFrame& f, bool checkpoint = false) {
    return msg(1 | (checkpoint ? 4 : 0), {"peer-1", f.SerializeAsString()});
  }
  Seed& rx_chunk(const pb::TransferFrame& f, const std::string& data, bool checkpoint = false) {
    return msg(2 | (checkpoint ? 4 : 0), {"peer-1", f.SerializeAsString(), data});
  }
  Seed& tx(const pb::TransferFrame& f, bool source_mismatch = false) {
    return msg(source_mismatch ? 1 : 0, {f.SerializeAsString()});
  }
  Seed& raw(const std::string& s) {
    b_ += s;
    return *this;
  }
  const std::string& bytes() const { return b_; }

 private:
  std::string b_;
};

std::string sha_of(const std::string& s) {
  Sha256 h;
  h.update(s.data(), s.size());
  return h.hex_digest();
}

pb::TransferFrame offer(const std::string& run, const std::string& job, const std::string& data,
                        const std::string& rel = "", std::uint64_t tid = 9) {
  pb::TransferFrame f;
  auto* o = f.mutable_offer();
  o->set_run_id(run);
  o->set_job_id(job);
  o->set_size(data.size());
  o->set_sha256(sha_of(data));
  o->set_relative_path(rel.empty() ? run + "/" + job + "/latent.h3latent" : rel);
  auto* t = o->mutable_next_task();
  t->set_run_id(run);
  t->set_job_id(job);
  t->set_stage(pb::STAGE_DECODE);
  t->set_input_path(o->relative_path());
  t->set_target_host("B");
  o->set_transfer_id(tid);
  o->set_attempt(1);
  return f;
}
pb::TransferFrame chunk(std::uint64_t offset, std::uint64_t tid = 9) {
  pb::TransferFrame f;
  f.mutable_chunk()->set_job_id("j");
  f.mutable_chunk()->set_offset(offset);
  f.mutable_chunk()->set_transfer_id(tid);
  return f;
}
pb::TransferFrame ping() {
  pb::TransferFrame f;
  f.mutable_ping()->set_unix_ms(1700000000000);
  return f;
}
pb::TransferFrame reply(std::uint64_t have, std::uint32_t window, std::uint32_t chunk_size,
                        bool complete = false) {
  pb::TransferFrame f;
  auto* r = f.mutable_offer_reply();
  r->set_job_id("j");
  r->set_transfer_id(kTid);
  r->set_have_offset(have);
  r->set_window(window);
  r->set_chunk_size(chunk_size);
  r->set_already_complete(complete);
  return f;
}
pb::TransferFrame credit(std::uint64_t acked, std::uint32_t credits) {
  pb::TransferFrame f;
  f.mutable_credit()->set_job_id("j");
  f.mutable_credit()->set_transfer_id(kTid);
  f.mutable_credit()->set_acked_offset(acked);
  f.mutable_credit()->set_credits(credits);
  return f;
}
pb::TransferFrame done(bool ok, const std::string& sha, bool retry, std::string_view code,
                       const std::string& reason) {
  pb::TransferFrame f;
  auto* d = f.mutable_done();
  d->set_job_id("j");
  d->set_transfer_id(kTid);
  d->set_ok(ok);
  d->set_sha256(sha);
  d->set_retry(retry);
  d->set_code(std::string(code));
  d->set_reason(reason);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  fs::create_directories(out);
  std::vector<std::pair<std::string, Seed>> seeds;
  const std::string small(100, 'x'), big(1000, 'y');

  // Receiver: a whole transfer (offer, two chunks, verified), one under credit with checkpoints,
  // a ping, a duplicate offer and a duplicate chunk.
  seeds.emplace_back("rx_transfer_complete", Seed(0)
                                                 .rx(offer("r", "j", small))
                                                 .rx_chunk(chunk(0), small.substr(0, 64))
                                                 .rx_chunk(chunk(64), small.substr(64)));
  {
    Seed s(0);
    s.rx(offer("r", "j", big)).rx(ping());
    for (std::uint64_t at = 0; at < big.size(); at += 64)
      s.rx_chunk(chunk(at), big.substr(at, 64), at % 128 == 64);
    seeds.emplace_back("rx_transfer_credit_checkpoints", s);
  }
  seeds.emplace_back("rx_duplicates", Seed(0)
                                          .rx(offer("r", "j", small))
                                          .rx(offer("r", "j", small))
                                          .rx_chunk(chunk(0), small.substr(0, 64))
                                          .rx_chunk(chunk(0), small.substr(0, 64)));
  seeds.emplace_back("rx_ping", Seed(0).rx(ping()));
  {
    // Issue #36 item 8, wired: an offer with a data key (its chunks then come as data frames on
    // the data connection), and a receiver's pong naming its data port.
    auto keyed = offer("r", "j", small);
    keyed.mutable_offer()->set_data_key(std::string(32, '\x5a'));
    seeds.emplace_back("rx_keyed_offer", Seed(0).rx(keyed));
    pb::TransferFrame pong;
    pong.mutable_pong()->set_unix_ms(1700000000000);
    pong.mutable_pong()->set_data_port(41234);
    seeds.emplace_back("tx_pong_data_port", Seed(1).tx(pong));
  }
  {
    // Zero-round-trip start: the offer declares an eager span, the eager chunks follow at once;
    // then one whose span the receiver would not grant (its eager chunks are dropped).
    auto eager_offer = offer("r", "j", small);
    eager_offer.mutable_offer()->set_eager_bytes(100);
    eager_offer.mutable_offer()->set_eager_chunk(64);
    auto eager_chunk = [&](std::uint64_t at) {
      auto f = chunk(at);
      f.mutable_chunk()->set_eager(true);
      return f;
    };
    seeds.emplace_back("rx_eager_start", Seed(0)
                                             .rx(eager_offer)
                                             .rx_chunk(eager_chunk(0), small.substr(0, 64))
                                             .rx_chunk(eager_chunk(64), small.substr(64)));
    auto too_big = offer("r", "j", big, "", 10);
    too_big.mutable_offer()->set_eager_bytes(1000);
    too_big.mutable_offer()->set_eager_chunk(64);
    auto dropped = chunk(0, 10);
    dropped.mutable_chunk()->set_eager(true);
    seeds.emplace_back("rx_eager_refused", Seed(0)
                                               .rx(too_big)
                                               .rx_chunk(dropped, big.substr(0, 64))
                                               .rx_chunk(chunk(0, 10), big.substr(0, 64)));
  }

  // Sender: reply, credit, done; integrity retry then success; already complete; refused.
  seeds.emplace_back(
      "tx_stream_credit_done",
      Seed(1).tx(reply(0, 2, 256)).tx(credit(512, 2)).tx(done(true, kJobSha, false, "", "")));
  seeds.emplace_back("tx_integrity_retry",
                     Seed(1)
                         .tx(reply(0, 4, 256))
                         .tx(done(false, "", true, errc::transfer::kIntegrity.id,
                                  "received bytes hash to 00, the offer says aa"))
                         .tx(reply(0, 4, 256))
                         .tx(done(true, kJobSha, false, "", "")));
  seeds.emplace_back("tx_resume_already_complete", Seed(1).tx(reply(1000, 4, 256, true)));
  seeds.emplace_back("tx_refused", Seed(1)
                                       .tx(reply(0, 4, 256))
                                       .tx(done(false, "", false, errc::transfer::kRefused.id,
                                                "offer.size: too big")));
  seeds.emplace_back("tx_unknown_offer_again",
                     Seed(1)
                         .tx(done(false, "", true, errc::transfer::kUnknown.id, "offer again"))
                         .tx(reply(512, 4, 256))
                         .tx(done(true, kJobSha, false, "", "")));
  {
    pb::StageTask t;
    t.set_run_id("r");
    t.set_job_id("j");
    t.set_stage(pb::STAGE_DECODE);
    t.set_input_path("r/j/latent.h3latent");
    t.set_target_host("B");
    seeds.emplace_back("notify_task", Seed(2).raw(t.SerializeAsString()));
    t.set_input_path("r/../r/j/latent.h3latent");
    seeds.emplace_back("regress_notify_dotdot", Seed(2).raw(t.SerializeAsString()));
  }

  // Data frames (mode 3, #36 item 8): header bit 0 = seal the part as the next frame, bit 1 =
  // last, bit 2 = flip a byte (position (header >> 3) * size / 32), bit 3 = send it twice.
  seeds.emplace_back("data_round_trip", Seed(3)
                                            .msg(1, {std::string(64, 'a')})
                                            .msg(1, {std::string(64, 'b')})
                                            .msg(1 | 2, {std::string(10, 'c')}));
  seeds.emplace_back("regress_data_tampered",
                     Seed(3).msg(1 | 4 | (20 << 3), {std::string(64, 'a')}));
  seeds.emplace_back("regress_data_tampered_header", Seed(3).msg(1 | 4 | (3 << 3), {"abc"}));
  seeds.emplace_back("regress_data_replayed",
                     Seed(3).msg(1 | 8, {std::string(64, 'a')}).msg(1, {"x"}));
  seeds.emplace_back("regress_data_after_last",
                     Seed(3).msg(1 | 2, {"a"}).msg(0, {std::string(56, 0)}));
  seeds.emplace_back("regress_data_raw",
                     Seed(3).msg(0, {std::string("h3d1") + std::string(52, 0)}));

  // Regression: malformed messages and offers that must be refused.
  seeds.emplace_back("regress_offer_other_jobs_path",  // replaced another job's latent
                     Seed(0).rx(offer("r", "j", small, "r/other/latent.h3latent")));
  {
    auto f = offer("r", "j", small);
    f.mutable_offer()->mutable_next_task()->set_job_id("other");  // enqueued another job's decode
    seeds.emplace_back("regress_offer_foreign_next_task", Seed(0).rx(f));
  }
  seeds.emplace_back("regress_offer_traversal",
                     Seed(0).rx(offer("r", "j", small, "r/j/../../../etc/x")));
  seeds.emplace_back("regress_offer_absolute", Seed(0).rx(offer("r", "j", small, "/etc/cron.d/x")));
  seeds.emplace_back("regress_offer_nul",
                     Seed(0).rx(offer("r", "j", small, std::string("r/j/a\0b", 7))));
  seeds.emplace_back("regress_chunk_without_bytes",
                     Seed(0).rx(offer("r", "j", small)).rx(chunk(0)));
  seeds.emplace_back("regress_four_parts",
                     Seed(0).msg(3, {"peer-1", ping().SerializeAsString(), "a", "b"}));
  seeds.emplace_back("regress_undecodable", Seed(0).msg(1, {"peer-1", "\xff\xff\xff\xff\x0f"}));
  seeds.emplace_back("regress_credit_to_receiver", Seed(0).rx(credit(0, 4)));
  seeds.emplace_back("regress_chunk_gap",
                     Seed(0).rx(offer("r", "j", small)).rx_chunk(chunk(64), "z"));
  seeds.emplace_back("regress_chunk_oversize",
                     Seed(0).rx(offer("r", "j", small)).rx_chunk(chunk(0), std::string(65, 'z')));
  seeds.emplace_back("regress_chunk_past_end", Seed(0)
                                                   .rx(offer("r", "j", small))
                                                   .rx_chunk(chunk(0), small.substr(0, 64))
                                                   .rx_chunk(chunk(64), std::string(64, 'z')));
  {
    Seed s(0);
    s.rx(offer("r", "j", big));
    for (std::uint64_t at = 0; at <= 256; at += 64) s.rx_chunk(chunk(at), big.substr(at, 64));
    seeds.emplace_back("regress_chunk_beyond_credit", s);
  }
  seeds.emplace_back("regress_chunk_huge_offset",
                     Seed(0).rx(offer("r", "j", small)).rx_chunk(chunk(UINT64_MAX - 10), "zz"));
  seeds.emplace_back("regress_credit_wraps",  // acked + credits * chunk overflowed uint64
                     Seed(1).tx(reply(0, 1, 256)).tx(credit(UINT64_MAX - 100, 4)));
  seeds.emplace_back("regress_reply_zero_window", Seed(1).tx(reply(0, 0, 256)));
  seeds.emplace_back("regress_reply_have_past_size", Seed(1).tx(reply(5000, 4, 256)));
  seeds.emplace_back(
      "regress_done_wrong_sha",
      Seed(1).tx(reply(0, 4, 256)).tx(done(true, std::string(64, 'b'), false, "", "")));
  seeds.emplace_back("regress_done_code_text",  // a receiver's text became the job's error code
                     Seed(1).tx(done(false, "", false, "Refused\nFAKE LOG LINE", "x")));
  seeds.emplace_back("regress_offer_to_sender", Seed(1).tx(offer("r", "j", small)));

  for (const auto& [name, seed] : seeds) {
    std::ofstream f(out / name, std::ios::binary | std::ios::trunc);
    f.write(seed.bytes().data(), static_cast<std::streamsize>(seed.bytes().size()));
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", (out / name).c_str());
      return 1;
    }
  }
  std::printf("%zu inputs written to %s\n", seeds.size(), out.c_str());
  return 0;
}
