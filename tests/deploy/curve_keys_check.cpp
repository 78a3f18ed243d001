// The CURVE keys of one host as its transfer service loads them: the cluster config (the chart's
// cluster.json with the key files pointed at a folder laid out as the DaemonSet's init container
// leaves it), then the receiver's and the sender's options from h3pipe::transfer's own loader
// (key file format, 0600 on the secret key, the peers' public keys), and the host's public key
// derived from its secret key.  For deploy_helm_curve_hook.py: the Secret the hook Job creates
// must hold keys the transfer pods accept.  Prints no key.
//   h3pipe_curve_keys_check CLUSTER_JSON HOST
#include <cstdio>

#include "common/config/config.h"
#include "common/transfer/config_map.h"
#include "common/transfer/keys.h"

int main(int argc, char** argv) {
  using namespace h3pipe;
  if (argc != 3) {
    std::fprintf(stderr, "usage: h3pipe_curve_keys_check CLUSTER_JSON HOST\n");
    return 2;
  }
  auto c = config::load_file(argv[1]);
  if (!c.ok()) {
    std::fprintf(stderr, "%s\n", c.error().message.c_str());
    return 1;
  }
  const std::string host = argv[2];
  const config::Host* h = c->find_host(host);
  if (!h) {
    std::fprintf(stderr, "%s: not a host of %s\n", host.c_str(), argv[1]);
    return 1;
  }
  auto sec = transfer::load_key_file(h->transfer_secret_key_file, true);
  auto pub = transfer::load_key_file(h->transfer_public_key_file, false);
  if (!sec.ok() || !pub.ok()) {
    std::fprintf(stderr, "%s\n", (!sec.ok() ? sec.error() : pub.error()).message.c_str());
    return 1;
  }
  auto derived = transfer::public_of(*sec);
  if (!derived.ok() || *derived != *pub) {
    std::fprintf(stderr, "%s: the public key is not the secret key's\n", host.c_str());
    return 1;
  }
  std::string roles;
  if (transfer::runs_receiver(*c, host)) {
    auto r = transfer::receiver_options(*c, host);
    if (!r.ok()) {
      std::fprintf(stderr, "receiver: %s\n", r.error().message.c_str());
      return 1;
    }
    roles += " receiver (CURVE " + std::string(r->curve.enabled ? "on" : "off") + ")";
  }
  if (transfer::runs_sender(*c, host)) {
    auto s = transfer::sender_options(*c, host);
    if (!s.ok()) {
      std::fprintf(stderr, "sender: %s\n", s.error().message.c_str());
      return 1;
    }
    roles += " sender (CURVE " + std::string(s->curve.enabled ? "on" : "off") + ")";
  }
  std::printf("%s: keys ok;%s\n", host.c_str(), roles.c_str());
  return 0;
}
