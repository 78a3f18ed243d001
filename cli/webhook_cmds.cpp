// webhook add / list / remove / allow / disallow / redeliver (issue #37 item 6): the endpoints
// h3pipe-api delivers terminal events to, signed (Standard Webhooks), and the hosts a request's own
// webhook_url may name (common/api/webhooks.h).  Secrets are printed once, as the last line.
#include <CLI/CLI.hpp>

#include "cli/cli.h"
#include "common/api/webhooks.h"

namespace h3pipe::cli {
namespace {
namespace wh = api::webhooks;

struct WebhookArgs {
  std::string url, user, events, target;
  std::vector<std::string> ids;
  bool all_dead = false;
};

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

}  // namespace

void register_webhook_commands(CLI::App& app, Global& g, int& rc) {
  static WebhookArgs a;
  CLI::App* w = app.add_subcommand(
      "webhook",
      "signed webhooks of h3pipe-api (docs/api.md): add, list, remove, allow, disallow, "
      "redeliver");
  w->require_subcommand(1);
  CLI::App* add = w->add_subcommand(
      "add",
      "deliver terminal events (video.completed, video.failed, video.cancelled) to URL, signed; "
      "prints the whsec_ signing secret as the last line");
  add->add_option("url", a.url, "http(s)://host[:port]/path")->required();
  add->add_option("--user", a.user, "only the jobs of this token's holder (default: all)");
  add->add_option("--events", a.events,
                  "comma-separated event types (default: video.completed,video.failed,"
                  "video.cancelled)");
  add->callback([&g, &rc] {
    rc = with_stack_redis(g, [](queue::Redis& r) {
      auto ep = wh::add_endpoint(r, a.url, a.user, a.events);
      if (!ep.ok()) return fail(ep.error());
      fmt::print(stderr,
                 "webhook endpoint {} -> {} ({}{}); its signing secret, for the receiver "
                 "(openai's webhooks.unwrap, standardwebhooks):\n",
                 ep->id, ep->url, joined(ep->events), ep->user.empty() ? "" : ", user " + ep->user);
      fmt::print("{}\n", ep->secret);
      return static_cast<int>(kExitOk);
    });
  });
  CLI::App* list = w->add_subcommand(
      "list",
      "endpoint ID URL USER EVENTS, allow HOST, pending N, dead ID URL TYPE ATTEMPTS ERROR "
      "(tab-separated; never a secret)");
  list->callback([&g, &rc] {
    rc = with_stack_redis(g, [](queue::Redis& r) {
      auto eps = wh::list_endpoints(r);
      if (!eps.ok()) return fail(eps.error());
      for (const auto& ep : *eps)
        fmt::print("endpoint\t{}\t{}\t{}\t{}\n", ep.id, ep.url, ep.user.empty() ? "*" : ep.user,
                   joined(ep.events));
      auto hosts = wh::allowed_hosts(r);
      if (!hosts.ok()) return fail(hosts.error());
      for (const auto& h : *hosts) fmt::print("allow\t{}\n", h);
      auto pending = wh::pending(r);
      if (!pending.ok()) return fail(pending.error());
      fmt::print("pending\t{}\n", *pending);
      auto dead = wh::list_dead(r);
      if (!dead.ok()) return fail(dead.error());
      for (const auto& d : *dead)
        fmt::print("dead\t{}\t{}\t{}\t{}\t{}\n", d.id, d.url, d.type, d.attempts, d.last_error);
      return static_cast<int>(kExitOk);
    });
  });
  CLI::App* remove = w->add_subcommand(
      "remove", "remove an endpoint (by ID or URL); its deliveries not yet made are dropped");
  remove->add_option("endpoint", a.target, "ID (we_...) or URL")->required();
  remove->callback([&g, &rc] {
    rc = with_stack_redis(g, [](queue::Redis& r) {
      auto n = wh::remove_endpoint(r, a.target);
      if (!n.ok()) return fail(n.error());
      if (*n == 0) {
        fmt::print(stderr, "no webhook endpoint \"{}\" (see `h3pipe webhook list`)\n", a.target);
        return static_cast<int>(kExitFailed);
      }
      fmt::print(stderr, "removed {} webhook endpoint(s) \"{}\"\n", *n, a.target);
      return static_cast<int>(kExitOk);
    });
  });
  CLI::App* allow = w->add_subcommand(
      "allow",
      "let a request's webhook_url name HOST; prints the whsec_ secret its deliveries are signed "
      "with as the last line");
  allow->add_option("host", a.target, "a host name or address, as in the URL")->required();
  allow->callback([&g, &rc] {
    rc = with_stack_redis(g, [](queue::Redis& r) {
      auto s = wh::allow_host(r, a.target);
      if (!s.ok()) return fail(s.error());
      fmt::print(stderr, "webhook_url may name host {}; deliveries there are signed with:\n",
                 a.target);
      fmt::print("{}\n", *s);
      return static_cast<int>(kExitOk);
    });
  });
  CLI::App* redeliver = w->add_subcommand(
      "redeliver",
      "put dead-lettered deliveries back in the outbox, due now, with the same webhook-id (their "
      "retries and give-up time start again)");
  redeliver->add_option("id", a.ids, "msg_... ids from the dead lines of `webhook list`");
  redeliver->add_flag("--all-dead", a.all_dead, "every dead-lettered delivery");
  redeliver->callback([&g, &rc] {
    if (a.ids.empty() == !a.all_dead) {
      fmt::print(stderr,
                 "webhook redeliver: expected dead-lettered delivery ids (msg_..., from `h3pipe "
                 "webhook list`) or --all-dead, not {}\n",
                 a.all_dead ? "both" : "neither");
      rc = static_cast<int>(kExitUsage);
      return;
    }
    rc = with_stack_redis(g, [](queue::Redis& r) {
      auto n = wh::redeliver(r, a.ids);
      if (!n.ok()) return fail(n.error());
      fmt::print(stderr, "re-queued {} dead-lettered webhook deliver{}\n", *n,
                 *n == 1 ? "y" : "ies");
      return static_cast<int>(kExitOk);
    });
  });
  CLI::App* disallow = w->add_subcommand("disallow", "take HOST off the webhook_url allowlist");
  disallow->add_option("host", a.target)->required();
  disallow->callback([&g, &rc] {
    rc = with_stack_redis(g, [](queue::Redis& r) {
      auto n = wh::disallow_host(r, a.target);
      if (!n.ok()) return fail(n.error());
      if (*n == 0) {
        fmt::print(stderr, "host \"{}\" is not on the allowlist\n", a.target);
        return static_cast<int>(kExitFailed);
      }
      return static_cast<int>(kExitOk);
    });
  });
}

}  // namespace h3pipe::cli
