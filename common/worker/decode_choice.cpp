#include "common/worker/decode_choice.h"

#include <algorithm>
#include <set>

#include "common/metrics/degraded.h"
#include "common/spec/spec.h"
#include "common/state/state.h"
#include "common/transfer/config_map.h"
#include "common/transfer/outbox.h"
#include "common/worker/heartbeat.h"
#include "common/worker/worker.h"

namespace h3pipe::worker {

dispatch::DecodeLoad decode_load(const config::Cluster& c, state::BoardReader* board,
                                 const std::string& from_host) {
  dispatch::DecodeLoad load;
  // Latents this host's transfer sender still has to deliver (its outbox records, removed on
  // delivery) count where they go, as the simulator counts latents on a link.
  if (!from_host.empty()) {
    std::error_code ec;
    const auto outbox = transfer::outbox_dir(c, from_host);
    if (std::filesystem::is_directory(outbox, ec))
      for (const auto& t : transfer::scan_outbox(outbox, nullptr))
        if (!t.target_host().empty()) load.queued[t.target_host()]++;
  }
  if (!board) return load;
  std::set<std::string> hosts;
  for (const auto* p : c.pools_on("", config::StageKind::kDecode)) hosts.insert(p->host);
  std::vector<std::string> order(hosts.begin(), hosts.end());
  std::vector<std::pair<std::string, std::string>> streams;
  for (const auto& h : order)
    streams.emplace_back(stream_for(config::StageKind::kDecode, h),
                         group_for(config::StageKind::kDecode));
  // A backlog it cannot read counts as empty: the choice becomes "fastest host for this job".
  static metrics::Degraded unknown("decode_backlog_unknown", "decode-host choice");
  auto b = board->backlogs(streams);
  if (!b.ok()) {
    unknown.hit(b.error().to_string());
    return load;
  }
  unknown.ok();
  // As the simulator counts them (Sim::decode_load): the tasks waiting on each host, and each
  // decoder's seconds until idle from its heartbeat (a running decode is there, not queued).
  for (std::size_t i = 0; i < order.size(); ++i)
    if ((*b)[i].waiting() > 0) load.queued[order[i]] += static_cast<std::size_t>((*b)[i].waiting());
  auto pools = board->heartbeats();
  if (!pools.ok()) return load;
  const double now = state::now_ms() / 1000.0;
  for (const auto& [name, bytes] : *pools) {
    const config::Pool* p = c.find_pool(name);
    if (!p || p->stage != config::StageKind::kDecode) continue;
    auto hb = decode_heartbeat(name, bytes);
    // A stamp from the future is no evidence (heartbeat.h): its busy-until is not believed.
    if (hb.ok() && !heartbeat_from_future(*hb, now))
      load.decoder_free_in_s[name] = std::max(0.0, hb->busy_until_unix_s() - now);
  }
  return load;
}

std::vector<DecodeCandidate> score_decode_hosts(const config::Cluster& c,
                                                const std::vector<std::string>& holders,
                                                const pb::StageTask& task,
                                                state::BoardReader* board) {
  const auto load = decode_load(c, board, holders.empty() ? std::string() : holders.front());
  const auto in = spec::route_inputs(task.spec(), c);
  const auto hosts = dispatch::decode_hosts(c, holders, in.job_class, in.latent_bytes, load);
  // Rank by taking the shared choice's pick out, one host at a time, so the order is its order.
  std::vector<dispatch::DecodeHostState> left = hosts;
  std::vector<DecodeCandidate> out;
  while (auto pick = dispatch::choose_decode_host(left)) {
    const auto& h = left[*pick];
    DecodeCandidate d;
    d.host = h.host;
    d.transfer_s = h.transfer_s;
    d.decode_s = dispatch::kCannotRun;
    for (const auto& p : h.decoders)
      if (p.alive) d.decode_s = std::min(d.decode_s, p.expected_s);
    d.done_s = dispatch::expected_decode_completion(h);
    out.push_back(std::move(d));
    left.erase(left.begin() + static_cast<std::ptrdiff_t>(*pick));
  }
  return out;
}

std::string choose_decode_host(const config::Cluster& c, const std::vector<std::string>& holders,
                               const pb::StageTask& task, state::BoardReader* board) {
  const auto in = spec::route_inputs(task.spec(), c);
  auto route = dispatch::route_latent(
      c, holders, in.job_class, in.latent_bytes,
      decode_load(c, board, holders.empty() ? std::string() : holders.front()));
  if (route) return route->host;
  return holders.empty() ? std::string() : holders.front();
}

ResumeTarget resume_decode_target(const config::Cluster& c, const std::vector<std::string>& holders,
                                  const pb::StageTask& task, state::BoardReader* board) {
  const auto in = spec::route_inputs(task.spec(), c);
  auto hosts =
      dispatch::decode_hosts(c, holders, in.job_class, in.latent_bytes, decode_load(c, board));
  std::vector<dispatch::DecodeHostState> here;
  for (const auto& h : hosts)
    if (h.local) here.push_back(h);
  if (auto pick = dispatch::choose_decode_host(here)) return {here[*pick].host, false};
  auto pick = dispatch::choose_decode_host(hosts);
  if (!pick) return {};
  return {hosts[*pick].host, !holders.empty()};
}

}  // namespace h3pipe::worker
