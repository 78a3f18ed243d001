#include "common/transfer/config_map.h"

#include <memory>

#include "common/dispatch/decode_route.h"
#include "common/latent/latent.h"
#include "common/spec/spec.h"
#include "common/transfer/frames.h"
#include "common/transfer/keys.h"

namespace h3pipe::transfer {
namespace fs = std::filesystem;
namespace {

std::size_t host_index(const config::Cluster& c, const std::string& host) {
  for (std::size_t i = 0; i < c.hosts.size(); ++i)
    if (c.hosts[i].name == host) return i;
  return c.hosts.size();
}

Result<std::string> key_at(const config::Cluster& c, const config::Host& h, bool secret) {
  const std::string& file = secret ? h.transfer_secret_key_file : h.transfer_public_key_file;
  const char* field = secret ? "transfer_secret_key_file" : "transfer_public_key_file";
  const std::string where = fmt::format("/hosts/{}/{}", host_index(c, h.name), field);
  if (file.empty())
    return make_error(errc::config::kTransfer,
                      "{}: required when transfer.curve is on between hosts "
                      "(create one with `h3pipe keygen`)",
                      where);
  auto k = load_key_file(file, secret);
  if (!k.ok()) return rephrase(k.error(), "{}: {}", where, k.error().message);
  return k;
}

// This host's CURVE key pair into `curve` (a CurveServer or a CurveClient).
template <typename Curve>
Status load_key_pair(const config::Cluster& c, const config::Host& h, Curve& curve) {
  auto sec = key_at(c, h, true);
  if (!sec.ok()) return sec.error();
  auto pub = key_at(c, h, false);
  if (!pub.ok()) return pub.error();
  curve.secret_key = *sec;
  curve.public_key = *pub;
  return {};
}

}  // namespace

fs::path outbox_dir(const config::Cluster& c, const std::string& host) {
  return c.state_dir / "transfer" / host / "outbox";
}

std::string notify_endpoint(const config::Cluster& c, const std::string& host) {
  return "ipc://" + (c.state_dir / "transfer" / host / "notify.sock").string();
}

bool curve_required(const config::Cluster& c) {
  return c.transfer.curve && c.hosts.size() > 1;
}

bool runs_receiver(const config::Cluster& c, const std::string& host) {
  return !c.pools_on(host, config::StageKind::kDecode).empty();
}

bool runs_sender(const config::Cluster& c, const std::string& host) {
  return !c.pools_on(host, config::StageKind::kSample).empty();
}

Result<ReceiverOptions> receiver_options(const config::Cluster& c, const std::string& host) {
  const config::Host* h = c.find_host(host);
  if (!h) return make_error(errc::config::kTransfer, "--host {}: not a host in the config", host);
  ReceiverOptions o;
  o.host = host;
  o.bind_endpoint = fmt::format("tcp://{}:{}", h->bind, h->transfer_port);
  // The data connection's port (docs/transfer.md): fixed, so that containers can publish it.
  const int data_port = h->data_port();
  if (data_port != 0 && data_port == h->transfer_port)
    return make_error(errc::config::kTransfer,
                      "/hosts/{}/transfer_data_port: {} is the host's transfer_port; the data "
                      "connection needs a port of its own",
                      host_index(c, host), data_port);
  o.data_port = static_cast<std::uint16_t>(data_port);
  o.root = c.artifact_root;
  o.chunk_bytes = c.transfer.chunk_bytes;
  o.window = c.transfer.window;
  o.heartbeat_ms = c.transfer.heartbeat_ms;
  o.dead_after_ms = c.transfer.dead_after_ms;
  o.max_file_bytes = c.limits.max_latent_bytes;
  // Every received latent must fit its job's profile (docs/latent.md) before it is committed.
  o.check_file = [cluster = std::make_shared<const config::Cluster>(c)](
                     const pb::Offer& offer, const std::filesystem::path& part) -> Status {
    auto want = spec::expected_latent(offer.next_task().spec(), *cluster);
    if (!want.ok()) return want.error();
    auto l = latent::read_latent(part, &*want);
    if (!l.ok())
      return rephrase(l.error(), "latent for job {} does not fit profile {} ({}): {}",
                      offer.job_id(), want->profile.name, latent::to_string(want->job),
                      l.error().message);
    return {};
  };
  o.curve.enabled = curve_required(c);
  if (o.curve.enabled) {
    H3_TRY(load_key_pair(c, *h, o.curve));
    o.curve.allowed_clients = h->transfer_allowed_clients;
    const std::size_t i = host_index(c, host);
    for (std::size_t k = 0; k < o.curve.allowed_clients.size(); ++k)
      if (!is_z85_key(o.curve.allowed_clients[k]))
        return make_error(errc::config::kTransfer,
                          "/hosts/{}/transfer_allowed_clients/{}: not a 40-character Z85 key", i,
                          k);
    // Not listed: admit the senders of this cluster, by the public keys their host entries
    // name (the shipped seeds config works once every host has run keygen and the .pub files
    // are copied, docs/deploy.md).
    if (o.curve.allowed_clients.empty()) {
      for (std::size_t k = 0; k < c.hosts.size(); ++k) {
        const config::Host& peer = c.hosts[k];
        if (peer.name == host || !runs_sender(c, peer.name) ||
            peer.transfer_public_key_file.empty())
          continue;
        auto key = load_key_file(peer.transfer_public_key_file, false);
        if (!key.ok())
          return make_error(errc::config::kTransfer,
                            "/hosts/{}/transfer_public_key_file: {} (the receiver on {} admits "
                            "the senders by their public keys)",
                            k, key.error().message, host);
        o.curve.allowed_clients.push_back(*key);
      }
    }
    if (o.curve.allowed_clients.empty())
      return make_error(errc::config::kTransfer,
                        "/hosts/{}/transfer_allowed_clients: empty, and no sending host names a "
                        "transfer_public_key_file: no sender could connect",
                        i);
  }
  return o;
}

Result<SenderOptions> sender_options(const config::Cluster& c, const std::string& host) {
  const config::Host* h = c.find_host(host);
  if (!h) return make_error(errc::config::kTransfer, "--host {}: not a host in the config", host);
  SenderOptions o;
  o.host = host;
  o.root = c.artifact_root;
  o.outbox = outbox_dir(c, host);
  o.notify_endpoint = notify_endpoint(c, host);
  o.heartbeat_ms = c.transfer.heartbeat_ms;
  o.dead_after_ms = c.transfer.dead_after_ms;
  o.max_attempts = c.transfer.max_attempts;
  const EagerSpan eager = eager_span_for(c.transfer.chunk_bytes, c.transfer.window);
  o.eager_bytes = eager.bytes;
  o.eager_chunk_bytes = eager.chunk;
  o.curve.enabled = curve_required(c);
  if (o.curve.enabled) H3_TRY(load_key_pair(c, *h, o.curve));
  for (const auto& peer : c.hosts) {
    if (peer.name == host || !runs_receiver(c, peer.name)) continue;
    if (peer.transfer_port == 0)
      return make_error(
          errc::config::kTransfer,
          "/hosts/{}/transfer_port: a decode host reached over the network needs a fixed port",
          host_index(c, peer.name));
    PeerOptions p{peer.name, fmt::format("tcp://{}:{}", peer.address, peer.transfer_port), ""};
    if (o.curve.enabled) {
      auto k = key_at(c, peer, false);
      if (!k.ok()) return k.error();
      p.server_key = *k;
    }
    o.peers.push_back(std::move(p));
  }
  // A task that reaches the sender without a target host: the one decode-host choice
  // (dispatch/decode_route.h) from this host, with this sender's queues as the latents on their
  // way to each host.  (Samplers choose before the hand-off; this covers the rest.)
  o.choose_host = [c, host](const pb::StageTask& t,
                            const std::map<std::string, std::size_t>& queued) {
    dispatch::DecodeLoad load;
    load.queued = queued;
    const auto in = spec::route_inputs(t.spec(), c);  // the job's profile sizes the transfer
    auto route = dispatch::route_latent(c, {host}, in.job_class, in.latent_bytes, load);
    return route ? route->host : host;
  };
  return o;
}

}  // namespace h3pipe::transfer
