// h3pipe-encoder: one process per pool; see common/runner/stage_service.cpp.
#include "common/runner/runner.h"

int main(int argc, char** argv) {
  return h3pipe::runner::stage_service_main(argc, argv, h3pipe::config::StageKind::kEncode);
}
