#include "common/worker/heartbeat.h"

#include <cmath>

namespace h3pipe::worker {

std::string encode_heartbeat(const pb::Heartbeat& hb) {
  return hb.SerializeAsString();
}

Result<pb::Heartbeat> decode_heartbeat(std::string_view pool, std::string_view bytes) {
  pb::Heartbeat hb;
  auto bad = [&](std::string_view why) {
    return make_error(errc::pools::kHeartbeat, "h3pipe:pools field {}: {} ({} bytes); skipped",
                      pool, why, bytes.size());
  };
  if (!hb.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return bad("not a pb::Heartbeat");
  if (hb.pool() != pool) return bad(fmt::format("a heartbeat of pool \"{}\"", hb.pool()));
  if (hb.unix_ms() <= 0) return bad("no unix_ms");
  for (double x : {hb.busy_until_unix_s(), hb.expected_s()})
    if (!std::isfinite(x) || x < 0) return bad("a time that is not a finite number >= 0");
  return hb;
}

double heartbeat_age_s(const pb::Heartbeat& hb, double now_s) {
  return now_s - static_cast<double>(hb.unix_ms()) / 1000.0;
}

bool heartbeat_from_future(const pb::Heartbeat& hb, double now_s) {
  return heartbeat_age_s(hb, now_s) < -kHeartbeatFutureS;
}

bool heartbeat_live(const pb::Heartbeat& hb, double now_s) {
  const double age = heartbeat_age_s(hb, now_s);
  return age >= -kHeartbeatFutureS && age < kHeartbeatLiveS;
}

}  // namespace h3pipe::worker
