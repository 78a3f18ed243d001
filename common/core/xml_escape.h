#pragma once
// Text for XML and HTML attribute or element content: & < > " ' escaped, and the control
// characters XML 1.0 does not allow (all below 0x20 but tab and newline) dropped.  Used by the
// planner's Gantt SVG and the decode A/B page.
#include <string>
#include <string_view>

namespace h3pipe {

inline std::string xml_escape(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        // Control characters are not allowed in XML 1.0.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') o += c;
    }
  }
  return o;
}

}  // namespace h3pipe
