// The `h3pipe` of tests/supervisor: supervisor::start in a binary named h3pipe (stack_file.h
// proves a supervisor by its program's name), driven by supervisor_test.cpp.
//   h3pipe start CONFIG BIN_DIR READY_TIMEOUT_MS   prints the stack (exit 0) or "CODE\nMESSAGE"
//                                                  (exit 1)
#include <cstdio>
#include <string>

#include "common/config/config.h"
#include "common/supervisor/supervisor.h"

int main(int argc, char** argv) {
  using namespace h3pipe;
  if (argc != 5 || std::string(argv[1]) != "start") {
    std::fprintf(stderr, "usage: h3pipe start CONFIG BIN_DIR READY_TIMEOUT_MS\n");
    return 2;
  }
  auto c = config::load_file(argv[2]);
  if (!c.ok()) {
    std::printf("%s\n%s\n", c.error().code.c_str(), c.error().message.c_str());
    return 1;
  }
  const supervisor::StartOptions o{
      .config_file = argv[2], .bin_dir = argv[3], .ready_timeout_ms = std::stoi(argv[4])};
  auto st = supervisor::start(*c, o);
  if (!st.ok()) {
    std::printf("%s\n%s\n", st.error().code.c_str(), st.error().message.c_str());
    return 1;
  }
  std::printf("%s\n", st->dump().c_str());
  return 0;
}
