#pragma once
// From the cluster config (common/config) to the transfer options, and the conventions a sampler
// and its host's sender share (outbox directory, notify endpoint).  Separate target
// h3pipe::transfer_config so that the protocol library itself stays free of the config schema.
#include <filesystem>
#include <string>

#include "common/config/config.h"
#include "common/core/result.h"
#include "common/transfer/receiver.h"
#include "common/transfer/sender.h"

namespace h3pipe::transfer {

// <state_dir>/transfer/<host>/outbox: the records notify_latent_ready() writes.
std::filesystem::path outbox_dir(const config::Cluster& c, const std::string& host);
// ipc://<state_dir>/transfer/<host>/notify.sock: where the host's sender listens for samplers.
std::string notify_endpoint(const config::Cluster& c, const std::string& host);

// CURVE is on between hosts when transfer.curve (the default); a one-host cluster needs none.
bool curve_required(const config::Cluster& c);
bool runs_receiver(const config::Cluster& c, const std::string& host);  // host has a decode pool
bool runs_sender(const config::Cluster& c, const std::string& host);    // host has a sample pool

// Errors name the config path (e.g. "/hosts/1/transfer_secret_key_file: ...").
Result<ReceiverOptions> receiver_options(const config::Cluster& c, const std::string& host);
Result<SenderOptions> sender_options(const config::Cluster& c, const std::string& host);

}  // namespace h3pipe::transfer
