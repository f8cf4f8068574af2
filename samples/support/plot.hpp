// SPDX-License-Identifier: BSL-1.0
#pragma once
// Line charts for the samples: a PNG drawn by gnuplot when it is installed, else an SVG written
// here (no dependency beyond the standard library). Part of the samples' support library.

#include <string>
#include <utility>
#include <vector>

namespace sample_support {

struct series {
  std::string name;
  std::vector<std::pair<double, double>> points; ///< (x, y); NaN y values break the line.
  int colour = -1; ///< Index into the palette, so that a name keeps its colour in every panel;
                   ///< -1: the series' position in its panel.
};

/// One panel: a title, axis labels, lines and optional shaded x-ranges (e.g. an outage).
struct panel {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<series> lines;
  std::vector<std::pair<double, double>> shaded;
  bool log_y = false;  ///< gnuplot only; points at or below zero are left out.
  bool marks = true;   ///< gnuplot only: a mark at each point (linespoints) or a bare line.
  bool dashes = false; ///< gnuplot only: each line in its own dash pattern as well as colour.
  double y_max = 0;    ///< The top of the y axis; 0: from the data.
};

/// Draws `panels` stacked vertically into `<base>.png` with gnuplot, or into `<base>.svg` when
/// gnuplot is missing or fails. Returns the file written, or an empty string.
std::string draw(const std::string& base, const std::vector<panel>& panels);

/// Writes the panels stacked vertically into one SVG file. Returns false if it cannot write.
bool write_svg(const std::string& path, const std::vector<panel>& panels);

} // namespace sample_support
