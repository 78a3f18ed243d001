#pragma once
// `h3pipe comfyui install-nodes DIR`: puts h3pipe's node pack (integrations/comfyui/h3pipe_nodes)
// into DIR/custom_nodes/h3pipe_nodes, as a copy or a symlink.  DIR is a ComfyUI checkout (main.py
// and nodes.py) or a base directory (what `main.py --base-directory DIR` uses: custom_nodes/,
// models/, input/, output/ or user/ in it).  ComfyUI loads custom nodes from
// <base>/custom_nodes only, <base> being --base-directory when given, else the checkout
// (folder_paths.py of ComfyUI 0.3.64): a server started with --base-directory never loads a pack
// installed into its checkout, so the result says which folder is read.  Refuses anything
// else; running it twice changes nothing the second time.
#include <filesystem>
#include <string>

#include "common/core/result.h"

namespace h3pipe::comfyui {

struct InstallOptions {
  std::filesystem::path comfyui_dir;
  std::filesystem::path pack_dir;  // the node pack's source folder
  bool symlink = false;            // link instead of copying (a development checkout)
  // Move aside (to custom_nodes/h3pipe_nodes.<time>.disabled) an h3pipe_nodes that is not a
  // pack install-nodes wrote (its .h3pipe-pack.json lists every file with its SHA-256); such a
  // folder is never deleted.
  bool force = false;
};

struct InstallResult {
  std::filesystem::path dest;
  std::string action;     // "copied", "linked", "updated", "unchanged"
  bool checkout = false;  // DIR is a checkout (else a base directory)
  // Which ComfyUI loads the pack from there: "a ComfyUI started from this checkout without
  // --base-directory ..." or "a ComfyUI started with --base-directory DIR ...".
  std::string loaded_by;
  // Where a folder that was not a pack install-nodes wrote went (--force), else empty.
  std::filesystem::path moved_aside;
};

// Errors: comfyui.install.not_comfyui, comfyui.install.no_pack, comfyui.install.exists
// (something else is at the destination and !force), comfyui.install.io.
Result<InstallResult> install_nodes(const InstallOptions& o);

// Where the pack is: $H3PIPE_COMFYUI_NODES, else <exe>/../share/h3pipe/comfyui/h3pipe_nodes, else
// <source tree>/integrations/comfyui/h3pipe_nodes relative to the executable's build folder.
std::filesystem::path default_pack_dir(const std::filesystem::path& bin_dir);

}  // namespace h3pipe::comfyui
