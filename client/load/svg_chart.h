// A small SVG chart renderer for ropeload's HTML report: line, point and
// bar series on linear or log-10 axes with "nice" ticks. Output is a
// standalone <svg> element (no scripts, no external resources).
#ifndef ROPE_CLIENT_LOAD_SVG_CHART_H_
#define ROPE_CLIENT_LOAD_SVG_CHART_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace rope {
namespace load {

struct ChartPoint {
  double x = 0;
  double y = 0;
  std::string label;  // drawn next to the point when non-empty
};

struct ChartSeries {
  enum class Style { kLine, kPoints, kLineAndPoints };
  std::string name;
  std::string color;  // any SVG colour, e.g. "#1f77b4"
  Style style = Style::kLine;
  std::vector<ChartPoint> points;  // non-finite points (and <= 0 on a log axis) are skipped
};

struct ChartBar {
  double x0 = 0, x1 = 0;  // extent on the x axis
  double y = 0;
};

struct ChartAxis {
  std::string label;
  bool log = false;
  bool from_zero = false;  // linear axes: include 0
};

struct Chart {
  std::string title;
  ChartAxis x, y;
  std::vector<ChartSeries> series;
  std::vector<ChartBar> bars;  // drawn first, in bar_color
  std::string bar_color = "#4c78a8";
  int width = 760;
  int height = 340;
};

std::string RenderSvg(const Chart& chart);

// Tick positions for [lo, hi]: multiples of 1, 2 or 5 x 10^k (about 6 of
// them) on a linear axis; 1, 2, 5 x 10^k on a log axis.
std::vector<double> NiceTicks(double lo, double hi, bool log);

// & < > " ' escaped for HTML/SVG text and attributes.
std::string EscapeXml(absl::string_view text);

}  // namespace load
}  // namespace rope

#endif  // ROPE_CLIENT_LOAD_SVG_CHART_H_
