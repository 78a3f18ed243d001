#pragma once
// Gantt charts as standalone SVG: one lane per resource (pool, link direction, decoder), one bar
// per stage of a job, coloured by job, labelled with the job and stage where the bar is wide
// enough, with a <title> tooltip on every bar.  Used for plans (from a SimResult) and for measured
// runs (from receipts, see receipts.h), so the two can be compared side by side.
//
// Structure the tests (and any tooling) may rely on: the root <svg> holds one
// <g class="lane" data-lane="NAME" data-kind="KIND"> per lane, each holding its bars as
// <rect class="bar" data-job=".." data-stage="..">.
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/schedule/simulate.h"

namespace h3pipe::schedule {

struct GanttChart {
  struct Row {
    std::string name;
    std::string kind;  // encode | sample | transfer | decode
    std::string host;
  };
  struct Bar {
    std::size_t row = 0;
    std::size_t job_index = 0;  // picks the colour
    std::string job;            // label
    std::string stage;
    double start_s = 0, end_s = 0;
  };
  std::string title;
  std::vector<std::string> notes;  // lines under the title (makespan, throughput, ...)
  std::vector<Row> rows;
  std::vector<Bar> bars;
};

// Rows in pipeline order (encode, sample, transfer, decode; config order within a kind).
GanttChart gantt_from_sim(const SimResult& r, std::string title);

std::string render_svg(const GanttChart& chart);

// The chart as JSON (GET /v1/runs/{id}/gantt): {"title", "notes": [..], "lanes": [{"name",
// "kind", "host"}], "spans": [{"lane" (its name), "kind", "job", "stage", "start_s", "end_s"}]},
// seconds from the chart's start, spans in the chart's order.
nlohmann::json gantt_json(const GanttChart& chart);

}  // namespace h3pipe::schedule
