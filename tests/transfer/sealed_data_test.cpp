// Issue #36 item 8, wired: with CURVE on, a transfer's bytes cross the receiver's data
// connection as AES-256-GCM data frames under a key its offer carried inside CURVE
// (common/transfer/data_cipher.h, receiver_data.cpp).  Loopback, one process (label unit):
// the sender's own path (round trip, the test-only tamper hook) and a hand-driven peer that
// speaks the protocol itself (a frame under a wrong key, a tampered frame on the bound
// connection, a stranger's junk on the data port).
#include <gtest/gtest.h>

#include <zmq_addon.hpp>

#include "common/core/sha256.h"
#include "common/transfer/data_cipher.h"
#include "common/transfer/wire.h"
#include "tests/transfer/loopback_fixture.h"

namespace h3pipe::transfer {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::Loopback;
using testing::make_latent_task;
using testing::random_bytes;
using testing::slurp;
using testing::wait_until;

// Sends a first latent on the new connection (sealed too since its offer waits for the data
// connection; what the callers need is the connection up).
void warm_up(Loopback& t, TransferSender& s, const fs::path& root,
             const std::function<std::size_t()>& sent_count) {
  s.submit(make_latent_task(root, "warm", "w", 70 * 1024, "B"));
  ASSERT_TRUE(wait_until([&] { return sent_count() == 1; }, 10s));
  (void)t;
}

// Every latent sealed, the new connection's first one too: its offer waits for the data
// connection (the pong names the port, then its handshake), so nothing goes through CURVE.
TEST_F(Loopback, EveryLatentCrossesAsSealedDataFramesTheFirstOneToo) {
  start_receiver(receiver_options());
  ASSERT_FALSE(receiver_->data_endpoint().empty()) << "CURVE on: a data connection is bound";
  EXPECT_EQ(receiver_->data_endpoint().rfind("tcp://127.0.0.1:", 0), 0u)
      << "on the control socket's own address: " << receiver_->data_endpoint();
  start_sender(sender_options(keys_.client));
  const std::size_t sizes[] = {70 * 1024, 1, 64 * 1024, 300 * 1024 + 5, 2 * 1024 * 1024 + 17};
  std::map<std::string, std::string> shas;
  int i = 0;
  for (std::size_t n : sizes) {
    const std::string job = "s" + std::to_string(i++);
    sender_->submit(make_latent_task(dir_.path() / "A", "run1", job, n, "B", &shas[job]));
    ASSERT_TRUE(wait_until([&] { return sent_count() == static_cast<std::size_t>(i); }, 10s));
  }
  EXPECT_EQ(sprobe_.sealed_latents(), static_cast<double>(std::size(sizes)))
      << "h3pipe_transfer_latents_total";
  EXPECT_EQ(sprobe_.curve_latents(), 0) << "the first latent too";
  EXPECT_EQ(sprobe_.data_fallbacks(), 0);
  for (std::size_t k = 0; k < sent_.size(); ++k) {
    const SendReport& r = sent_[k];
    EXPECT_TRUE(r.sealed) << r.task.job_id();
    EXPECT_TRUE(r.eager_taken) << r.task.job_id() << ": eager frames go sealed too";
    EXPECT_EQ(r.bytes_sent, r.size) << r.task.job_id() << ": nothing sent twice";
    EXPECT_EQ(r.attempts, 1);
    const fs::path a = dir_.path() / "A/run1" / r.task.job_id() / "latent.h3latent";
    const fs::path b = dir_.path() / "B/run1" / r.task.job_id() / "latent.h3latent";
    EXPECT_EQ(slurp(a), slurp(b)) << r.task.job_id();
    EXPECT_EQ(artifacts::verify(b).value(), shas[r.task.job_id()]);
  }
  EXPECT_EQ(sprobe_.connects(), 1);
  EXPECT_EQ(rprobe_.protocol_errors(), 0);
  EXPECT_EQ(rprobe_.integrity_failures(), 0);
}

TEST_F(Loopback, SealedFramesOffTurnsTheDataConnectionOff) {
  auto ro = receiver_options();
  ro.data_frames = false;
  start_receiver(ro);
  EXPECT_TRUE(receiver_->data_endpoint().empty());
  start_sender(sender_options(keys_.client));
  warm_up(*this, *sender_, dir_.path() / "A", [&] { return sent_count(); });
  sender_->submit(make_latent_task(dir_.path() / "A", "run1", "j", 200 * 1024, "B"));
  ASSERT_TRUE(wait_until([&] { return sent_count() == 2; }, 10s));
  EXPECT_FALSE(sent_[0].sealed) << "no data port announced: CURVE carries the bytes";
  EXPECT_FALSE(sent_[1].sealed) << "no data port announced: CURVE carries the bytes";
  EXPECT_EQ(sprobe_.curve_latents(), 2);
  EXPECT_EQ(sprobe_.data_fallbacks(), 0) << "the receiver has no data connection: no wait";
  EXPECT_LT(sent_[0].seconds, 0.5) << "no wait for a data connection the pong did not announce";
}

TEST_F(Loopback, ATamperedSealedFrameFailsTheAttemptAndTheLatentIsSentAgain) {
  start_receiver(receiver_options());
  auto o = sender_options(keys_.client);
  o.test_only_corrupt_attempts = 1;  // the first attempt of every latent is tampered with
  start_sender(o);
  warm_up(*this, *sender_, dir_.path() / "A", [&] { return sent_count(); });
  const double integrity_before = rprobe_.integrity_failures();
  std::string sha;
  sender_->submit(make_latent_task(dir_.path() / "A", "run1", "j", 500 * 1000, "B", &sha));
  ASSERT_TRUE(wait_until([&] { return sent_count() == 2; }, 20s));
  EXPECT_TRUE(sent_[1].sealed);
  EXPECT_EQ(sent_[1].attempts, 2) << "the tampered attempt failed, the second one delivered";
  EXPECT_EQ(rprobe_.integrity_failures(), integrity_before + 1);
  EXPECT_EQ(artifacts::verify(dir_.path() / "B/run1/j/latent.h3latent").value(), sha);
  EXPECT_EQ(durable_calls(), 2);
}

TEST_F(Loopback, RepeatedTamperingFailsTheJobAndNothingReachesTheFinalName) {
  start_receiver(receiver_options());
  auto o = sender_options(keys_.client);
  o.test_only_corrupt_attempts = 100;
  start_sender(o);
  // Warm up with a latent of one frame: the hook corrupts the second frame of a sealed attempt,
  // and the first latent rides CURVE (corrupted there too, so it fails; what matters is the pong).
  sender_->submit(make_latent_task(dir_.path() / "A", "warm", "w", 1000, "B"));
  ASSERT_TRUE(wait_until([&] { return sent_count() + failed_count() == 1; }, 20s));
  sender_->submit(make_latent_task(dir_.path() / "A", "run1", "j", 300 * 1000, "B"));
  ASSERT_TRUE(wait_until([&] { return failed_.count("j") == 1; }, 20s));
  EXPECT_EQ(failed_.at("j").code, "transfer.integrity");
  EXPECT_NE(failed_.at("j").message.find("authentication"), std::string::npos)
      << failed_.at("j").message;
  EXPECT_FALSE(fs::exists(dir_.path() / "B/run1/j/latent.h3latent"));
  EXPECT_FALSE(fs::exists(dir_.path() / "B/run1/j/latent.h3latent.part"));
  EXPECT_TRUE(fs::exists(dir_.path() / "A-outbox/run1/j.task.failed"));
}

// A peer driven by hand: a CURVE control connection with the allowed key, and a data connection.
class HandPeer {
 public:
  HandPeer(zmq::context_t& ctx, const testing::Keys& keys, const TransferReceiver& r)
      : ctl_(ctx, zmq::socket_type::dealer), data_(ctx, zmq::socket_type::dealer) {
    ctl_.set(zmq::sockopt::linger, 0);
    ctl_.set(zmq::sockopt::curve_serverkey, keys.server.public_z85);
    ctl_.set(zmq::sockopt::curve_publickey, keys.client.public_z85);
    ctl_.set(zmq::sockopt::curve_secretkey, keys.client.secret_z85);
    ctl_.connect(r.endpoint());
    data_.set(zmq::sockopt::linger, 0);
    data_.connect(r.data_endpoint());
  }
  void offer(const pb::Offer& o) {
    pb::TransferFrame f;
    *f.mutable_offer() = o;
    ctl_.send(encode(f), zmq::send_flags::none);
  }
  // The next frame from the receiver other than a pong or a credit, or one with no body after
  // 5 s.
  pb::TransferFrame next() {
    for (;;) {
      zmq::pollitem_t it{ctl_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&it, 1, 5s) == 0) return {};
      zmq::message_t m;
      (void)ctl_.recv(m);
      pb::TransferFrame f;
      if (decode(m, &f) && !f.has_pong() && !f.has_credit()) return f;
    }
  }
  void send_data(const std::string& bytes) {
    data_.send(zmq::buffer(bytes), zmq::send_flags::none);
  }

 private:
  zmq::socket_t ctl_, data_;
};

struct Sealed {
  std::vector<std::string> frames;
};
Sealed seal_all(const DataKey& key, std::uint64_t tid, const std::string& bytes,
                std::size_t chunk) {
  auto s = FrameSealer::make(key, tid).value();
  Sealed out;
  for (std::size_t at = 0; at < bytes.size(); at += chunk) {
    const std::size_t n = std::min(chunk, bytes.size() - at);
    std::string f(sealed_size(n), '\0');
    EXPECT_TRUE(s.seal(at, std::span(reinterpret_cast<const unsigned char*>(bytes.data()) + at, n),
                       at + n == bytes.size(),
                       std::span(reinterpret_cast<unsigned char*>(f.data()), f.size()))
                    .ok());
    out.frames.push_back(std::move(f));
  }
  return out;
}

pb::Offer make_offer(const std::string& job, const std::string& bytes, std::uint64_t tid,
                     const DataKey& key) {
  pb::Offer o;
  o.set_run_id("run1");
  o.set_job_id(job);
  o.set_size(bytes.size());
  o.set_sha256(sha256_hex(bytes));
  o.set_relative_path("run1/" + job + "/latent.h3latent");
  o.mutable_next_task()->set_run_id("run1");
  o.mutable_next_task()->set_job_id(job);
  o.mutable_next_task()->set_input_path(o.relative_path());
  o.set_transfer_id(tid);
  o.set_attempt(1);
  o.set_data_key(std::string(key.bytes()));
  return o;
}

TEST_F(Loopback, AFrameUnderAWrongKeyIsRefusedAndTheGenuineFramesStillDeliver) {
  start_receiver(receiver_options());
  HandPeer peer(ctx_, keys_, *receiver_);
  const std::string bytes = random_bytes(150 * 1000, 7);
  const DataKey key = DataKey::random().value(), wrong = DataKey::random().value();
  const std::uint64_t tid = 0x5eed;
  peer.offer(make_offer("j", bytes, tid, key));
  pb::TransferFrame reply = peer.next();
  ASSERT_TRUE(reply.has_offer_reply());
  ASSERT_EQ(reply.offer_reply().have_offset(), 0u);
  // A stranger on the data port who knows the transfer id but not the key: refused, nothing
  // written, and the transfer goes on (the frame came before any authenticated one).
  Sealed forged = seal_all(wrong, tid, bytes, 64 * 1024);
  peer.send_data(forged.frames[0]);
  ASSERT_TRUE(wait_until([&] { return rprobe_.protocol_errors() >= 1; }, 5s));
  EXPECT_EQ(rprobe_.bytes(), 0) << "no byte of a frame under a wrong key is taken";
  for (const auto& f : seal_all(key, tid, bytes, 64 * 1024).frames) peer.send_data(f);
  pb::TransferFrame done = peer.next();
  ASSERT_TRUE(done.has_done()) << done.DebugString();
  EXPECT_TRUE(done.done().ok()) << done.done().reason();
  EXPECT_EQ(slurp(dir_.path() / "B/run1/j/latent.h3latent"), bytes);
  EXPECT_EQ(durable_calls(), 1);
}

TEST_F(Loopback, ATamperedOrReplayedFrameOnTheBoundConnectionFailsTheTransferCleanly) {
  start_receiver(receiver_options());
  HandPeer peer(ctx_, keys_, *receiver_);
  const std::string bytes = random_bytes(300 * 1000, 9);
  const DataKey key = DataKey::random().value();
  for (const char* how : {"tampered", "replayed"}) {
    const std::string job = std::string("j-") + how;
    const std::uint64_t tid = std::hash<std::string>{}(job);
    peer.offer(make_offer(job, bytes, tid, key));
    ASSERT_TRUE(peer.next().has_offer_reply()) << how;
    Sealed s = seal_all(key, tid, bytes, 64 * 1024);
    peer.send_data(s.frames[0]);  // binds the connection to the transfer
    peer.send_data(s.frames[1]);
    if (std::string(how) == "tampered") {
      s.frames[2][kHeaderBytes + 100] ^= 0x01;
      peer.send_data(s.frames[2]);
    } else {
      peer.send_data(s.frames[1]);
    }
    pb::TransferFrame done = peer.next();
    ASSERT_TRUE(done.has_done()) << how;
    EXPECT_FALSE(done.done().ok()) << how;
    EXPECT_TRUE(done.done().retry()) << how << ": the sender offers again under a new key";
    EXPECT_EQ(done.done().code(), "transfer.integrity") << how;
    EXPECT_NE(
        done.done().reason().find(std::string(how) == "tampered" ? "authentication" : "replayed"),
        std::string::npos)
        << done.done().reason();
    const fs::path b = dir_.path() / "B/run1" / job / "latent.h3latent";
    EXPECT_FALSE(fs::exists(b)) << how;
    EXPECT_FALSE(fs::exists(artifacts::part_path(b))) << how << ": the attempt's file is gone";
  }
  EXPECT_EQ(durable_calls(), 0);
  EXPECT_EQ(rprobe_.integrity_failures(), 2);
}

TEST_F(Loopback, JunkOnTheDataPortIsCountedAndHarmsNoTransfer) {
  start_receiver(receiver_options());
  zmq::socket_t junk(ctx_, zmq::socket_type::dealer);
  junk.set(zmq::sockopt::linger, 0);
  junk.connect(receiver_->data_endpoint());
  junk.send(zmq::str_buffer("not a data frame"), zmq::send_flags::none);
  std::string header_only(kHeaderBytes + kTagBytes + 10, '\0');
  std::memcpy(header_only.data(), "h3d1", 4);
  junk.send(zmq::buffer(header_only), zmq::send_flags::none);
  ASSERT_TRUE(wait_until([&] { return rprobe_.protocol_errors() >= 2; }, 5s));
  start_sender(sender_options(keys_.client));
  warm_up(*this, *sender_, dir_.path() / "A", [&] { return sent_count(); });
  sender_->submit(make_latent_task(dir_.path() / "A", "run1", "j", 200 * 1024, "B"));
  ASSERT_TRUE(wait_until([&] { return sent_count() == 2; }, 10s));
  EXPECT_TRUE(sent_[1].sealed);
  EXPECT_EQ(sent_[1].attempts, 1);
}

}  // namespace
}  // namespace h3pipe::transfer
