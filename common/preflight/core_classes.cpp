#include "common/preflight/core_classes.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <vector>

namespace h3pipe::preflight {
namespace {

// MiniMax H3 came into core with ComfyUI 0.30.0 (2026-08-03: comfy_extras/nodes_minimax_h3.py,
// the release notes' "MiniMax-H3"); MiniMaxH3AddGuide followed in 0.34.0 (ComfyUI PR #15439).
// Classes whose first release is not known for sure are left out rather than guessed.
constexpr std::string_view kH3 = "MiniMax H3";
constexpr std::string_view kH3Source = "comfy_extras/nodes_minimax_h3.py";
constexpr std::array kCoreClasses = {
    CoreClass{"EmptyMiniMaxH3LatentAV", "0.30.0", kH3, kH3Source},
    CoreClass{"MiniMaxH3ImageToVideo", "0.30.0", kH3, kH3Source},
    CoreClass{"MiniMaxH3ReferenceToVideo", "0.30.0", kH3, kH3Source},
    CoreClass{"MiniMaxH3SigmaShift", "0.30.0", kH3, kH3Source},
    CoreClass{"MiniMaxH3AddGuide", "0.34.0", kH3, kH3Source},
};

std::vector<long> numbers(std::string_view v) {
  std::vector<long> out;
  std::size_t i = 0;
  while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i]))) {
    long n = 0;
    while (i < v.size() && std::isdigit(static_cast<unsigned char>(v[i])))
      n = n * 10 + (v[i++] - '0');
    out.push_back(n);
    if (i < v.size() && v[i] == '.')
      ++i;
    else
      break;
  }
  return out;
}

}  // namespace

std::span<const CoreClass> core_classes() {
  return kCoreClasses;
}

const CoreClass* find_core_class(std::string_view cls) {
  for (const auto& c : kCoreClasses)
    if (c.cls == cls) return &c;
  return nullptr;
}

std::optional<int> compare_versions(std::string_view a, std::string_view b) {
  auto x = numbers(a), y = numbers(b);
  if (x.empty() || y.empty()) return std::nullopt;
  x.resize(std::max(x.size(), y.size()));
  y.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
  return 0;
}

std::string core_class_missing(const CoreClass& c, const std::string& node,
                               const std::string& server_version) {
  std::string have = server_version.empty() ? "the server's version is unknown"
                                            : "the server is ComfyUI " + server_version;
  return fmt::format(
      "{}: class \"{}\" is not on the server; it is core ComfyUI since {} ({}, {}); {}", node,
      c.cls, c.first_version, c.family, c.source, have);
}

std::string core_class_fix(const CoreClass& c, const std::string& url,
                           const std::string& server_version) {
  auto cmp = compare_versions(server_version, c.first_version);
  if (cmp && *cmp >= 0)
    return fmt::format(
        "ComfyUI {} on {} should have {}: check its start-up log for an import error in {} "
        "(a missing Python package)",
        server_version, url, c.cls, c.source);
  return fmt::format("upgrade ComfyUI on {} to {} or later (a node pack does not provide {})", url,
                     c.first_version, c.cls);
}

}  // namespace h3pipe::preflight
