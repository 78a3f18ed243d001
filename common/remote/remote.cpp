#include "common/remote/remote.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "common/preflight/preflight.h"

namespace h3pipe::remote {
namespace {

// Aliases from ~/.ssh/config, user@host, or an address; never something ssh reads as an option.
bool safe_alias(const std::string& a) {
  if (a.empty() || a.front() == '-') return false;
  return std::all_of(a.begin(), a.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-' ||
           ch == '@' || ch == ':' || ch == '[' || ch == ']';
  });
}

Result<std::vector<const config::Host*>> selected_hosts(const config::Cluster& c,
                                                        const Options& o) {
  std::vector<const config::Host*> out;
  if (o.hosts.empty()) {
    for (const auto& h : c.hosts) out.push_back(&h);
    return out;
  }
  for (const auto& n : o.hosts) {
    const config::Host* h = c.find_host(n);
    if (!h) return make_error(errc::remote::kHost, "no host \"{}\" in the config", n);
    out.push_back(h);
  }
  return out;
}

bool local(const config::Cluster& c, const Options& o, const config::Host& h) {
  if (c.hosts.size() == 1) return true;
  return o.is_local ? o.is_local(h) : preflight::is_local_host(h);
}

std::vector<std::string> compose_base(const Options& o, const config::Host& h) {
  const auto found = o.compose_by_host.find(h.name);
  std::vector<std::string> a = found != o.compose_by_host.end() ? found->second : o.compose;
  a.insert(a.end(), {"--project-directory", o.compose_dir, "--env-file",
                     o.compose_dir + "/deploy/" + h.name + ".env"});
  return a;
}

// Wraps a host's command in ssh (quoting each word for the remote shell), or runs it here.
Result<HostCommand> wrap(const config::Cluster& c, const Options& o, const config::Host& h,
                         int wave, std::vector<std::string> words) {
  HostCommand hc;
  hc.host = h.name;
  hc.wave = wave;
  if (h.ssh.empty()) {
    if (!local(c, o, h))
      return make_error(errc::remote::kSsh,
                        "host \"{}\" has no ssh alias (hosts[].ssh) and is not this machine",
                        h.name);
    hc.via = "local";
    hc.argv = std::move(words);
    return hc;
  }
  if (!safe_alias(h.ssh))
    return make_error(errc::remote::kSsh,
                      "host \"{}\": ssh alias \"{}\" is not a plain host name or alias", h.name,
                      h.ssh);
  hc.via = h.ssh;
  hc.argv = {o.ssh};
  hc.argv.insert(hc.argv.end(), o.ssh_options.begin(), o.ssh_options.end());
  hc.argv.push_back(h.ssh);
  for (const auto& w : words) hc.argv.push_back(shell_quote(w));
  return hc;
}

}  // namespace

Result<HostCommand> wrap_for_host(const config::Cluster& c, const Options& o, const config::Host& h,
                                  std::vector<std::string> words) {
  return wrap(c, o, h, 0, std::move(words));
}

std::string shell_quote(std::string_view w) {
  if (!w.empty() && std::all_of(w.begin(), w.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) ||
               std::string_view("_-./=:,@%+").find(ch) != std::string_view::npos;
      }))
    return std::string(w);
  std::string q = "'";
  for (char ch : w) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string render(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + shell_quote(a);
  return s;
}

bool is_control_host(const config::Cluster& c, const config::Host& h) {
  return !c.redis.embedded && (c.redis.host == h.name || c.redis.host == h.address);
}

Result<std::vector<std::string>> compose_profiles(const config::Cluster& c, const config::Host& h) {
  std::vector<std::string> p;
  if (is_control_host(c, h)) p.push_back("control");
  auto samplers = c.pools_on(h.name, config::StageKind::kSample);
  auto encoders = c.pools_on(h.name, config::StageKind::kEncode);
  auto decoders = c.pools_on(h.name, config::StageKind::kDecode);
  if (samplers.size() > 2)
    return make_error(errc::remote::kCompose,
                      "host \"{}\" has {} sampler pools; compose.yaml has two sampler "
                      "slots per host (sampler0, sampler1): use the native launcher or add a slot",
                      h.name, samplers.size());
  if (encoders.size() > 1 || decoders.size() > 1)
    return make_error(errc::remote::kCompose,
                      "host \"{}\" has more than one encoder or decoder pool; "
                      "compose.yaml has one slot each",
                      h.name);
  if (!samplers.empty()) p.push_back("sampler-host");
  if (samplers.size() == 2) p.push_back("sampler-host-2");
  if (!encoders.empty() && samplers.empty()) p.push_back("encoder-host");
  if (!decoders.empty()) p.push_back("decoder-host");
  return p;
}

Result<std::vector<HostCommand>> plan(const config::Cluster& c, const Options& o) {
  auto hosts = selected_hosts(c, o);
  if (!hosts.ok()) return hosts.error();
  if (o.config_path.empty() && o.launcher != Launcher::kCompose)
    return make_error(
        errc::remote::kConfig,
        "the native and systemd launchers need the config file every host reads: pass --config "
        "FILE (and --remote-config PATH if the hosts see it elsewhere)");
  std::vector<HostCommand> out;
  bool start = o.action == Action::kStart;
  for (const config::Host* h : *hosts) {
    bool control = is_control_host(c, *h);
    int wave = (control == start) ? 0 : 1;  // control first on start, last on stop
    std::vector<std::string> words;
    if (o.launcher == Launcher::kNative) {
      words = {o.h3pipe, start ? "start" : "stop", "--host", h->name, "--config", o.config_path};
    } else if (o.launcher == Launcher::kSystemd) {  // units installed, enabled, started and waited
      words = start ? std::vector<std::string>{o.h3pipe, "systemd",  "install",    "--host",
                                               h->name,  "--config", o.config_path}
                    : std::vector<std::string>{"systemctl", "stop", "h3pipe.target"};
    } else {
      auto profiles = compose_profiles(c, *h);
      if (!profiles.ok()) return profiles.error();
      if (profiles->empty()) continue;  // nothing of h3pipe runs there
      words = compose_base(o, *h);
      for (const auto& p : *profiles) words.insert(words.end(), {"--profile", p});
      if (start)
        words.insert(words.end(), {"up", "-d"});
      else
        words.push_back("stop");
    }
    auto hc = wrap(c, o, *h, wave, std::move(words));
    if (!hc.ok()) return hc.error();
    out.push_back(std::move(*hc));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const HostCommand& a, const HostCommand& b) { return a.wave < b.wave; });
  return out;
}

Result<std::vector<HostCommand>> plan_preflight(const config::Cluster& c, const Options& o) {
  auto hosts = selected_hosts(c, o);
  if (!hosts.ok()) return hosts.error();
  std::vector<HostCommand> out;
  for (const config::Host* h : *hosts) {
    std::vector<std::string> words;
    if (o.launcher != Launcher::kCompose) {
      words = {o.h3pipe, "preflight", "--host", h->name, "--config", o.config_path};
    } else {
      words = compose_base(o, *h);
      words.insert(words.end(),
                   {"run", "--rm", "cli", "preflight", "--host", h->name, "--config",
                    o.config_path.empty() ? std::string(kComposeConfigPath) : o.config_path});
    }
    auto hc = wrap(c, o, *h, 0, std::move(words));
    if (!hc.ok()) return hc.error();
    out.push_back(std::move(*hc));
  }
  return out;
}

namespace {

// The line of a failed command's output that says what went wrong: the last one that is not a
// pointer to help ("See 'docker --help'.", "Run 'docker COMMAND --help' ..."), which alone says
// nothing (#34 P7); the whole output follows the table.
std::string summary_line(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) {
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ')) l.pop_back();
    if (!l.empty()) lines.push_back(l);
  }
  for (auto it = lines.rbegin(); it != lines.rend(); ++it)
    if (it->find("--help") == std::string::npos) return *it;
  return lines.empty() ? std::string() : lines.back();
}

bool report(const std::vector<HostResult>& rs, const char* what, std::ostream& out) {
  bool ok = true;
  out << fmt::format("{:<16} {:<6} {:>8}  {}\n", "HOST", "EXIT", "SECONDS", what);
  for (const auto& r : rs) {
    bool good = r.exit_code == 0 && !r.timed_out;
    ok = ok && good;
    out << fmt::format("{:<16} {:<6} {:>8.1f}  {}\n", r.host,
                       r.timed_out ? "TIMEOUT" : std::to_string(r.exit_code), r.seconds,
                       good
                           ? render(r.argv) + (r.output.find("already running") != std::string::npos
                                                   ? "  (already running)"
                                                   : "")
                           : summary_line(r.output));
  }
  for (const auto& r : rs) {
    if (r.exit_code == 0 && !r.timed_out) continue;
    out << fmt::format("\n--- {} failed: {}\n{}", r.host, render(r.argv), r.output);
    if (!r.output.empty() && r.output.back() != '\n') out << "\n";
  }
  return ok;
}

}  // namespace

namespace {

// The compose launcher's command on each host, found before anything runs there.
bool find_compose(const config::Cluster& c, Options& o, const char* what, std::ostream& out) {
  if (o.launcher != Launcher::kCompose || !o.detect_compose) return true;
  if (auto s = detect_compose(c, o); !s.ok()) {
    out << what << ": " << s.error().message << "\n";
    return false;
  }
  for (const auto& [host, words] : o.compose_by_host)
    out << fmt::format("{}: compose on {}: {}\n", what, host, render(words));
  return true;
}

}  // namespace

int start_all(const config::Cluster& c, const Options& o, std::ostream& out) {
  Options so = o;
  so.action = Action::kStart;
  if (!find_compose(c, so, "start", out)) return 1;
  auto cmds = plan(c, so);
  if (!cmds.ok()) {
    out << "start: " << cmds.error().message << "\n";
    return 2;
  }
  out << fmt::format("start: {} host(s)\n", cmds->size());
  bool ok = report(run_all(*cmds, so.timeout, so.parallel), "COMMAND", out);
  if (!ok) {
    out << "\nstart: some hosts failed to start; preflight skipped. Fix them and run start again "
           "(start is idempotent: services already up stay up).\n";
    return 1;
  }
  if (!so.preflight) return 0;
  auto pf = plan_preflight(c, so);
  if (!pf.ok()) {
    out << "preflight: " << pf.error().message << "\n";
    return 2;
  }
  out << "\npreflight on each host:\n";
  auto results = run_all(*pf, so.timeout, so.parallel);
  bool pf_ok = true;
  for (const auto& r : results) {
    pf_ok = pf_ok && r.exit_code == 0 && !r.timed_out;
    out << fmt::format("\n=== {} ({}) exit {}\n{}", r.host, render(r.argv),
                       r.timed_out ? "TIMEOUT" : std::to_string(r.exit_code), r.output);
    if (!r.output.empty() && r.output.back() != '\n') out << "\n";
  }
  out << (pf_ok ? "\nstart: every host started and passed preflight\n"
                : "\nstart: services started, but preflight failed on some host (see above)\n");
  return pf_ok ? 0 : 1;
}

int stop_all(const config::Cluster& c, const Options& o, std::ostream& out) {
  Options so = o;
  so.action = Action::kStop;
  if (!find_compose(c, so, "stop", out)) return 1;
  auto cmds = plan(c, so);
  if (!cmds.ok()) {
    out << "stop: " << cmds.error().message << "\n";
    return 2;
  }
  out << fmt::format("stop: {} host(s)\n", cmds->size());
  return report(run_all(*cmds, so.timeout, so.parallel), "COMMAND", out) ? 0 : 1;
}

}  // namespace h3pipe::remote
