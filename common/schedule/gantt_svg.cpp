#include "common/schedule/gantt_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/core/xml_escape.h"

namespace h3pipe::schedule {
namespace {

// A round tick step giving about `target` ticks over `span`.
double tick_step(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string colour(std::size_t job) {
  // Golden-angle hues keep neighbouring jobs distinct.
  const double hue = std::fmod(static_cast<double>(job) * 137.508, 360.0);
  return fmt::format("hsl({:.0f},62%,{}%)", hue, job % 2 ? 48 : 58);
}

int kind_rank(const std::string& k) {
  if (k == "encode") return 0;
  if (k == "sample") return 1;
  if (k == "transfer") return 2;
  return 3;
}

}  // namespace

GanttChart gantt_from_sim(const SimResult& r, std::string title) {
  GanttChart g;
  g.title = std::move(title);
  std::vector<std::size_t> order(r.lanes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return kind_rank(lane_kind_name(r.lanes[a].kind)) < kind_rank(lane_kind_name(r.lanes[b].kind));
  });
  std::vector<std::size_t> row_of(r.lanes.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const Lane& l = r.lanes[order[i]];
    row_of[order[i]] = i;
    g.rows.push_back({l.name, lane_kind_name(l.kind), l.host});
  }
  for (const auto& s : r.segments) {
    const std::string& job =
        s.job < r.job_records.size() ? r.job_records[s.job].id : std::to_string(s.job);
    g.bars.push_back(
        {row_of[s.lane], s.job, job, lane_kind_name(r.lanes[s.lane].kind), s.start_s, s.end_s});
  }
  g.notes.push_back(fmt::format("{} jobs, makespan {:.2f} s, {:.2f} jobs/h end to end", r.jobs,
                                r.makespan_s, r.throughput_per_hour));
  return g;
}

nlohmann::json gantt_json(const GanttChart& c) {
  nlohmann::json lanes = nlohmann::json::array(), spans = nlohmann::json::array();
  for (const auto& r : c.rows)
    lanes.push_back({{"name", r.name}, {"kind", r.kind}, {"host", r.host}});
  const auto ms = [](double s) { return std::round(s * 1000) / 1000; };
  for (const auto& b : c.bars) {
    if (b.row >= c.rows.size()) continue;
    spans.push_back({{"lane", c.rows[b.row].name},
                     {"kind", c.rows[b.row].kind},
                     {"job", b.job},
                     {"stage", b.stage},
                     {"start_s", ms(b.start_s)},
                     {"end_s", ms(b.end_s)}});
  }
  return {{"title", c.title}, {"notes", c.notes}, {"lanes", lanes}, {"spans", spans}};
}

std::string render_svg(const GanttChart& c) {
  constexpr double kLabelW = 240, kPlotW = 1000, kRight = 30, kLaneH = 26, kLaneGap = 6;
  const double top = 50 + 16.0 * static_cast<double>(c.notes.size());
  double t_end = 0;
  for (const auto& b : c.bars) t_end = std::max(t_end, b.end_s);
  if (t_end <= 0) t_end = 1;
  const double step = tick_step(t_end, 10);
  const double axis_end = std::ceil(t_end / step - 1e-9) * step;
  const double sx = kPlotW / axis_end;
  const double plot_h = static_cast<double>(c.rows.size()) * (kLaneH + kLaneGap);
  const double width = kLabelW + kPlotW + kRight;
  const double height = top + plot_h + 50;

  std::string o;
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{:.0f}\" "
      "height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      width, height, width, height);
  o += fmt::format("<rect x=\"0\" y=\"0\" width=\"{:.0f}\" height=\"{:.0f}\" fill=\"#ffffff\"/>\n",
                   width, height);
  o += fmt::format("<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">{}</text>\n",
                   xml_escape(c.title));
  for (std::size_t i = 0; i < c.notes.size(); ++i)
    o += fmt::format("<text x=\"10\" y=\"{:.0f}\" fill=\"#444\">{}</text>\n",
                     40.0 + 16.0 * static_cast<double>(i), xml_escape(c.notes[i]));

  // Time axis and grid.
  o += "<g class=\"axis\">\n";
  for (double t = 0; t <= axis_end + step * 1e-6; t += step) {
    const double x = kLabelW + t * sx;
    o += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", x,
        top - 4, x, top + plot_h);
    o += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#444\">{:g}</text>\n", x,
        top + plot_h + 16, t);
  }
  o += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#444\">seconds</text>\n",
      kLabelW + kPlotW / 2, top + plot_h + 34);
  o += "</g>\n";

  std::vector<std::vector<const GanttChart::Bar*>> by_row(c.rows.size());
  for (const auto& b : c.bars)
    if (b.row < by_row.size()) by_row[b.row].push_back(&b);

  for (std::size_t r = 0; r < c.rows.size(); ++r) {
    const auto& row = c.rows[r];
    const double y = top + static_cast<double>(r) * (kLaneH + kLaneGap);
    o += fmt::format("<g class=\"lane\" data-lane=\"{}\" data-kind=\"{}\">\n", xml_escape(row.name),
                     xml_escape(row.kind));
    o += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n",
        kLabelW, y, kPlotW, kLaneH, r % 2 ? "#f4f4f4" : "#fafafa");
    o += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{} <tspan "
        "fill=\"#888\">{}{}{}</tspan></text>\n",
        kLabelW - 8, y + kLaneH / 2 + 4, xml_escape(row.name), xml_escape(row.kind),
        row.host.empty() ? "" : " @ ", xml_escape(row.host));
    for (const auto* b : by_row[r]) {
      const double x = kLabelW + b->start_s * sx;
      const double w = std::max(0.8, (b->end_s - b->start_s) * sx);
      o += fmt::format(
          "<rect class=\"bar\" data-job=\"{}\" data-stage=\"{}\" x=\"{:.2f}\" y=\"{:.1f}\" "
          "width=\"{:.2f}\" "
          "height=\"{:.1f}\" fill=\"{}\" stroke=\"#333\" stroke-width=\"0.5\"><title>{} {} "
          "{:.2f}-{:.2f} s ({:.2f} s)</title></rect>\n",
          xml_escape(b->job), xml_escape(b->stage), x, y + 2, w, kLaneH - 4, colour(b->job_index),
          xml_escape(b->job), xml_escape(b->stage), b->start_s, b->end_s, b->end_s - b->start_s);
      // Widest label that fits: "job-0003 sample", "job-0003", "3".
      std::string label = b->job + " " + b->stage;
      if (w < 7.0 * static_cast<double>(label.size()) + 4) label = b->job;
      if (w < 7.0 * static_cast<double>(label.size()) + 4) {
        std::string tail = b->job.substr(
            b->job.find_last_of("-_.") == std::string::npos ? 0 : b->job.find_last_of("-_.") + 1);
        tail.erase(0, std::min(tail.find_first_not_of('0'), tail.size() - 1));
        label = tail;
      }
      if (w >= 7.0 * static_cast<double>(label.size()) + 4)
        o += fmt::format(
            "<text x=\"{:.2f}\" y=\"{:.1f}\" fill=\"#fff\" font-size=\"11\">{}</text>\n", x + 3,
            y + kLaneH / 2 + 4, xml_escape(label));
    }
    o += "</g>\n";
  }
  o += "</svg>\n";
  return o;
}

}  // namespace h3pipe::schedule
