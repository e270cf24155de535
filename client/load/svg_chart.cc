#include "client/load/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rope {
namespace load {
namespace {

constexpr double kLeft = 64, kRight = 16, kTop = 30, kBottom = 62;
constexpr int kMaxTicks = 40;

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void Add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return !(lo <= hi); }
};

bool Usable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

// Widens a range for drawing: non-empty, padded, 0 included when asked.
Range Finish(Range r, const ChartAxis& axis) {
  if (r.empty()) {
    r.lo = axis.log ? 1 : 0;
    r.hi = axis.log ? 10 : 1;
  }
  if (axis.log) {
    if (r.hi <= r.lo * 1.0001) {
      r.lo /= 2;
      r.hi *= 2;
    }
    // Headroom so that marks at either end stay off the frame.
    r.lo /= 1.25;
    r.hi *= 1.25;
    return r;
  }
  if (axis.from_zero) r.lo = std::min(r.lo, 0.0);
  if (r.hi - r.lo <= 1e-12 * std::max(1.0, std::fabs(r.hi))) {
    r.hi = r.lo + std::max(1.0, std::fabs(r.lo));
  }
  r.hi += 0.05 * (r.hi - r.lo);  // headroom above the highest mark
  return r;
}

class Scale {
 public:
  Scale(Range r, bool log, double p0, double p1) : log_(log), p0_(p0), p1_(p1) {
    lo_ = log ? std::log10(r.lo) : r.lo;
    hi_ = log ? std::log10(r.hi) : r.hi;
  }
  double operator()(double v) const {
    const double t = ((log_ ? std::log10(v) : v) - lo_) / (hi_ - lo_);
    return p0_ + t * (p1_ - p0_);
  }

 private:
  bool log_;
  double p0_, p1_, lo_, hi_;
};

std::string TickLabel(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6 || a < 1e-3) return absl::StrFormat("%.0e", v);
  return absl::StrFormat("%g", v);
}

}  // namespace

std::string EscapeXml(absl::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::vector<double> NiceTicks(double lo, double hi, bool log) {
  std::vector<double> ticks;
  if (!(lo < hi) || !std::isfinite(lo) || !std::isfinite(hi)) return ticks;
  if (log) {
    if (lo <= 0) return ticks;
    const int e0 = static_cast<int>(std::floor(std::log10(lo)));
    const int e1 = static_cast<int>(std::ceil(std::log10(hi)));
    const bool few_decades = e1 - e0 <= 2;
    for (int e = e0; e <= e1 && static_cast<int>(ticks.size()) < kMaxTicks; ++e) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (m != 1.0 && !few_decades) continue;
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) ticks.push_back(v);
      }
    }
    return ticks;
  }
  const double raw = (hi - lo) / 6;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  for (double v = std::ceil(lo / step) * step;
       v <= hi + step * 1e-9 && static_cast<int>(ticks.size()) < kMaxTicks; v += step) {
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
  }
  return ticks;
}

std::string RenderSvg(const Chart& chart) {
  Range xr, yr;
  for (const ChartBar& b : chart.bars) {
    if (Usable(b.x0, chart.x.log)) xr.Add(b.x0);
    if (Usable(b.x1, chart.x.log)) xr.Add(b.x1);
    if (Usable(b.y, chart.y.log)) yr.Add(b.y);
  }
  for (const ChartSeries& s : chart.series) {
    for (const ChartPoint& p : s.points) {
      if (!Usable(p.x, chart.x.log) || !Usable(p.y, chart.y.log)) continue;
      xr.Add(p.x);
      yr.Add(p.y);
    }
  }
  ChartAxis y_axis = chart.y;
  if (!chart.bars.empty()) y_axis.from_zero = true;
  xr = Finish(xr, chart.x);
  yr = Finish(yr, y_axis);
  const double w = chart.width, h = chart.height;
  const Scale sx(xr, chart.x.log, kLeft, w - kRight);
  const Scale sy(yr, chart.y.log, h - kBottom, kTop);

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
      "font-family=\"sans-serif\" font-size=\"11\" role=\"img\">\n",
      chart.width, chart.height, chart.width, chart.height);
  absl::StrAppendFormat(&svg, "<title>%s</title>\n", EscapeXml(chart.title));
  absl::StrAppendFormat(&svg, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
                        chart.width, chart.height);
  absl::StrAppendFormat(&svg,
                        "<text x=\"%g\" y=\"18\" font-size=\"13\" font-weight=\"bold\">%s</text>\n",
                        kLeft, EscapeXml(chart.title));
  // Grid and tick labels.
  for (double t : NiceTicks(xr.lo, xr.hi, chart.x.log)) {
    const double px = sx(t);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                          px, kTop, px, h - kBottom, px, h - kBottom + 14, TickLabel(t));
  }
  for (double t : NiceTicks(yr.lo, yr.hi, chart.y.log)) {
    const double py = sy(t);
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                          kLeft, py, w - kRight, py, kLeft - 4, py + 4, TickLabel(t));
  }
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" "
                        "stroke=\"#888\"/>\n",
                        kLeft, kTop, w - kLeft - kRight, h - kTop - kBottom);
  absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                        (kLeft + w - kRight) / 2, h - kBottom + 30, EscapeXml(chart.x.label));
  absl::StrAppendFormat(&svg,
                        "<text transform=\"translate(14 %.1f) rotate(-90)\" "
                        "text-anchor=\"middle\">%s</text>\n",
                        (kTop + h - kBottom) / 2, EscapeXml(chart.y.label));
  // Bars.
  const double base = chart.y.log ? sy(yr.lo) : sy(std::max(yr.lo, 0.0));
  for (const ChartBar& b : chart.bars) {
    if (!Usable(b.x0, chart.x.log) || !Usable(b.x1, chart.x.log) || !Usable(b.y, chart.y.log)) {
      continue;
    }
    const double x0 = sx(b.x0), x1 = sx(b.x1), top = sy(b.y);
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                          "fill=\"%s\"/>\n",
                          x0, std::min(top, base), std::max(0.5, x1 - x0 - 1),
                          std::fabs(base - top), EscapeXml(chart.bar_color));
  }
  // Series, and a legend along the bottom.
  double legend_x = kLeft;
  for (const ChartSeries& s : chart.series) {
    std::string path;
    std::string marks;
    for (const ChartPoint& p : s.points) {
      if (!Usable(p.x, chart.x.log) || !Usable(p.y, chart.y.log)) continue;
      const double px = sx(p.x), py = sy(p.y);
      absl::StrAppendFormat(&path, "%s%.1f,%.1f", path.empty() ? "M" : " L", px, py);
      if (s.style != ChartSeries::Style::kLine) {
        absl::StrAppendFormat(&marks, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\"/>", px, py,
                              s.style == ChartSeries::Style::kPoints ? "1.8" : "3");
      }
      if (!p.label.empty()) {
        absl::StrAppendFormat(&marks, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", px + 5, py - 5,
                              EscapeXml(p.label));
      }
    }
    if (s.style != ChartSeries::Style::kPoints && !path.empty()) {
      absl::StrAppendFormat(&svg,
                            "<path d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.8\"/>\n",
                            path, EscapeXml(s.color));
    }
    if (!marks.empty()) {
      // One group carries the colour, so that thousands of sampled points
      // stay small.
      absl::StrAppendFormat(&svg, "<g fill=\"%s\"%s>%s</g>\n", EscapeXml(s.color),
                            s.style == ChartSeries::Style::kPoints ? " fill-opacity=\"0.45\"" : "",
                            marks);
    }
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                          legend_x, h - 18, EscapeXml(s.color), legend_x + 14, h - 9,
                          EscapeXml(s.name));
    legend_x += 24 + 7 * static_cast<double>(s.name.size());
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace load
}  // namespace rope
