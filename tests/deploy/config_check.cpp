// Loads cluster config files with h3pipe::config (strict: unknown keys, wrong types, dangling
// references are errors) and prints the verdict; used by the deploy tests on the compose
// example (deploy/cluster.seeds.json) and on the ConfigMap the Helm chart renders.
#include <cstdio>

#include "common/config/config.h"

int main(int argc, char** argv) {
  int rc = 0;
  for (int i = 1; i < argc; ++i) {
    auto c = h3pipe::config::load_file(argv[i]);
    if (!c.ok()) {
      std::fprintf(stderr, "%s\n", c.error().message.c_str());
      rc = 1;
    } else {
      std::printf("%s: ok (%zu hosts, %zu pools)\n", argv[i], c->hosts.size(), c->pools.size());
    }
  }
  return rc;
}
