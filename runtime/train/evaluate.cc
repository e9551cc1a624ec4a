#include "runtime/train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "base/rng.h"
#include "runtime/checkpoint/safetensors.h"
#include "base/status.h"
#include "runtime/data/dataset.h"
#include "runtime/train/run_reporter.h"
#include "runtime/data/tokenizer.h"

namespace loom::runtime::train {

absl::StatusOr<double> ValidationLoss(parallel::Trainer& t, const v1::JobSpec& spec, const data::Dataset& dataset) {
  const auto& tr = spec.train();
  const auto [first_row, rows] = t.BatchRows();
  data::Batch b = dataset.NewBatch(rows);
  double sum = 0;
  for (int i = 0; i < tr.eval_batches(); ++i) {
    absl::Status s = dataset.Validation(i, tr.batch_size(), first_row, &b);
    if (!s.ok()) return Annotate(s, "validation data");
    auto l = t.EvaluateRows({{"x", b.x()}, {"y", b.y()}});
    if (!l.ok()) return l.status();
    sum += *l;
  }
  return sum / tr.eval_batches();
}

namespace {

// The next id from one row of logits (see SampleOptions).
int32_t Pick(const float* logits, int64_t n, const SampleOptions& o, Philox& rng, int64_t draw) {
  if (o.temperature <= 0) return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
  double mx = -1e30;
  for (int64_t v = 0; v < n; ++v) mx = std::max(mx, static_cast<double>(logits[v]));
  std::vector<double> p(n);
  for (int64_t v = 0; v < n; ++v) p[v] = std::exp((logits[v] - mx) / o.temperature);
  if (o.top_k > 0 && o.top_k < n) {  // keep the k largest, ties to the lower id
    std::vector<int64_t> order(n);
    for (int64_t v = 0; v < n; ++v) order[v] = v;
    std::nth_element(order.begin(), order.begin() + o.top_k, order.end(),
                     [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (auto it = order.begin() + o.top_k; it != order.end(); ++it) p[*it] = 0;
  }
  double z = 0;
  for (int64_t v = 0; v < n; ++v) z += p[v];
  double u = rng.Uniform(draw) * z, acc = 0;
  for (int64_t v = 0; v < n; ++v)
    if (p[v] > 0 && (acc += p[v]) >= u) return static_cast<int32_t>(v);
  return static_cast<int32_t>(n - 1);
}

}  // namespace

// From the sampling program (Trainer::SampleLogits): row 0; later positions
// are padding the causal mask ignores.
absl::StatusOr<std::vector<int32_t>> SampleTokens(parallel::Trainer& t, const v1::JobSpec& spec,
                                                  std::vector<int32_t> prompt, const SampleOptions& o, int64_t vocab) {
  if (prompt.empty()) return absl::InvalidArgumentError("sampling needs a prompt of at least one token");
  const int64_t T = spec.model().seq_len(), V = spec.model().vocab();
  Tensor x = Tensor::Zeros({t.SampleRows(), T}, DType::kI32);
  Philox rng(o.seed, 0);
  std::vector<int32_t> out;
  std::vector<int32_t> ctx = std::move(prompt);
  for (int i = 0; i < o.tokens; ++i) {
    if (static_cast<int64_t>(ctx.size()) > T) ctx.erase(ctx.begin(), ctx.end() - T);
    int32_t* xp = x.data<int32_t>();
    for (int64_t j = 0; j < T; ++j) xp[j] = j < static_cast<int64_t>(ctx.size()) ? ctx[j] : 0;
    auto r = t.SampleLogits(x);
    if (!r.ok()) return r.status();
    const float* logits = r->data<float>() + (ctx.size() - 1) * V;
    const int32_t pick = Pick(logits, std::min(V, vocab), o, rng, i);
    out.push_back(pick);
    ctx.push_back(pick);
  }
  return out;
}

absl::StatusOr<std::string> SampleText(parallel::Trainer& t, const v1::JobSpec& spec, std::vector<int32_t> prompt,
                                       int n) {
  auto tok = data::LoadJobTokenizer(spec);
  if (!tok.ok()) return tok.status();
  SampleOptions o;
  o.tokens = n;
  o.seed = spec.train().seed() + 77;
  // Ids the tokenizer has no text for (token-id data without data.tokenizer)
  // are sampled from the whole vocabulary and shown as numbers.
  const bool decodable = std::all_of(prompt.begin(), prompt.end(), [&](int32_t id) { return id < (*tok)->vocab_size(); });
  auto ids = SampleTokens(t, spec, prompt, o, decodable ? (*tok)->vocab_size() : spec.model().vocab());
  if (!ids.ok()) return ids.status();
  prompt.insert(prompt.end(), ids->begin(), ids->end());
  if (decodable) return (*tok)->Decode(prompt);
  return absl::StrCat("token ids (data.tokenizer, ", (*tok)->kind(), ", has no text for ids of ", (*tok)->vocab_size(),
                      " and above): ", absl::StrJoin(prompt, " "));
}

absl::Status WriteModel(const std::map<std::string, Tensor>& params,
                        const std::vector<compiler::models::ParamInfo>& info, const v1::JobSpec& spec,
                        const std::string& path) {
  std::vector<Tensor> keep;
  std::vector<checkpoint::TensorToWrite> w;
  for (const compiler::models::ParamInfo& p : info) {
    auto it = params.find(p.name);
    if (it == params.end()) return absl::InternalError(absl::StrCat("model file: no parameter '", p.name, "'"));
    keep.push_back(it->second.To(DType::kF32).Contiguous());
    w.push_back({p.name, DType::kF32, std::vector<int64_t>(p.shape.begin(), p.shape.end()), keep.back().raw_data()});
  }
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  auto written = checkpoint::WriteSafetensors(tmp, w, {{"format", "pt"}, {"loom.family", spec.model().family()}});
  if (!written.ok()) return written.status();
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return absl::InternalError(absl::StrCat("model file: renaming ", tmp, " to ", path, ": ", std::strerror(errno)));
  return absl::OkStatus();
}

absl::Status FinishWithSample(parallel::Trainer& t, const v1::JobSpec& spec, const data::Dataset& dataset,
                              const std::map<std::string, Tensor>& params, const std::string& dir, double val_loss,
                              double baseline) {
  const bool lead = !dir.empty();
  const std::string loss = LossAndPerplexity(spec, val_loss);
  if (lead && std::isnan(baseline)) {
    std::printf("\nfinal validation loss %s\n", loss.c_str());
  } else if (lead) {
    std::printf("\nfinal validation loss %s (bigram baseline %.4f)\n", loss.c_str(), baseline);
  }
  const int n = spec.train().sample_tokens();
  const bool sample = dataset.kind() == data::Kind::kCausal && t.has_logits() && n > 0;
  if (lead && dataset.kind() == data::Kind::kCausal && !t.has_logits())
    std::printf("no sample: the model outputs no logits\n");
  if (sample) {
    const int64_t T = spec.model().seq_len();
    std::vector<int32_t> window(static_cast<size_t>(dataset.window_tokens()));
    LOOM_RETURN_IF_ERROR(dataset.ReadWindow(true, 0, window.data()));
    std::vector<int32_t> prompt(window.begin(), window.begin() + std::min<int64_t>(16, std::max<int64_t>(1, T / 2)));
    auto text = SampleText(t, spec, prompt, n);
    if (!text.ok()) return text.status();
    if (lead) {
      std::ofstream(dir + "/sample.txt") << *text;
      std::printf("sample:\n----\n%s\n----\n", text->c_str());
    }
  }
  if (!lead) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(WriteModel(params, t.param_info(), spec, dir + "/model.safetensors"));
  std::printf("run folder: %s (metrics.jsonl, metrics.prom, events.out.tfevents.*, loss.svg, %sjob.yaml, "
              "model.safetensors)\n",
              dir.c_str(), sample ? "sample.txt, " : "");
  return absl::OkStatus();
}

}  // namespace loom::runtime::train
