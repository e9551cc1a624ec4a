#include "runtime/train/loss_plot.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace loom::train {

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

}  // namespace loom::train
