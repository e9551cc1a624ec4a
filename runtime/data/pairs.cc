#include "runtime/data/pairs.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::runtime::data {
namespace {

int64_t RecordSize(const NpyHeader& h) { return h.shape.empty() || h.shape[0] == 0 ? 0 : h.count / h.shape[0]; }

absl::StatusOr<std::pair<NpyHeader, std::unique_ptr<MappedFile>>> OpenNpy(const std::string& path,
                                                                          const std::string& field) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandDataPath(path, "npy", field));
  if (files.size() != 1)
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", path, "' names ", files.size(), " files; pairs read one .npy file each"));
  auto map = MappedFile::Open(files[0]);
  if (!map.ok()) return Annotate(map.status(), field);
  absl::string_view bytes(reinterpret_cast<const char*>((*map)->data()), static_cast<size_t>((*map)->size()));
  auto h = ParseNpyHeader(bytes, (*map)->size(), files[0]);
  if (!h.ok()) return Annotate(h.status(), field);
  if (h->shape.empty())
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", files[0], ": .npy 'shape' is () ; records need [N, ...]"));
  return std::make_pair(std::move(*h), std::move(*map));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PairSource>> PairSource::Open(const std::string& inputs, const std::string& labels,
                                                             const PairLimits& limits, const std::string& field,
                                                             const std::string& labels_field) {
  std::unique_ptr<PairSource> s(new PairSource());
  s->limits_ = limits;
  s->inputs_path_ = absl::StrCat(field, ": ", inputs);
  s->labels_path_ = absl::StrCat(labels_field, ": ", labels);
  LOOM_ASSIGN_OR_RETURN(auto in, OpenNpy(inputs, field));
  LOOM_ASSIGN_OR_RETURN(auto lab, OpenNpy(labels, labels_field));
  s->inputs_ = std::move(in.first);
  s->inputs_map_ = std::move(in.second);
  s->labels_ = std::move(lab.first);
  s->labels_map_ = std::move(lab.second);
  if (!s->labels_.type.is_integer())
    return absl::InvalidArgumentError(absl::StrCat(labels_field, ": ", labels, ": .npy 'descr' is ",
                                                   s->labels_.type.ToString(), "; labels are integers"));
  if (s->labels_.shape[0] != s->inputs_.shape[0])
    return absl::InvalidArgumentError(absl::StrCat(labels_field, ": ", labels, " holds ", s->labels_.shape[0],
                                                   " records but ", field, " (", inputs, ") holds ",
                                                   s->inputs_.shape[0]));
  if (s->inputs_.shape[0] == 0)
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", inputs, " holds no records"));
  return s;
}

std::vector<int64_t> PairSource::input_shape() const { return {inputs_.shape.begin() + 1, inputs_.shape.end()}; }
std::vector<int64_t> PairSource::label_shape() const { return {labels_.shape.begin() + 1, labels_.shape.end()}; }

std::string PairSource::Describe() const {
  return absl::StrCat(inputs_path_, " (", inputs_.type.ToString(), " [", absl::StrJoin(inputs_.shape, ", "), "]), ",
                      labels_path_, " (", labels_.type.ToString(), " [", absl::StrJoin(labels_.shape, ", "), "])");
}

absl::Status PairSource::ReadInputs(int64_t i, int64_t row, Tensor* x) const {
  const int64_t n = RecordSize(inputs_);
  const uint8_t* base = inputs_map_->data() + inputs_.data_offset;
  if (inputs_.type.kind == 'f') {
    float* out = x->data<float>() + row * n;
    for (int64_t k = 0; k < n; ++k) out[k] = static_cast<float>(ElementAsDouble(base, inputs_.type, i * n + k));
    return absl::OkStatus();
  }
  int32_t* out = x->data<int32_t>() + row * n;
  for (int64_t k = 0; k < n; ++k) {
    bool exact = true;
    const int64_t v = ElementAsInt(base, inputs_.type, i * n + k, &exact);
    const bool in_range = exact && (limits_.input_ids > 0 ? v >= 0 && v < limits_.input_ids
                                                          : v >= std::numeric_limits<int32_t>::min() &&
                                                                v <= std::numeric_limits<int32_t>::max());
    if (!in_range)
      return absl::InvalidArgumentError(absl::StrCat(
          inputs_path_, ": input value ", v, " at byte offset ", inputs_.data_offset + (i * n + k) * inputs_.type.width,
          " (record ", i, ") is outside ",
          limits_.input_ids > 0 ? absl::StrCat("[0, model.vocab = ", limits_.input_ids, ")") : "int32"));
    out[k] = static_cast<int32_t>(v);
  }
  return absl::OkStatus();
}

absl::Status PairSource::Read(int64_t i, int64_t row, Tensor* x, Tensor* y) const {
  LOOM_RETURN_IF_ERROR(ReadInputs(i, row, x));
  const int64_t n = RecordSize(labels_);
  const uint8_t* base = labels_map_->data() + labels_.data_offset;
  int32_t* out = y->data<int32_t>() + row * n;
  for (int64_t k = 0; k < n; ++k) {
    bool exact = true;
    const int64_t v = ElementAsInt(base, labels_.type, i * n + k, &exact);
    const bool in_range = exact && (limits_.label_ids > 0
                                        ? (v >= 0 && v < limits_.label_ids) || v == limits_.ignore_label
                                        : v >= std::numeric_limits<int32_t>::min() &&
                                              v <= std::numeric_limits<int32_t>::max());
    if (!in_range)
      return absl::InvalidArgumentError(absl::StrCat(
          labels_path_, ": label ", v, " at byte offset ", labels_.data_offset + (i * n + k) * labels_.type.width,
          " (record ", i, ") is outside ",
          limits_.label_ids > 0
              ? absl::StrCat("[0, model.vocab = ", limits_.label_ids, ") and is not ", limits_.ignore_label)
              : "int32"));
    out[k] = static_cast<int32_t>(v);
  }
  return absl::OkStatus();
}

}  // namespace loom::runtime::data
