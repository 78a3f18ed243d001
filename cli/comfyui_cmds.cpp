// `h3pipe comfyui ...`: split a user's workflow at the latent, install h3pipe's node pack.  The
// logic is common/comfyui; this file reads the files, fetches /object_info and prints.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/cli.h"
#include "common/comfyui/install_nodes.h"
#include "common/comfyui/split.h"
#include "common/comfyui/split_files.h"
#include "common/comfyui/ui_workflow.h"
#include "common/core/bounded_file.h"
#include "common/core/json_parse.h"
#include "common/runtime/http_client.h"

namespace h3pipe::cli {
namespace {
namespace fs = std::filesystem;
using comfyui::Json;

Result<Json> read_json(const std::string& path, const char* what) {
  const std::string kind = std::string("the ") + what;
  auto text = read_bounded_file(path, {kind, kMaxJsonFileBytes, errc::comfyui::kSplitRead});
  if (!text.ok()) return text.error();
  // Depth-bounded (issue #35 D2): a deep workflow once overflowed the stack.
  return json_reader::parse_json(*text, fmt::format("{} {} is not valid JSON", what, path),
                                 errc::comfyui::kSplitRead, {kMaxJsonFileBytes});
}

Result<Json> fetch_object_info(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  runtime::http::Client c({3000, 60000, 256u << 20});
  auto r = c.get(url + "/object_info");
  if (!r.ok())
    return make_error(errc::comfyui::kSplitServer, "cannot fetch {}/object_info: {}", url,
                      r.error().message);
  if (r->status != 200)
    return make_error(errc::comfyui::kSplitServer, "{}/object_info answered {}", url, r->status);
  return json_reader::parse_json(r->body, fmt::format("{}/object_info is not JSON", url),
                                 errc::comfyui::kSplitServer, {256u << 20});
}

struct SplitArgs {
  std::string workflow, out_dir, server, object_info, workflow_dir, sample_url, decode_url, profile;
  bool force = false;
};

void print_inject(const char* side, const Json& inject) {
  for (auto it = inject.begin(); it != inject.end(); ++it) {
    std::string targets;
    const Json arr = it.value().is_array() ? it.value() : Json::array({it.value()});
    for (const auto& t : arr)
      targets += fmt::format("{}{}.{}", targets.empty() ? "" : ", ", t["node"].get<std::string>(),
                             t["input"].get<std::string>());
    fmt::print("  {:<7} {:<16} -> {}\n", side, it.key(), targets);
  }
}

int run_split(const SplitArgs& a) {
  auto fail = [&](const Error& e) {
    fmt::print(stderr, "comfyui split: {}: {}\n", a.workflow, e.message);
    return 2;
  };
  auto wf = read_json(a.workflow, "workflow");
  if (!wf.ok()) return fail(wf.error());
  std::optional<comfyui::ObjectInfo> oi;
  if (!a.object_info.empty() || !a.server.empty()) {
    auto j = a.object_info.empty() ? fetch_object_info(a.server)
                                   : read_json(a.object_info, "object_info file");
    if (!j.ok()) return fail(j.error());
    auto parsed = comfyui::ObjectInfo::parse(*j);
    if (!parsed.ok()) return fail(parsed.error());
    oi = std::move(*parsed);
  }
  Json api = *wf;
  if (comfyui::is_ui_format(*wf)) {
    if (!oi)
      return fail(make_error(
          errc::comfyui::kSplitNeedsObjectInfo,
          "this is a UI-format workflow (nodes/links); its widget values are mapped to input "
          "names with the server's /object_info: pass --server URL or --object-info FILE (or "
          "export it from ComfyUI with \"Export (API)\")"));
    auto converted = comfyui::ui_to_api(*wf, *oi);
    if (!converted.ok()) return fail(converted.error());
    api = std::move(*converted);
  }
  comfyui::SplitOptions o;
  o.object_info = oi ? &*oi : nullptr;
  o.workflow_dir = a.workflow_dir.empty() ? a.out_dir : a.workflow_dir;
  o.profile = a.profile;
  if (!a.sample_url.empty())
    o.sample_url = a.sample_url;
  else if (!a.server.empty())
    o.sample_url = a.server;
  if (!a.decode_url.empty())
    o.decode_url = a.decode_url;
  else
    o.decode_url = o.sample_url;
  auto r = comfyui::split_workflow(api, o);
  if (!r.ok()) return fail(r.error());
  auto files = comfyui::split_files(*r);
  auto st = comfyui::write_files(a.out_dir, files, a.force);
  if (!st.ok()) return fail(st.error());
  fmt::print("split {} at {} output -> {} ({} latent)\n", a.workflow,
             comfyui::describe(api, r->sampler), comfyui::describe(r->sample, r->save_node),
             comfyui::layout_name(r->layout));
  fmt::print("  latent profile {} ({})\n", r->profile,
             r->profile_node.empty() ? std::string("from --profile")
                                     : fmt::format("from node {} {}", r->profile_node,
                                                   comfyui::class_of(api, r->profile_node)));
  fmt::print("  sample.api.json  {} nodes\n  decode.api.json  {} nodes\n", r->sample.size(),
             r->decode.size());
  print_inject("sample", r->inject["sample"]);
  print_inject("decode", r->inject["decode"]);
  for (const auto& n : r->notes) fmt::print("note: {}\n", n);
  for (const auto& f : files) fmt::print("wrote {}\n", (fs::path(a.out_dir) / f.name).string());
  return 0;
}

}  // namespace

void register_comfyui_commands(CLI::App& app, Global& /*g*/, int& rc) {
  auto* c = app.add_subcommand("comfyui", "ComfyUI workflows and h3pipe's node pack");
  c->require_subcommand(1);

  static SplitArgs sa;
  auto* s = c->add_subcommand(
      "split",
      "cut a whole workflow at the latent into sample and decode workflows, their inject "
      "maps and a config snippet");
  s->add_option("workflow", sa.workflow,
                "WORKFLOW.json (API format, or UI format with --server / --object-info)")
      ->required();
  s->add_option("-o,--output", sa.out_dir, "folder to write the four files into")->required();
  s->add_option("--server", sa.server,
                "ComfyUI URL: its /object_info checks classes and converts UI files");
  s->add_option("--object-info", sa.object_info,
                "a saved GET /object_info answer (instead of --server)");
  s->add_option("--workflow-dir", sa.workflow_dir,
                "how the config snippet names the folder (default: -o as given)");
  s->add_option(
      "--sample-url", sa.sample_url,
      "the sample pool's ComfyUI in the snippet (default: --server or http://127.0.0.1:8188)");
  s->add_option("--decode-url", sa.decode_url,
                "the decode pool's ComfyUI in the snippet (default: the sample URL)");
  s->add_option("--profile", sa.profile,
                "the latent profile (docs/latent.md) when the graph does not tell it, or to "
                "override what it tells");
  s->add_flag("--force", sa.force, "replace files already in the folder");
  s->callback([&rc] { rc = run_split(sa); });

  static comfyui::InstallOptions io;
  static std::string from, dir;
  auto* i =
      c->add_subcommand("install-nodes",
                        "put h3pipe's node pack into DIR/custom_nodes/h3pipe_nodes, DIR being "
                        "the folder ComfyUI reads custom nodes from: its --base-directory, "
                        "else its checkout");
  i->add_option("comfyui_dir", dir,
                "a ComfyUI checkout (main.py, nodes.py) or the base directory a ComfyUI is "
                "started with (--base-directory DIR)")
      ->required();
  i->add_flag("--symlink", io.symlink, "link to the pack instead of copying it");
  i->add_flag("--force", io.force,
              "move an h3pipe_nodes that install-nodes did not write (or that was changed since) "
              "aside to custom_nodes/h3pipe_nodes.<time>.disabled; nothing is deleted");
  i->add_option("--from", from,
                "the pack's folder (default: the installed or source-tree "
                "integrations/comfyui/h3pipe_nodes)");
  i->callback([&rc] {
    io.comfyui_dir = dir;
    io.pack_dir = from.empty() ? comfyui::default_pack_dir(bin_dir()) : fs::path(from);
    auto r = comfyui::install_nodes(io);
    if (!r.ok()) {
      fmt::print(stderr, "comfyui install-nodes: {}\n", r.error().message);
      rc = 2;
      return;
    }
    if (!r->moved_aside.empty())
      fmt::print("moved the h3pipe_nodes that was there aside to {} (ComfyUI skips .disabled)\n",
                 r->moved_aside.string());
    if (r->action == "unchanged")
      fmt::print("{} is already installed from {}: nothing to do\n", r->dest.string(),
                 io.pack_dir.string());
    else
      fmt::print("{} {} -> {}; restart ComfyUI to load it\n", r->action, io.pack_dir.string(),
                 r->dest.string());
    fmt::print("{} is a ComfyUI {}: {}\n", dir, r->checkout ? "checkout" : "base directory",
               r->loaded_by);
    rc = 0;
  });
}

}  // namespace h3pipe::cli
