// SPDX-License-Identifier: BSL-1.0
// The gnuplot-or-SVG pictures of the samples; see plot.hpp.
#include "plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>

namespace sample_support {

namespace {
std::string escape(const std::string& s) {
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
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}
} // namespace

bool write_svg(const std::string& path, const std::vector<panel>& panels) {
  // gnuplot's default line colours, in its order, so that both pictures agree.
  static const char* colours[] = {"#9400d3", "#009e73", "#56b4e9", "#e69f00",
                                  "#f0e442", "#0072b2", "#e51e10", "#000000"};
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
    if (pn.y_max > 0)
      ymax = pn.y_max;
    const double pw = width - left - right, ph = panel_height - top - bottom;
    auto sx = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
    auto sy = [&](double y) { return y0 + top + ph - y / ymax * ph; };
    for (auto [a, b] : pn.shaded)
      out << "<rect x='" << num(sx(a)) << "' y='" << num(y0 + top) << "' width='"
          << num(sx(b) - sx(a)) << "' height='" << ph << "' fill='#dddddd'/>\n";
    out << "<rect x='" << left << "' y='" << y0 + top << "' width='" << pw << "' height='" << ph
        << "' fill='none' stroke='black'/>\n";
    for (int i = 0; i <= 4; ++i) {
      const double xv = xmin + (xmax - xmin) * i / 4, yv = ymax * i / 4;
      out << "<text x='" << num(sx(xv)) << "' y='" << num(y0 + top + ph + 16)
          << "' text-anchor='middle'>" << num(xv) << "</text>\n";
      out << "<text x='" << left - 6 << "' y='" << num(sy(yv) + 4) << "' text-anchor='end'>"
          << num(yv) << "</text>\n";
    }
    out << "<text x='" << left + pw / 2 << "' y='" << y0 + 24 << "' text-anchor='middle' "
        << "font-size='15'>" << escape(pn.title) << "</text>\n";
    out << "<text x='" << left + pw / 2 << "' y='" << y0 + panel_height - 12
        << "' text-anchor='middle'>" << escape(pn.x_label) << "</text>\n";
    out << "<text x='16' y='" << y0 + top + ph / 2 << "' transform='rotate(-90 16 "
        << y0 + top + ph / 2 << ")' text-anchor='middle'>" << escape(pn.y_label) << "</text>\n";
    for (std::size_t i = 0; i < pn.lines.size(); ++i) {
      const std::size_t c =
          pn.lines[i].colour >= 0 ? static_cast<std::size_t>(pn.lines[i].colour) : i;
      const char* colour = colours[c % std::size(colours)];
      std::string d;
      bool pen_down = false;
      for (auto [x, y] : pn.lines[i].points) {
        if (!std::isfinite(y)) {
          pen_down = false;
          continue;
        }
        d += (pen_down ? " L" : " M") + num(sx(x)) + ' ' + num(sy(y));
        pen_down = true;
      }
      out << "<path d='" << d << "' fill='none' stroke='" << colour << "' stroke-width='1.5'";
      if (pn.dashes && i > 0)
        out << " stroke-dasharray='" << 3 * i + 3 << ' ' << 3 << "'";
      out << "/>\n";
      const double ly = y0 + top + 16 + 18 * static_cast<double>(i);
      out << "<line x1='" << left + pw + 12 << "' y1='" << ly - 4 << "' x2='" << left + pw + 36
          << "' y2='" << ly - 4 << "' stroke='" << colour << "' stroke-width='2'/>\n";
      out << "<text x='" << left + pw + 42 << "' y='" << ly << "'>" << escape(pn.lines[i].name)
          << "</text>\n";
    }
  }
  out << "</svg>\n";
  return static_cast<bool>(out);
}

namespace {

bool run_gnuplot(const std::string& script) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    return false;
  FILE* pipe = popen("gnuplot", "w");
  if (!pipe)
    return false;
  std::fputs(script.c_str(), pipe);
  return pclose(pipe) == 0;
}

/// The gnuplot script for `panels`: each line is an inline data block, so nothing but the
/// picture is written to disk. Appended piece by piece: `"literal" + std::string&&` trips
/// g++ 12's -Wrestrict at -O3.
std::string gnuplot_script(const std::string& png, const std::vector<panel>& panels) {
  std::string script;
  for (std::size_t p = 0; p < panels.size(); ++p)
    for (std::size_t i = 0; i < panels[p].lines.size(); ++i) {
      script += "$d";
      script += std::to_string(p);
      script += '_';
      script += std::to_string(i);
      script += " << EOD\n";
      for (auto [x, y] : panels[p].lines[i].points) {
        if (!std::isfinite(y) || (panels[p].log_y && y <= 0)) {
          script += '\n'; // a blank line breaks the line
          continue;
        }
        script += num(x);
        script += ' ';
        script += num(y);
        script += '\n';
      }
      script += "EOD\n";
    }
  script += "set terminal pngcairo size 1100,";
  script += std::to_string(425 * panels.size());
  script += "\nset output '";
  script += png;
  // Fixed margins: stacked panels then share their x axis whatever the length of their keys.
  script += "'\nset grid\nset key outside right\nset lmargin at screen 0.09\n"
            "set rmargin at screen 0.76\nset multiplot layout ";
  script += std::to_string(panels.size());
  script += ",1\n";
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const panel& pn = panels[p];
    script += "unset object\n";
    for (std::size_t k = 0; k < pn.shaded.size(); ++k) {
      script += "set object ";
      script += std::to_string(k + 1);
      script += " rect from ";
      script += num(pn.shaded[k].first);
      script += ", graph 0 to ";
      script += num(pn.shaded[k].second);
      script += ", graph 1 fc rgb '#dddddd' fs solid 0.6 behind\n";
    }
    script += "set title '";
    script += pn.title;
    script += "'\nset xlabel '";
    script += pn.x_label;
    script += "'\nset ylabel '";
    script += pn.y_label;
    script += pn.log_y ? " (log)'\nset logscale y\n" : "'\nunset logscale y\n";
    if (pn.y_max > 0) {
      script += "set yrange [0:";
      script += num(pn.y_max);
      script += "]\n";
    } else {
      script += "set autoscale y\n";
    }
    script += "plot ";
    for (std::size_t i = 0; i < pn.lines.size(); ++i) {
      script += i ? ", $d" : "$d";
      script += std::to_string(p);
      script += '_';
      script += std::to_string(i);
      script += pn.marks ? " using 1:2 with linespoints lw 2" : " using 1:2 with lines lw 2";
      if (pn.lines[i].colour >= 0) {
        script += " lc ";
        script += std::to_string(pn.lines[i].colour + 1);
      }
      if (pn.dashes) {
        script += " dt ";
        script += std::to_string(i + 1);
      }
      script += " title '";
      script += pn.lines[i].name;
      script += "'";
    }
    script += "\n";
  }
  script += "unset multiplot\n";
  return script;
}

} // namespace

std::string draw(const std::string& base, const std::vector<panel>& panels) {
  const std::string png = base + ".png";
  if (run_gnuplot(gnuplot_script(png, panels)))
    return png;
  const std::string svg = base + ".svg";
  return write_svg(svg, panels) ? svg : std::string();
}

} // namespace sample_support
