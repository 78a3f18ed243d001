#pragma once
// What the Redis ACL tests (redis_acl_test.cpp, redis_acl_services_test.cpp) ask of the server:
// whether a command was refused and why, and what the server's ACL LOG recorded.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/queue/redis.h"
#include "common/queue/reply.h"
#include "tests/queue/redis_acl_fixture.h"

namespace h3pipe::test_support {
using Argv = std::vector<std::string>;

// "" when the command succeeded, else the server's error text.
inline std::string refusal(queue::Redis& r, const Argv& argv) {
  auto rep = r.command(argv);
  return rep.ok() ? std::string() : rep.error().message;
}

inline bool is_acl_denial(const std::string& msg) {
  return msg.find("NOPERM") != std::string::npos ||
         msg.find("The user executing the script") != std::string::npos;
}

inline long long acl_log_entries(const AclRedis& srv, std::string* dump = nullptr) {
  auto admin = srv.connect("admin");
  if (!admin.ok()) return -1;
  auto log = (*admin)->command({"ACL", "LOG", "128"});
  if (!log.ok()) return -1;
  const redisReply* r = log->get();
  if (dump) {
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* e = r->element[i];
      for (std::size_t k = 0; k + 1 < e->elements; k += 2) {
        std::string f = queue::reply_str(e->element[k]);
        if (f == "username" || f == "reason" || f == "object" || f == "context")
          *dump += f + "=" + queue::reply_str(e->element[k + 1]) + " ";
      }
      *dump += "\n";
    }
  }
  return static_cast<long long>(r->elements);
}

}  // namespace h3pipe::test_support
