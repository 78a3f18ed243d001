#pragma once
// Which host decodes a finished latent (issue #3: "with several decode hosts, the one with the
// shortest expected queue").  The sampler decides when it completes the sample stage and writes
// the choice into the decode task's target_host; the transfer sender then moves the latent there.
//
// Expected time until host h has decoded this job =
//     transfer  (0 on the sampling host; else latent bytes x 8 / link gbps + link latency)
//   + backlog   (entries in h's decode stream, i.e. queued + running, x the host's mean decode
//                time for the job's class / the number of decode pools on h)
//   + own decode time on h.
// Ties go to the sampling host (no network), then to config order.  On a Redis error the backlog
// counts as zero: the choice degrades to "fastest host for this job", never to a failure.
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/proto/h3pipe.pb.h"
#include "common/queue/redis.h"

namespace h3pipe::worker {

struct DecodeCandidate {
  std::string host;
  double transfer_s = 0;  // latent over the link (0 when local)
  double backlog_s = 0;   // work already queued on that host's decode stream
  double decode_s = 0;    // this job's decode time there
  double total() const { return transfer_s + backlog_s + decode_s; }
};

// Scores every host with a decode pool (backlog from XLEN of its decode stream via `redis`;
// pass nullptr to ignore backlogs).  Sorted best first.
std::vector<DecodeCandidate> score_decode_hosts(const config::Cluster& c, const std::string& self,
                                                const pb::StageTask& task, queue::Redis* redis);

// The best host's name; `self` when the config has no decode pool at all.
std::string choose_decode_host(const config::Cluster& c, const std::string& self, const pb::StageTask& task,
                               queue::Redis* redis);

}  // namespace h3pipe::worker
