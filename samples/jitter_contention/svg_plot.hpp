#pragma once
// A tiny line-chart writer: the fallback picture when gnuplot is not installed. Shared by the
// jitter_contention and retry_storm samples (header-only, no dependency beyond the standard
// library).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace sample_plot {

struct series {
  std::string name;
  std::vector<std::pair<double, double>> points; ///< (x, y); NaN y values break the line.
};

/// One panel: a title, axis labels, lines and optional shaded x-ranges (e.g. an outage).
struct panel {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<series> lines;
  std::vector<std::pair<double, double>> shaded;
};

namespace detail {
inline std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}
inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
} // namespace detail

/// Writes the panels stacked vertically into one SVG file. Returns false if it cannot write.
inline bool write_svg(const std::string& path, const std::vector<panel>& panels) {
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};
  const double width = 900, panel_height = 360, left = 80, right = 200, top = 40, bottom = 50;
  std::ofstream out(path);
  if (!out)
    return false;
  out << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='"
      << panel_height * static_cast<double>(panels.size()) << "' font-family='sans-serif' "
      << "font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n";
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const panel& pn = panels[p];
    const double y0 = panel_height * static_cast<double>(p);
    double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymax = 0;
    for (const auto& s : pn.lines)
      for (auto [x, y] : s.points) {
        xmin = std::min(xmin, x);
        xmax = std::max(xmax, x);
        if (std::isfinite(y))
          ymax = std::max(ymax, y);
      }
    if (!(xmax > xmin))
      xmax = xmin + 1;
    if (ymax <= 0)
      ymax = 1;
    ymax *= 1.05;
    const double pw = width - left - right, ph = panel_height - top - bottom;
    auto sx = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
    auto sy = [&](double y) { return y0 + top + ph - y / ymax * ph; };
    for (auto [a, b] : pn.shaded)
      out << "<rect x='" << detail::num(sx(a)) << "' y='" << detail::num(y0 + top) << "' width='"
          << detail::num(sx(b) - sx(a)) << "' height='" << ph << "' fill='#dddddd'/>\n";
    out << "<rect x='" << left << "' y='" << y0 + top << "' width='" << pw << "' height='" << ph
        << "' fill='none' stroke='black'/>\n";
    for (int i = 0; i <= 4; ++i) {
      const double xv = xmin + (xmax - xmin) * i / 4, yv = ymax * i / 4;
      out << "<text x='" << detail::num(sx(xv)) << "' y='" << detail::num(y0 + top + ph + 16)
          << "' text-anchor='middle'>" << detail::num(xv) << "</text>\n";
      out << "<text x='" << left - 6 << "' y='" << detail::num(sy(yv) + 4) << "' text-anchor='end'>"
          << detail::num(yv) << "</text>\n";
    }
    out << "<text x='" << left + pw / 2 << "' y='" << y0 + 24 << "' text-anchor='middle' "
        << "font-size='15'>" << detail::escape(pn.title) << "</text>\n";
    out << "<text x='" << left + pw / 2 << "' y='" << y0 + panel_height - 12
        << "' text-anchor='middle'>" << detail::escape(pn.x_label) << "</text>\n";
    out << "<text x='16' y='" << y0 + top + ph / 2 << "' transform='rotate(-90 16 "
        << y0 + top + ph / 2 << ")' text-anchor='middle'>" << detail::escape(pn.y_label)
        << "</text>\n";
    for (std::size_t i = 0; i < pn.lines.size(); ++i) {
      const char* colour = colours[i % std::size(colours)];
      std::string d;
      bool pen_down = false;
      for (auto [x, y] : pn.lines[i].points) {
        if (!std::isfinite(y)) {
          pen_down = false;
          continue;
        }
        d += (pen_down ? " L" : " M") + detail::num(sx(x)) + ' ' + detail::num(sy(y));
        pen_down = true;
      }
      out << "<path d='" << d << "' fill='none' stroke='" << colour << "' stroke-width='1.5'/>\n";
      const double ly = y0 + top + 16 + 18 * static_cast<double>(i);
      out << "<line x1='" << left + pw + 12 << "' y1='" << ly - 4 << "' x2='" << left + pw + 36
          << "' y2='" << ly - 4 << "' stroke='" << colour << "' stroke-width='2'/>\n";
      out << "<text x='" << left + pw + 42 << "' y='" << ly << "'>"
          << detail::escape(pn.lines[i].name) << "</text>\n";
    }
  }
  out << "</svg>\n";
  return static_cast<bool>(out);
}

/// True when a `gnuplot` executable is on the PATH.
inline bool have_gnuplot() {
  return std::system("command -v gnuplot >/dev/null 2>&1") == 0;
}

/// Runs a gnuplot script; returns true when gnuplot exited cleanly.
inline bool run_gnuplot(const std::string& script) {
  FILE* pipe = popen("gnuplot", "w");
  if (!pipe)
    return false;
  std::fputs(script.c_str(), pipe);
  return pclose(pipe) == 0;
}

} // namespace sample_plot
