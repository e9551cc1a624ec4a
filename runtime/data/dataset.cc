#include "runtime/data/dataset.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"

namespace loom::runtime::data {
namespace {

bool BuiltIn(const v1::ModelSpec& m) { return m.family() == "gpt" || m.family() == "llama"; }

absl::StatusOr<Kind> ParseKind(const std::string& k) {
  if (k.empty() || k == "causal") return Kind::kCausal;
  if (k == "mlm") return Kind::kMlm;
  if (k == "pairs") return Kind::kPairs;
  return absl::InvalidArgumentError(absl::StrCat("data.kind: expected causal, mlm or pairs, got '", k, "'"));
}

absl::StatusOr<Order> ParseOrder(const std::string& o) {
  if (o.empty() || o == "shuffle") return Order::kShuffle;
  if (o == "sequential") return Order::kSequential;
  return absl::InvalidArgumentError(absl::StrCat("data.order: expected shuffle or sequential, got '", o, "'"));
}

std::string Shape(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> Dataset::Open(const v1::JobSpec& spec) {
  const auto& d = spec.data();
  std::unique_ptr<Dataset> ds(new Dataset());
  LOOM_ASSIGN_OR_RETURN(ds->kind_, ParseKind(d.kind()));
  LOOM_ASSIGN_OR_RETURN(Order order, ParseOrder(d.order()));
  ds->path_ = d.path().empty() ? kDefaultCorpus : d.path();
  ds->seq_len_ = spec.model().seq_len();
  ds->vocab_ = BuiltIn(spec.model()) ? spec.model().vocab() : std::numeric_limits<int32_t>::max();
  ds->model_vocab_ = spec.model().vocab() > 0 ? spec.model().vocab() : ds->vocab_;
  ds->seed_ = spec.train().seed();
  if (!d.inputs().x().empty()) ds->x_name_ = d.inputs().x();
  if (!d.inputs().y().empty()) ds->y_name_ = d.inputs().y();
  if (ds->seq_len_ <= 0)
    return absl::InvalidArgumentError(absl::StrCat("model.seq_len must be positive, got ", ds->seq_len_));
  if (ds->kind_ == Kind::kMlm) {
    const auto& m = d.mlm();
    ds->mlm_.rate = m.rate() > 0 ? m.rate() : 0.15;
    ds->mlm_.mask_token = m.mask_token();
    ds->mlm_.ignore_index = m.has_ignore_index() ? m.ignore_index() : -100;
    ds->mlm_.random_fraction = m.random_fraction();
    ds->mlm_.keep_fraction = m.keep_fraction();
  }
  LOOM_RETURN_IF_ERROR(ds->kind_ == Kind::kPairs ? ds->OpenPairs(spec) : ds->OpenTokens(spec));
  LOOM_ASSIGN_OR_RETURN(ds->sampler_, Sampler::Create(ds->train_set_.size(), ds->seed_, order));
  return ds;
}

absl::Status Dataset::OpenTokens(const v1::JobSpec& spec) {
  const auto& d = spec.data();
  need_ = kind_ == Kind::kCausal ? seq_len_ + 1 : seq_len_;
  LOOM_ASSIGN_OR_RETURN(train_src_, TokenSource::Open(path_, d.format(), d.tokens_dtype(), "data.path"));
  train_src_->set_random_access(d.order() != "sequential");
  const std::string window = absl::StrCat(need_, " tokens (", kind_ == Kind::kCausal ? "seq_len + 1" : "seq_len", ")");
  if (!d.val().empty()) {
    LOOM_ASSIGN_OR_RETURN(val_src_, TokenSource::Open(d.val(), d.format(), d.tokens_dtype(), "data.val"));
    train_set_ = AllSamples(train_src_->ShardSizes(), seq_len_, need_);
    val_set_ = AllSamples(val_src_->ShardSizes(), seq_len_, need_);
    if (val_set_.size() == 0)
      return absl::InvalidArgumentError(absl::StrCat("data.val: ", d.val(), ": no shard holds a window of ", window));
  } else {
    auto split = SplitByFraction(train_src_->ShardSizes(), seq_len_, need_, std::max<int64_t>(1, kSplitBlock / seq_len_),
                                 d.val_fraction() > 0 ? d.val_fraction() : 0.1, d.seed());
    if (!split.ok()) return Annotate(split.status(), absl::StrCat("data.path: ", path_, ": windows of ", window));
    train_set_ = std::move(split->train);
    val_set_ = std::move(split->val);
  }
  if (train_set_.size() == 0)
    return absl::InvalidArgumentError(absl::StrCat("data.path: ", path_, ": no shard holds a window of ", window));
  if (kind_ == Kind::kMlm && (mlm_.mask_token < 0 || mlm_.mask_token >= vocab_))
    return absl::InvalidArgumentError(
        absl::StrCat("data.mlm.mask_token: ", mlm_.mask_token, " is outside [0, model.vocab = ", vocab_, ")"));
  return absl::OkStatus();
}

absl::Status Dataset::OpenPairs(const v1::JobSpec& spec) {
  const auto& d = spec.data();
  const bool builtin = BuiltIn(spec.model());
  PairLimits limits;
  if (builtin) limits.input_ids = limits.label_ids = spec.model().vocab();
  LOOM_ASSIGN_OR_RETURN(train_pairs_, PairSource::Open(path_, d.labels(), limits, "data.path", "data.labels"));
  if (builtin) {
    // Built-in families take x and y as i32 [batch, seq_len].
    const std::vector<int64_t> want = {seq_len_};
    if (train_pairs_->input_dtype() != DType::kI32 || train_pairs_->input_shape() != want ||
        train_pairs_->label_shape() != want)
      return absl::InvalidArgumentError(absl::StrCat(
          train_pairs_->Describe(), ": model family ", spec.model().family(),
          " takes integer inputs and labels of ", Shape(want), " (model.seq_len) per record"));
  }
  if (!d.val().empty()) {
    LOOM_ASSIGN_OR_RETURN(val_pairs_, PairSource::Open(d.val(), d.val_labels(), limits, "data.val", "data.val_labels"));
    if (val_pairs_->input_shape() != train_pairs_->input_shape() ||
        val_pairs_->label_shape() != train_pairs_->label_shape() ||
        val_pairs_->input_dtype() != train_pairs_->input_dtype())
      return absl::InvalidArgumentError(absl::StrCat(val_pairs_->Describe(),
                                                     ": records differ from the training records (",
                                                     train_pairs_->Describe(), ")"));
    train_set_ = AllSamples({train_pairs_->size()}, 1, 1);
    val_set_ = AllSamples({val_pairs_->size()}, 1, 1);
    return absl::OkStatus();
  }
  auto split = SplitByFraction({train_pairs_->size()}, 1, 1, kPairSplitGroup,
                               d.val_fraction() > 0 ? d.val_fraction() : 0.1, d.seed());
  if (!split.ok()) return Annotate(split.status(), absl::StrCat("data.path: ", path_));
  train_set_ = std::move(split->train);
  val_set_ = std::move(split->val);
  return absl::OkStatus();
}

std::string Dataset::Summary() const {
  if (kind_ == Kind::kPairs)
    return absl::StrCat(train_pairs_->Describe(), "; pairs: ", train_set_.size(), " training, ", val_set_.size(),
                        " validation records");
  const TokenSource& s = *train_src_;
  return absl::StrCat(path_, " (", s.num_shards(), " ", FormatName(s.format()), " shard", s.num_shards() == 1 ? "" : "s",
                      ", ", s.num_tokens(), " tokens", val_src_ ? absl::StrCat(" + ", val_src_->num_tokens(), " in data.val") : "",
                      "); ", KindName(kind_), " windows of ", need_, " tokens: ", train_set_.size(), " training, ",
                      val_set_.size(), " validation");
}

Batch Dataset::NewBatch(int64_t rows) const {
  Batch b;
  std::vector<int64_t> xs = {rows}, ys = {rows};
  DType xt = DType::kI32;
  if (kind_ == Kind::kPairs) {
    for (int64_t v : train_pairs_->input_shape()) xs.push_back(v);
    for (int64_t v : train_pairs_->label_shape()) ys.push_back(v);
    xt = train_pairs_->input_dtype();
  } else {
    xs.push_back(seq_len_);
    ys.push_back(seq_len_);
  }
  b.inputs.emplace_back(x_name_, Tensor::Zeros(xs, xt));
  b.inputs.emplace_back(y_name_, Tensor::Zeros(ys, DType::kI32));
  return b;
}

absl::Status Dataset::ReadWindow(bool val, int64_t i, int32_t* out) const {
  const SampleSet& set = val ? val_set_ : train_set_;
  const TokenSource& src = val && val_src_ ? *val_src_ : *train_src_;
  auto [shard, offset] = set.Locate(i);
  return src.Read(shard, offset, need_, vocab_, out);
}

absl::Status Dataset::FillRow(bool val, int64_t sample, uint64_t draw, int64_t row, Batch* out) const {
  if (kind_ == Kind::kPairs) {
    const PairSource& p = val && val_pairs_ ? *val_pairs_ : *train_pairs_;
    const SampleSet& set = val ? val_set_ : train_set_;
    return p.Read(set.Locate(sample).second, row, &out->mutable_x(), &out->mutable_y());
  }
  int32_t* x = out->mutable_x().data<int32_t>() + row * seq_len_;
  int32_t* y = out->mutable_y().data<int32_t>() + row * seq_len_;
  std::vector<int32_t>& w = scratch_;
  w.resize(static_cast<size_t>(need_));
  LOOM_RETURN_IF_ERROR(ReadWindow(val, sample, w.data()));
  if (kind_ == Kind::kCausal) {
    std::copy(w.begin(), w.begin() + seq_len_, x);
    std::copy(w.begin() + 1, w.end(), y);
  } else {
    MaskWindow(mlm_, val ? seed_ ^ 0x76616c6964ull : seed_, draw, model_vocab_, w.data(), seq_len_, x, y);
  }
  return absl::OkStatus();
}

absl::Status Dataset::Next(int64_t global, int64_t first_row, Batch* out) {
  const int64_t rows = out->rows();
  if (first_row < 0 || first_row + rows > global)
    return absl::InvalidArgumentError(absl::StrCat("rows [", first_row, ", ", first_row + rows,
                                                   ") are not inside a batch of ", global));
  for (int64_t r = 0; r < rows; ++r)
    LOOM_RETURN_IF_ERROR(FillRow(false, sampler_.Peek(first_row + r), sampler_.DrawIndex(first_row + r), r, out));
  sampler_.Advance(global);
  return absl::OkStatus();
}

absl::Status Dataset::Validation(int64_t index, int64_t global, int64_t first_row, Batch* out) const {
  for (int64_t r = 0; r < out->rows(); ++r) {
    const int64_t k = index * global + first_row + r;
    LOOM_RETURN_IF_ERROR(FillRow(true, k % val_set_.size(), static_cast<uint64_t>(k), r, out));
  }
  return absl::OkStatus();
}

absl::Status Dataset::ScanIds(int64_t max_bytes, bool* scanned) const {
  if (kind_ != Kind::kPairs) {
    const int64_t bytes = train_src_->num_bytes() + (val_src_ ? val_src_->num_bytes() : 0);
    *scanned = bytes <= max_bytes;
    if (!*scanned) return absl::OkStatus();
    bool done = false;
    LOOM_RETURN_IF_ERROR(train_src_->ScanIds(vocab_, max_bytes, &done));
    if (val_src_) LOOM_RETURN_IF_ERROR(val_src_->ScanIds(vocab_, max_bytes, &done));
    return absl::OkStatus();
  }
  Batch one = NewBatch(1);
  const int64_t bytes = train_pairs_->size() * (one.x().nbytes() + one.y().nbytes());
  *scanned = bytes <= max_bytes;
  if (!*scanned) return absl::OkStatus();
  for (const PairSource* p : {train_pairs_.get(), val_pairs_.get()})
    for (int64_t i = 0; p != nullptr && i < p->size(); ++i)
      LOOM_RETURN_IF_ERROR(p->Read(i, 0, &one.mutable_x(), &one.mutable_y()));
  return absl::OkStatus();
}

absl::Status CheckData(const v1::JobSpec& spec) {
  LOOM_ASSIGN_OR_RETURN(auto d, Dataset::Open(spec));
  bool scanned = false;
  return d->ScanIds(kScanLimitBytes, &scanned);
}

std::string DecodeBytes(const std::vector<int32_t>& tokens) {
  std::string s;
  s.reserve(tokens.size());
  for (int32_t t : tokens) s.push_back(static_cast<char>(t & 0xff));
  return s;
}

}  // namespace loom::runtime::data
