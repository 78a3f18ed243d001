#include "common/transfer/probe.h"

namespace h3pipe::transfer {
namespace {

prometheus::Counter& counter(prometheus::Registry& r, const char* name, const char* help,
                             const std::string& role) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({{"role", role}});
}

prometheus::Gauge& gauge(prometheus::Registry& r, const char* name, const char* help,
                         const std::string& role) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({{"role", role}});
}

prometheus::Counter& latents(prometheus::Registry& r, const std::string& role, const char* path) {
  return prometheus::BuildCounter()
      .Name("h3pipe_transfer_latents_total")
      .Help(
          "Latents acknowledged durable, by the path of their bytes: sealed (AES-256-GCM data "
          "frames), curve (the CURVE socket), plain (CURVE off)")
      .Register(r)
      .Add({{"role", role}, {"path", path}});
}

}  // namespace

TransferProbe::TransferProbe(prometheus::Registry& r, const std::string& role)
    : bytes_(counter(r, "h3pipe_transfer_bytes_total", "Latent bytes sent or received", role)),
      retries_(counter(r, "h3pipe_transfer_retries_total",
                       "Transfers re-sent after an integrity failure", role)),
      integrity_(counter(r, "h3pipe_transfer_integrity_failures_total",
                         "Transfers whose SHA-256 did not match the offer", role)),
      resumed_(counter(r, "h3pipe_transfer_resumed_bytes_total",
                       "Bytes not re-sent thanks to resume from the acknowledged offset", role)),
      refused_(counter(r, "h3pipe_transfer_auth_refused_total",
                       "CURVE clients refused by the ZAP handler", role)),
      protocol_(counter(r, "h3pipe_transfer_protocol_errors_total",
                        "Malformed or out-of-order frames", role)),
      dead_(counter(r, "h3pipe_transfer_peer_dead_total",
                    "Peers declared dead after missing heartbeats", role)),
      failed_(counter(r, "h3pipe_transfer_failed_total",
                      "Transfers given up (max attempts or refused)", role)),
      connects_(counter(
          r, "h3pipe_transfer_connects_total",
          "Handshakes completed with a peer (connections, each kept for many transfers)", role)),
      sealed_(latents(r, role, "sealed")),
      curve_(latents(r, role, "curve")),
      plain_(latents(r, role, "plain")),
      fallbacks_(counter(r, "h3pipe_transfer_data_fallbacks_total",
                         "Times the sender sent through CURVE because the data connection was not "
                         "up in time or had stalled",
                         role)),
      seconds_(prometheus::BuildHistogram()
                   .Name("h3pipe_transfer_seconds")
                   .Help("From offer to verified and durable on the receiver")
                   .Register(r)
                   .Add({{"role", role}},
                        prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
                                                                0.5, 1, 2, 5, 10, 30})),
      in_flight_(gauge(r, "h3pipe_transfer_in_flight", "Transfers in progress", role)),
      waiting_(gauge(r, "h3pipe_transfer_waiting_latents",
                     "Latents waiting to be sent (queued behind the active transfer)", role)) {}

}  // namespace h3pipe::transfer
