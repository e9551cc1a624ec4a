#include "runtime/train/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace loom::runtime::train {

std::string LossCurveSvg(const std::vector<std::pair<int64_t, double>>& train,
                         const std::vector<std::pair<int64_t, double>>& val, const std::string& title) {
  const double W = 720, H = 420, L = 60, R = 20, T = 40, Bm = 50;
  double x1 = 1, y0 = 1e30, y1 = -1e30;
  for (const auto* s : {&train, &val})
    for (const auto& [x, y] : *s) {
      x1 = std::max(x1, static_cast<double>(x));
      if (std::isfinite(y)) y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (y0 > y1) y0 = 0, y1 = 1;
  if (y1 - y0 < 1e-9) y1 = y0 + 1;
  auto px = [&](double x) { return L + (W - L - R) * x / x1; };
  auto py = [&](double y) { return T + (H - T - Bm) * (1 - (y - y0) / (y1 - y0)); };
  std::string s = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" font-size=\"15\">%s</text>\n",
      W, H, L, title);
  absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L,
                                      H - Bm, W - R, H - Bm));
  absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T,
                                      L, H - Bm));
  for (int i = 0; i <= 4; ++i) {
    double y = y0 + (y1 - y0) * i / 4;
    absl::StrAppend(&s, absl::StrFormat("<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.3f</text>\n", L - 6,
                                        py(y) + 4, y));
    double x = x1 * i / 4;
    absl::StrAppend(&s, absl::StrFormat("<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.0f</text>\n", px(x),
                                        H - Bm + 18, x));
  }
  absl::StrAppend(&s, absl::StrFormat("<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n",
                                      (W + L) / 2, H - 12));
  std::string pts;
  for (const auto& [x, y] : train)
    if (std::isfinite(y)) absl::StrAppend(&pts, absl::StrFormat("%.1f,%.1f ", px(x), py(y)));
  absl::StrAppend(&s, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"", pts, "\"/>\n");
  for (const auto& [x, y] : val)
    absl::StrAppend(&s, absl::StrFormat("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#d62728\"/>\n", px(x), py(y)));
  absl::StrAppend(&s, absl::StrFormat("<text x=\"%.0f\" y=\"%.0f\" fill=\"#1f77b4\">train loss</text>\n", W - 170,
                                      T + 4.0));
  absl::StrAppend(&s, absl::StrFormat("<text x=\"%.0f\" y=\"%.0f\" fill=\"#d62728\">validation loss</text>\n",
                                      W - 170, T + 20.0));
  absl::StrAppend(&s, "</svg>\n");
  return s;
}

std::string LossCurveText(const std::vector<std::pair<int64_t, double>>& train,
                          const std::vector<std::pair<int64_t, double>>& val, int width, int height) {
  if (train.empty() || width < 2 || height < 2) return "";
  const int64_t first = train.front().first, last = train.back().first;
  const int cols = static_cast<int>(std::min<int64_t>(width, static_cast<int64_t>(train.size())));
  std::vector<double> sum(cols, 0), count(cols, 0);
  auto column = [&](int64_t step) {
    if (last == first) return 0;
    return static_cast<int>(std::min<int64_t>(cols - 1, (step - first) * cols / (last - first + 1)));
  };
  for (const auto& [step, loss] : train) {
    if (!std::isfinite(loss)) continue;
    sum[column(step)] += loss;
    count[column(step)] += 1;
  }
  double lo = INFINITY, hi = -INFINITY;
  for (int c = 0; c < cols; ++c)
    if (count[c] > 0) lo = std::min(lo, sum[c] / count[c]), hi = std::max(hi, sum[c] / count[c]);
  for (const auto& [step, loss] : val)
    if (std::isfinite(loss)) lo = std::min(lo, loss), hi = std::max(hi, loss);
  if (!std::isfinite(lo)) return "";
  if (hi - lo < 1e-9) hi = lo + 1e-9;
  std::vector<std::string> grid(height, std::string(cols, ' '));
  auto row = [&](double loss) {
    int r = static_cast<int>(std::lround((hi - loss) / (hi - lo) * (height - 1)));
    return std::max(0, std::min(height - 1, r));
  };
  for (int c = 0; c < cols; ++c)
    if (count[c] > 0) grid[row(sum[c] / count[c])][c] = '*';
  for (const auto& [step, loss] : val)
    if (std::isfinite(loss) && step >= first && step <= last) grid[row(loss)][column(step)] = 'o';
  char label[32];
  std::string out;
  for (int r = 0; r < height; ++r) {
    if (r == 0 || r == height - 1) {
      std::snprintf(label, sizeof label, "%8.3f |", r == 0 ? hi : lo);
    } else {
      std::snprintf(label, sizeof label, "%8s |", "");
    }
    out += label + grid[r] + "\n";
  }
  std::string steps = "step " + std::to_string(first);
  std::string end = std::to_string(last);
  std::string axis(10, ' ');
  axis += steps;
  int pad = 10 + cols - static_cast<int>(axis.size()) - static_cast<int>(end.size());
  axis += std::string(std::max(1, pad), ' ') + end + "\n";
  return out + axis;
}

}  // namespace loom::runtime::train
