#include "common/worker/gpu_lease.h"

#include <map>
#include <random>

#include "common/logging/log.h"
#include "common/queue/keys.h"

namespace {

// This file's component logger (common/logging/log.h).
spdlog::logger& logger() {
  static const auto l = h3pipe::logging::get("gpu_lease");
  return *l;
}

}  // namespace

namespace h3pipe::worker {
namespace {

std::string new_token(const std::string& holder) {
  std::random_device rd;
  return fmt::format("{}/{:08x}", holder, rd());
}

}  // namespace

std::string gpu_group(const config::Cluster& c, const config::Pool& p) {
  // The simulator's grouping (Cluster::gpu_group_leaders); the first pool names the group.
  const auto leader = c.gpu_group_leaders();
  for (std::size_t i = 0; i < c.pools.size(); ++i) {
    if (c.pools[i].name != p.name) continue;
    for (std::size_t k = 0; k < c.pools.size(); ++k)
      if (k != i && leader[k] == leader[i]) return c.pools[leader[i]].name;
    return "";
  }
  return "";
}

const config::Pool* group_pool(const config::Cluster& c, const config::Pool& p,
                               config::StageKind stage) {
  const std::string g = gpu_group(c, p);
  if (g.empty()) return nullptr;
  for (const auto& q : c.pools)
    if (q.stage == stage && gpu_group(c, q) == g) return &q;
  return nullptr;
}

std::string group_sample_stream(const std::string& group) {
  return keys::group_sample_stream(group);
}

GroupRole group_role(const config::Cluster& c, const config::Pool& p) {
  GroupRole r;
  r.group = gpu_group(c, p);
  if (r.group.empty()) return r;
  r.rank = p.stage == config::StageKind::kEncode   ? 1
           : p.stage == config::StageKind::kSample ? 2
                                                   : 3;
  if (p.stage == config::StageKind::kEncode && group_pool(c, p, config::StageKind::kSample)) {
    r.to_stream = group_sample_stream(r.group);
    r.then_rank = 2;
  }
  if (p.stage == config::StageKind::kSample) {
    if (group_pool(c, p, config::StageKind::kEncode)) r.own_stream = group_sample_stream(r.group);
    const config::Pool* d = group_pool(c, p, config::StageKind::kDecode);
    if (d && d->host == p.host) r.then_rank = 3;
  }
  return r;
}

GpuLease::GpuLease(queue::Connector connector, const std::string& group, const std::string& holder,
                   int rank, int ttl_ms)
    : connector_(std::move(connector)),
      store_(group, new_token(holder), rank, ttl_ms),
      ttl_ms_(ttl_ms) {
  renewer_ = std::thread([this] { renew_loop(); });
}

GpuLease::~GpuLease() {
  release();
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  renewer_.join();
}

Result<bool> GpuLease::acquire() {
  if (!redis_) {
    auto r = connector_.connect();
    if (!r.ok()) return r.error();
    redis_ = std::move(*r);
  }
  auto got = store_.acquire(*redis_);
  if (!got.ok()) {
    if (got.error().code == errc::redis::kIo) redis_.reset();
    return got.error();
  }
  held_ = *got;
  return *got;
}

void GpuLease::release(int then_rank) {
  if (!held_.exchange(false) || !redis_) return;
  // Best effort: a lease not released expires after ttl.
  if (auto s = store_.release(*redis_, then_rank); !s.ok() && s.error().code == errc::redis::kIo)
    redis_.reset();
}

void GpuLease::renew_loop() {
  std::unique_ptr<queue::Redis> r;
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(std::max(10, ttl_ms_ / 3)),
                 [this] { return stop_; });
    if (stop_ || !held_) continue;
    lk.unlock();
    if (!r) {
      auto c = connector_.connect();
      if (c.ok()) r = std::move(c.value());
    }
    if (r) {
      auto x = store_.renew(*r);
      if (!x.ok()) {
        logger().warn("gpu lease {}: renewal failed: {}", key(), x.error().message);
        if (x.error().code == errc::redis::kIo) r.reset();
      } else if (!*x && held_) {
        logger().error(
            "gpu lease {}: lost (expired while held); another pool of the group may start", key());
      }
    }
    lk.lock();
  }
}

}  // namespace h3pipe::worker
