// A loss-curve image as a self-contained SVG: the training loss as a line and
// validation losses as dots, with labelled axes.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom::train {

std::string LossCurveSvg(const std::vector<std::pair<int64_t, double>>& train,
                         const std::vector<std::pair<int64_t, double>>& val, const std::string& title);

}  // namespace loom::train
