#pragma once
// The Loopback fixture of transfer_unit_test.cpp: a TransferReceiver and a TransferSender in one
// process, one ZeroMQ context, tcp://127.0.0.1 with port 0, CURVE on with fresh key pairs; it
// records what each side reports (durable, sent, failed).  Also the key pairs a test makes.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/transfer/frames.h"
#include "common/transfer/keys.h"
#include "common/transfer/receiver.h"
#include "common/transfer/sender.h"
#include "tests/transfer/transfer_test_util.h"

namespace h3pipe::transfer::testing {

struct Keys {
  KeyPair server, client, stranger;
};

inline Keys make_keys(const fs::path& dir) {
  Keys k;
  k.server = keygen(dir, "server").value();
  k.client = keygen(dir, "client").value();
  k.stranger = keygen(dir, "stranger").value();
  return k;
}

class Loopback : public ::testing::Test {
 protected:
  void SetUp() override { keys_ = make_keys(dir_.path() / "keys"); }
  void TearDown() override {
    sender_.reset();
    receiver_.reset();
  }

  ReceiverOptions receiver_options() {
    ReceiverOptions o;
    o.root = dir_.path() / "B";
    o.chunk_bytes = 64 * 1024;
    o.window = 8;
    o.checkpoint_chunks = 2;
    o.heartbeat_ms = 100;
    o.dead_after_ms = 1500;
    o.curve.public_key = keys_.server.public_z85;
    o.curve.secret_key = keys_.server.secret_z85;
    o.curve.allowed_clients = {keys_.client.public_z85};
    return o;
  }

  void start_receiver(ReceiverOptions o) {
    auto r = try_start_receiver(std::move(o));
    ASSERT_TRUE(r.ok()) << r.error().to_string();
  }

  // As start_receiver, but a failure (a bind to an address the previous receiver's socket still
  // holds: libzmq closes it asynchronously) is returned for the caller to retry.
  Status try_start_receiver(ReceiverOptions o) {
    auto r = TransferReceiver::start(
        ctx_, std::move(o),
        [this](const pb::Offer& offer, const fs::path& p, const std::string& sha) -> Status {
          std::lock_guard<std::mutex> l(mu_);
          ++durable_attempts_;
          if (fail_durable_ > 0) {
            --fail_durable_;
            return make_error(errc::redis::kIo, "enqueue failed (test)");
          }
          durable_[offer.job_id() + "|" + sha]++;
          EXPECT_EQ(offer.next_task().input_path(), offer.relative_path());
          EXPECT_TRUE(fs::exists(p));
          return {};
        },
        rprobe_);
    if (!r.ok()) return r.error();
    receiver_ = std::move(*r);
    return {};
  }

  SenderOptions sender_options(const KeyPair& client) {
    SenderOptions o;
    o.host = "A";
    o.root = dir_.path() / "A";
    o.outbox = dir_.path() / "A-outbox";
    o.peers = {{"B", receiver_->endpoint(), keys_.server.public_z85}};
    o.curve.public_key = client.public_z85;
    o.curve.secret_key = client.secret_z85;
    o.heartbeat_ms = 100;
    o.dead_after_ms = 1500;
    o.max_attempts = 3;
    const ReceiverOptions r = receiver_options();
    const EagerSpan eager = eager_span_for(r.chunk_bytes, r.window);  // as config_map does
    o.eager_bytes = eager.bytes;
    o.eager_chunk_bytes = eager.chunk;
    o.on_sent = [this](const SendReport& r) {
      std::lock_guard<std::mutex> l(mu_);
      sent_.push_back(r);
    };
    o.on_failed = [this](const pb::StageTask& t, const Error& e) {
      std::lock_guard<std::mutex> l(mu_);
      failed_[t.job_id()] = e;
    };
    return o;
  }

  void start_sender(SenderOptions o) {
    auto s = TransferSender::start(ctx_, std::move(o), sprobe_);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    sender_ = std::move(*s);
  }

  std::size_t sent_count() {
    std::lock_guard<std::mutex> l(mu_);
    return sent_.size();
  }
  std::size_t failed_count() {
    std::lock_guard<std::mutex> l(mu_);
    return failed_.size();
  }
  int durable_calls() {
    std::lock_guard<std::mutex> l(mu_);
    int n = 0;
    for (auto& [k, v] : durable_) n += v;
    return n;
  }

  TempDir dir_;
  Keys keys_;
  zmq::context_t ctx_{1};
  prometheus::Registry registry_;
  TransferProbe rprobe_{registry_, "receiver"};
  TransferProbe sprobe_{registry_, "sender"};
  std::unique_ptr<TransferReceiver> receiver_;
  std::unique_ptr<TransferSender> sender_;
  std::mutex mu_;
  std::map<std::string, int> durable_;
  std::vector<SendReport> sent_;
  std::map<std::string, Error> failed_;
  int fail_durable_ = 0;
  int durable_attempts_ = 0;  // on_durable calls, failed ones included
};

}  // namespace h3pipe::transfer::testing
