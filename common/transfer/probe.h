#pragma once
// The transfer component's metrics (docs/design.md, convention 8): domain code calls these methods,
// never prometheus-cpp.  The registry is injected; label `role` is "sender" or "receiver" so that
// one process running both shares the families.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>

namespace h3pipe::transfer {

class TransferProbe final {
 public:
  TransferProbe(prometheus::Registry& registry, const std::string& role);

  void add_bytes(double n) { bytes_.Increment(n); }                  // h3pipe_transfer_bytes_total
  void transfer_done(double seconds) { seconds_.Observe(seconds); }  // h3pipe_transfer_seconds
  void retry() { retries_.Increment(); }                     // h3pipe_transfer_retries_total
  void integrity_failure() { integrity_.Increment(); }       // ..._integrity_failures_total
  void resumed(double bytes) { resumed_.Increment(bytes); }  // ..._resumed_bytes_total
  void set_in_flight(double n) { in_flight_.Set(n); }        // h3pipe_transfer_in_flight
  void set_waiting(double n) { waiting_.Set(n); }            // h3pipe_transfer_waiting_latents
  void auth_refused() { refused_.Increment(); }              // ..._auth_refused_total
  void protocol_error() { protocol_.Increment(); }           // ..._protocol_errors_total
  void peer_dead() { dead_.Increment(); }                    // ..._peer_dead_total
  void failed() { failed_.Increment(); }                     // ..._failed_total
  // A sender's CURVE (or plain) handshake with a receiver succeeded: one per connection, not per
  // transfer, since a peer's connection is kept warm between transfers.
  void connected() { connects_.Increment(); }  // ..._connects_total
  // A sender's latent acknowledged durable, by the path its last attempt's bytes took
  // (h3pipe_transfer_latents_total{path}): sealed (AES-256-GCM data frames), curve (the CURVE
  // control socket), plain (CURVE off).
  void delivered_sealed() { sealed_.Increment(); }
  void delivered_curve() { curve_.Increment(); }
  void delivered_plain() { plain_.Increment(); }
  // The sender gave up waiting for a peer's data connection (not up data_wait_ms after the
  // control handshake: its port unreachable), or left it unused after a sealed attempt stalled:
  // latents go through CURVE meanwhile (h3pipe_transfer_data_fallbacks_total).
  void data_fallback() { fallbacks_.Increment(); }

  double bytes() const { return bytes_.Value(); }
  double retries() const { return retries_.Value(); }
  double integrity_failures() const { return integrity_.Value(); }
  double resumed_bytes() const { return resumed_.Value(); }
  double in_flight() const { return in_flight_.Value(); }
  double waiting() const { return waiting_.Value(); }
  double auth_refusals() const { return refused_.Value(); }
  double protocol_errors() const { return protocol_.Value(); }
  double dead_peers() const { return dead_.Value(); }
  double failures() const { return failed_.Value(); }
  double connects() const { return connects_.Value(); }
  double sealed_latents() const { return sealed_.Value(); }
  double curve_latents() const { return curve_.Value(); }
  double plain_latents() const { return plain_.Value(); }
  double data_fallbacks() const { return fallbacks_.Value(); }

 private:
  prometheus::Counter &bytes_, &retries_, &integrity_, &resumed_, &refused_, &protocol_, &dead_,
      &failed_, &connects_, &sealed_, &curve_, &plain_, &fallbacks_;
  prometheus::Histogram& seconds_;
  prometheus::Gauge &in_flight_, &waiting_;
};

}  // namespace h3pipe::transfer
