#pragma once
// A decode task as a sampler leaves it (for tests that drive a decode worker directly).
#include <string>

#include "common/latent/latent.h"
#include "common/proto/h3pipe.pb.h"

namespace h3pipe::test_support {

inline pb::StageTask decode_task(const std::string& run, const std::string& job,
                                 const latent::JobSize& size, const std::string& prompt,
                                 const std::string& host = "h1") {
  pb::StageTask t;
  t.set_run_id(run);
  t.set_job_id(job);
  t.set_stage(pb::STAGE_DECODE);
  t.set_target_host(host);
  auto* s = t.mutable_spec();
  s->set_job_id(job);
  s->set_prompt(prompt);
  s->set_width(size.width);
  s->set_height(size.height);
  s->set_frames(size.frames);
  s->set_fps(size.fps);
  s->set_steps(4);
  return t;
}

}  // namespace h3pipe::test_support
