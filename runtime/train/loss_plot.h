// Loss curves: a self-contained SVG image (the training loss as a line,
// validation losses as dots, labelled axes) and a text plot for terminals.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom::runtime::train {

std::string LossCurveSvg(const std::vector<std::pair<int64_t, double>>& train,
                         const std::vector<std::pair<int64_t, double>>& val, const std::string& title);

// The same curve for a terminal: `height` rows of `width` columns. Each column
// is the mean training loss of its share of the steps, drawn as '*'; 'o' marks
// validation losses. The left margin labels the top and bottom loss, the last
// line the first and last step. Empty input gives "".
std::string LossCurveText(const std::vector<std::pair<int64_t, double>>& train,
                          const std::vector<std::pair<int64_t, double>>& val, int width = 60, int height = 12);

}  // namespace loom::runtime::train
