// h3pipe-transfer: one per host.  On a decode host it runs the receiver (verifies, stores and
// enqueues decode tasks); on a sampling host the sender (streams finished latents to the decode
// host).  docs/transfer.md.

#include <thread>

#include "common/logging/log.h"
#include "common/runner/runner.h"
#include "common/transfer/config_map.h"
#include "common/transfer/receiver.h"
#include "common/transfer/sender.h"
#include "services/transfer/handoff.h"

using namespace h3pipe;

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("transfer");
  return *l;
}

}  // namespace

namespace {

int serve(runner::Context& ctx) {
  const config::Cluster& c = ctx.cluster;
  transfer::tune_allocator();
  zmq::context_t zctx(1);  // the process's one context
  // The one place this service's Redis connections are made (the hand-off's, on the receiver's
  // and the sender's threads alike, under its lock).
  const queue::Connector redis(ctx.redis);
  transfer_service::Handoff handoff(c, ctx.host, redis);
  std::unique_ptr<transfer::TransferProbe> rprobe, sprobe;
  std::unique_ptr<transfer::TransferReceiver> receiver;
  std::unique_ptr<transfer::TransferSender> sender;

  if (transfer::runs_receiver(c, ctx.host)) {
    auto o = transfer::receiver_options(c, ctx.host);
    if (!o.ok()) {
      logger().critical("{}", o.error().message);
      return 2;
    }
    handoff.guard(*o);  // a peer delivers only the latents of jobs it sampled (issue #35 D4)
    rprobe = std::make_unique<transfer::TransferProbe>(*ctx.registry, "receiver");
    auto r = transfer::TransferReceiver::start(
        zctx, *o,
        [&](const pb::Offer& offer, const std::filesystem::path& p, const std::string& sha) {
          return handoff.enqueue_decode(offer, p, sha);
        },
        *rprobe);
    if (!r.ok()) {
      logger().critical("{}", r.error().message);
      return 2;
    }
    receiver = std::move(*r);
    logger().info("transfer receiver on {} (CURVE {}{})", receiver->endpoint(),
                  o->curve.enabled ? "on" : "off",
                  receiver->data_endpoint().empty()
                      ? std::string()
                      : "; AES-256-GCM data frames on " + receiver->data_endpoint());
  }
  if (transfer::runs_sender(c, ctx.host)) {
    auto o = transfer::sender_options(c, ctx.host);
    if (!o.ok()) {
      logger().critical("{}", o.error().message);
      return 2;
    }
    o->deliver_local = [&](const pb::StageTask& t, const std::filesystem::path& p,
                           const std::string& sha) { return handoff.enqueue_local(t, p, sha); };
    o->on_failed = [&](const pb::StageTask& t, const Error& e) { handoff.fail(t, e); };
    std::filesystem::create_directories(o->outbox);
    sprobe = std::make_unique<transfer::TransferProbe>(*ctx.registry, "sender");
    auto s = transfer::TransferSender::start(zctx, *o, *sprobe);
    if (!s.ok()) {
      logger().critical("{}", s.error().message);
      return 2;
    }
    sender = std::move(*s);
    logger().info("transfer sender: {} peer(s), notify {}, outbox {}", o->peers.size(),
                  sender->notify_endpoint(), o->outbox.string());
  }
  if (!receiver && !sender)
    logger().warn("host {} runs neither sampling nor decoding: nothing to transfer", ctx.host);
  if (ctx.health) ctx.health->set_ready(true);
  while (!ctx.stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (ctx.health) ctx.health->set_ready(false);
  if (sender) sender->stop();      // unsent work stays in the outbox
  if (receiver) receiver->stop();  // received bytes are checkpointed for resume
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  runner::ServiceInfo info;
  info.name = "transfer";
  return runner::run(argc, argv, info, serve);
}
