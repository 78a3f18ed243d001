// token create / list / revoke (issue #37 item 7): the bearer tokens h3pipe-api checks, kept in
// Redis as SHA-256 hashes only (common/api/tokens.h).
#include <CLI/CLI.hpp>
#include <algorithm>

#include "cli/cli.h"
#include "common/api/rate_limit.h"
#include "common/api/tokens.h"

namespace h3pipe::cli {
namespace {

struct TokenArgs {
  std::string name, role = "submit", rate;
};

}  // namespace

void register_api_commands(CLI::App& app, Global& g, int& rc) {
  static TokenArgs a;
  CLI::App* t = app.add_subcommand(
      "token", "bearer tokens for h3pipe-api (docs/api.md): create, list, revoke, limit");
  t->require_subcommand(1);
  CLI::App* create = t->add_subcommand(
      "create",
      "make a token for NAME and print it as the last line (Redis keeps only its SHA-256: it "
      "cannot be shown again)");
  create->add_option("name", a.name, "who holds it")->required();
  create
      ->add_option("--role", a.role,
                   "read (reads), submit (reads, creates and cancels its own "
                   "jobs) or admin (all)")
      ->check(CLI::IsMember({"read", "submit", "admin"}));
  create->callback([&g, &rc] {
    rc = with_stack_redis(g, [](queue::Redis& r) {
      auto tok = api::create_token(r, a.name, *api::parse_role(a.role));
      if (!tok.ok()) return fail(tok.error());
      fmt::print(stderr, "token \"{}\" (role {}); keep it secret, it is shown once:\n", a.name,
                 a.role);
      fmt::print("{}\n", *tok);
      return static_cast<int>(kExitOk);
    });
  });
  CLI::App* list = t->add_subcommand("list", "the tokens' names and roles (never the tokens)");
  list->callback([&g, &rc] {
    rc = with_stack_redis(g, [](queue::Redis& r) {
      auto l = api::list_tokens(r);
      if (!l.ok()) return fail(l.error());
      for (const auto& i : *l) fmt::print("{}\t{}\n", i.name, api::role_name(i.role));
      return static_cast<int>(kExitOk);
    });
  });
  CLI::App* limit = t->add_subcommand(
      "limit",
      "NAME's own rate limit in requests per second (0: none; \"role\": its role's, h3pipe-api "
      "--rate-limit); every API replica applies it from the next request on");
  limit->add_option("name", a.name)->required();
  limit->add_option("rate", a.rate, "N requests per second, 0 (unlimited) or role")->required();
  limit->callback([&g, &rc] {
    rc = with_stack_redis(g, [](queue::Redis& r) {
      char* end = nullptr;
      const double v = a.rate == "role" ? -1 : std::strtod(a.rate.c_str(), &end);
      if (a.rate != "role" && (a.rate.empty() || *end || !(v >= 0))) {
        fmt::print(stderr,
                   "rate: expected a number of requests per second >= 0, 0 or \"role\", got "
                   "\"{}\"\n",
                   a.rate);
        return static_cast<int>(kExitUsage);
      }
      auto l = api::list_tokens(r);
      if (!l.ok()) return fail(l.error());
      if (std::none_of(l->begin(), l->end(), [](const auto& i) { return i.name == a.name; })) {
        fmt::print(stderr, "no token named \"{}\"\n", a.name);
        return static_cast<int>(kExitFailed);
      }
      if (auto s = api::set_token_rate(r, a.name, v); !s.ok()) return fail(s.error());
      fmt::print(stderr, "token \"{}\": {}\n", a.name,
                 v < 0    ? std::string("its role's rate limit")
                 : v == 0 ? std::string("no rate limit")
                          : fmt::format("{:g} requests/s", v));
      return static_cast<int>(kExitOk);
    });
  });
  CLI::App* revoke = t->add_subcommand("revoke", "remove NAME's token: refused from then on");
  revoke->add_option("name", a.name)->required();
  revoke->callback([&g, &rc] {
    rc = with_stack_redis(g, [](queue::Redis& r) {
      auto d = api::revoke_token(r, a.name);
      if (!d.ok()) return fail(d.error());
      if (!*d) {
        fmt::print(stderr, "no token named \"{}\"\n", a.name);
        return static_cast<int>(kExitFailed);
      }
      fmt::print(stderr, "token \"{}\" revoked\n", a.name);
      return static_cast<int>(kExitOk);
    });
  });
}

}  // namespace h3pipe::cli
