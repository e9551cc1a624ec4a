#include "runtime/checkpoint/init_from.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::runtime::checkpoint {

absl::StatusOr<Tensor> ReadRect(const SafetensorsReader& reader, const TensorEntry& e,
                                const std::vector<int64_t>& offsets, const std::vector<int64_t>& lengths) {
  const int nd = static_cast<int>(e.shape.size());
  if (static_cast<int>(offsets.size()) != nd || static_cast<int>(lengths.size()) != nd)
    return absl::InvalidArgumentError(absl::StrCat("'", e.name, "': a rectangle needs ", nd, " offsets and lengths"));
  for (int d = 0; d < nd; ++d)
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] + lengths[d] > e.shape[d])
      return absl::InvalidArgumentError(absl::StrCat("'", e.name, "': dim ", d, " range [", offsets[d], ", +",
                                                     lengths[d], ") is outside ", ShapeToString(e.shape)));
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(lengths, e.dtype));
  if (out.numel() == 0) return out;
  const uint64_t es = DTypeSize(e.dtype);
  if (nd == 0) {
    LOOM_RETURN_IF_ERROR(reader.ReadBytes(e, 0, out.raw_data(), es));
    return out;
  }
  // Dims k+1.. are whole, so dims k.. of the rectangle are one contiguous run.
  int k = nd - 1;
  while (k > 0 && offsets[k] == 0 && lengths[k] == e.shape[k]) --k;
  std::vector<int64_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * e.shape[d + 1];
  const uint64_t run = static_cast<uint64_t>(lengths[k] * stride[k]) * es;
  char* dst = static_cast<char*>(out.raw_data());
  std::vector<int64_t> idx(k, 0);
  for (;;) {
    int64_t elem = offsets[k] * stride[k];
    for (int d = 0; d < k; ++d) elem += (offsets[d] + idx[d]) * stride[d];
    LOOM_RETURN_IF_ERROR(reader.ReadBytes(e, static_cast<uint64_t>(elem) * es, dst, run));
    dst += run;
    int d = k - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < lengths[d]) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<InitSource>> InitSource::OpenFile(const std::string& path) {
  std::unique_ptr<InitSource> s(new InitSource());
  s->label_ = absl::StrCat("init_from: ", path);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return absl::InvalidArgumentError(absl::StrCat(s->label_, ": no such file"));
  auto reader = SafetensorsReader::Open(path);
  if (!reader.ok()) return Annotate(reader.status(), "init_from");
  s->reader_ = std::make_unique<SafetensorsReader>(std::move(*reader));
  return s;
}

absl::Status InitSource::Index() {
  for (size_t i = 0; i < plan_.params.size(); ++i) by_param_[plan_.params[i].param] = i;
  for (const auto& [a, b] : plan_.tied) LOOM_RETURN_IF_ERROR(CheckTied(a, b));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<InitSource>> InitSource::Open(const std::string& path, const v1::ModelSpec& spec) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<InitSource> s, OpenFile(path));
  LOOM_ASSIGN_OR_RETURN(s->plan_, PlanInit(s->reader_->index(), spec, s->label_));
  // Hugging Face keeps the model's configuration beside its weights.
  const std::string config = (std::filesystem::path(path).parent_path() / "config.json").string();
  std::error_code ec;
  if (s->plan_.layout != WeightLayout::kLoom && std::filesystem::is_regular_file(config, ec)) {
    std::ifstream in(config);
    std::stringstream text;
    text << in.rdbuf();
    LOOM_RETURN_IF_ERROR(CheckHfConfig(text.str(), s->plan_.layout, spec, s->label_));
    s->plan_.notes.push_back(absl::StrCat("checked against ", config));
  }
  LOOM_RETURN_IF_ERROR(s->Index());
  return s;
}

absl::StatusOr<std::unique_ptr<InitSource>> InitSource::OpenOneToOne(
    const std::string& path, const std::vector<compiler::models::ParamInfo>& params) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<InitSource> s, OpenFile(path));
  LOOM_ASSIGN_OR_RETURN(s->plan_, PlanOneToOne(s->reader_->index(), params, s->label_));
  LOOM_RETURN_IF_ERROR(s->Index());
  return s;
}

// Compared as f32 values, a bounded number of rows at a time.
absl::Status InitSource::CheckTied(const std::string& a, const std::string& b) const {
  const TensorEntry* ea = reader_->index().Find(a);
  const TensorEntry* eb = reader_->index().Find(b);
  if (ea == nullptr || eb == nullptr || ea->shape != eb->shape || ea->shape.size() != 2)
    return absl::InternalError(absl::StrCat(label_, ": tied tensors '", a, "' and '", b, "' are not alike"));
  const int64_t rows = ea->shape[0], cols = ea->shape[1];
  const int64_t chunk = std::max<int64_t>(1, (1 << 20) / std::max<int64_t>(1, cols));
  for (int64_t r = 0; r < rows; r += chunk) {
    const int64_t n = std::min(chunk, rows - r);
    LOOM_ASSIGN_OR_RETURN(Tensor ta, ReadRect(*reader_, *ea, {r, 0}, {n, cols}));
    LOOM_ASSIGN_OR_RETURN(Tensor tb, ReadRect(*reader_, *eb, {r, 0}, {n, cols}));
    Tensor fa = ta.To(DType::kF32), fb = tb.To(DType::kF32);
    if (std::memcmp(fa.raw_data(), fb.raw_data(), fa.nbytes()) != 0)
      return absl::InvalidArgumentError(absl::StrCat(label_, ": tensor '", a, "' differs from '", b,
                                                     "'; model.family gpt ties the output projection to wte"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> InitSource::ReadBlock(const std::string& param, const std::vector<int64_t>& offsets,
                                             const std::vector<int64_t>& lengths) const {
  auto it = by_param_.find(param);
  if (it == by_param_.end())
    return absl::InvalidArgumentError(absl::StrCat(label_, ": the model has no parameter '", param, "'"));
  const ParamSource& src = plan_.params[it->second];
  const TensorEntry* e = reader_->index().Find(src.tensor);
  if (e == nullptr) return absl::InternalError(absl::StrCat(label_, ": tensor '", src.tensor, "' vanished"));
  RectReader read = [&](const std::vector<int64_t>& o, const std::vector<int64_t>& l) {
    return ReadRect(*reader_, *e, o, l);
  };
  auto block = LoomBlock(src, read, offsets, lengths);
  if (!block.ok()) return Annotate(block.status(), label_);
  return block;
}

absl::StatusOr<Tensor> InitSource::Read(const std::string& param) const {
  auto it = by_param_.find(param);
  if (it == by_param_.end())
    return absl::InvalidArgumentError(absl::StrCat(label_, ": the model has no parameter '", param, "'"));
  const std::vector<int64_t>& shape = plan_.params[it->second].shape;
  return ReadBlock(param, std::vector<int64_t>(shape.size(), 0), shape);
}

absl::StatusOr<std::map<std::string, Tensor>> InitSource::ReadAll() const {
  std::map<std::string, Tensor> out;
  for (const ParamSource& s : plan_.params) {
    LOOM_ASSIGN_OR_RETURN(Tensor t, Read(s.param));
    out.emplace(s.param, std::move(t));
  }
  return out;
}

std::string InitSource::Describe() const {
  std::string s =
      absl::StrCat(label_, " (", WeightLayoutName(plan_.layout), " names, ", plan_.params.size(), " parameters");
  if (!plan_.tied.empty()) absl::StrAppend(&s, ", ", plan_.tied.size(), " tied tensor(s) checked equal");
  if (!plan_.ignored.empty()) absl::StrAppend(&s, ", ignored ", plan_.ignored.size(), " buffer/optimizer tensor(s)");
  absl::StrAppend(&s, ")");
  for (const std::string& n : plan_.notes) absl::StrAppend(&s, "; ", n);
  return s;
}

}  // namespace loom::runtime::checkpoint
