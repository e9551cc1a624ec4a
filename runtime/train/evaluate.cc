#include "runtime/train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <unistd.h>

#include "absl/strings/str_cat.h"

#include "base/rng.h"
#include "runtime/checkpoint/safetensors.h"
#include "base/status.h"
#include "runtime/data/dataset.h"
#include "runtime/train/run_reporter.h"

namespace loom::train {

absl::StatusOr<double> ValidationLoss(Trainer& t, const v1::JobSpec& spec, const data::Dataset& dataset) {
  const auto& tr = spec.train();
  data::Batch b = dataset.NewBatch(tr.batch_size());
  double sum = 0;
  for (int i = 0; i < tr.eval_batches(); ++i) {
    absl::Status s = dataset.Validation(i, tr.batch_size(), 0, &b);
    if (!s.ok()) return Annotate(s, "validation data");
    auto l = t.Evaluate(b.x(), b.y());
    if (!l.ok()) return l.status();
    sum += *l;
  }
  return sum / tr.eval_batches();
}

// From the evaluation program: batch row 0; later positions are padding the
// causal mask ignores.
absl::StatusOr<std::string> SampleText(Trainer& t, const v1::JobSpec& spec, std::vector<int32_t> prompt, int n) {
  const int64_t T = spec.model().seq_len(), B = spec.train().batch_size(), V = spec.model().vocab();
  Tensor x = Tensor::Zeros({B, T}, DType::kI32), y = Tensor::Zeros({B, T}, DType::kI32);
  Philox rng(spec.train().seed() + 77, 0);
  std::vector<int32_t> out;
  std::vector<int32_t> ctx = prompt;
  for (int i = 0; i < n; ++i) {
    if (static_cast<int64_t>(ctx.size()) > T) ctx.erase(ctx.begin(), ctx.end() - T);
    int32_t* xp = x.data<int32_t>();
    for (int64_t j = 0; j < T; ++j) xp[j] = j < static_cast<int64_t>(ctx.size()) ? ctx[j] : 0;
    auto r = t.Forward(x, y);
    if (!r.ok()) return r.status();
    const float* logits = r->second.data<float>() + (ctx.size() - 1) * V;
    double mx = -1e30;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(logits[v]));
    std::vector<double> p(V);
    double z = 0;
    for (int64_t v = 0; v < V; ++v) z += p[v] = std::exp((logits[v] - mx) / 0.8);
    double u = rng.Uniform(i) * z, acc = 0;
    int32_t pick = static_cast<int32_t>(V - 1);
    for (int64_t v = 0; v < V; ++v)
      if ((acc += p[v]) >= u) {
        pick = static_cast<int32_t>(v);
        break;
      }
    out.push_back(pick);
    ctx.push_back(pick);
  }
  return data::DecodeBytes(prompt) + data::DecodeBytes(out);
}

absl::Status WriteModel(const Trainer& t, const v1::JobSpec& spec, const std::string& path) {
  const std::map<std::string, Tensor> params = t.Parameters();
  std::vector<Tensor> keep;
  std::vector<checkpoint::TensorToWrite> w;
  for (const models::ParamInfo& p : t.param_info()) {
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

absl::Status FinishWithSample(Trainer& t, const v1::JobSpec& spec, const data::Dataset& dataset,
                              const std::string& dir, double val_loss, double baseline) {
  const std::string loss = LossAndPerplexity(spec, val_loss);
  if (std::isnan(baseline)) {
    std::printf("\nfinal validation loss %s\n", loss.c_str());
  } else {
    std::printf("\nfinal validation loss %s (bigram baseline %.4f)\n", loss.c_str(), baseline);
  }
  const int n = spec.train().sample_tokens();
  const bool sample = dataset.kind() == data::Kind::kCausal && t.has_logits() && n > 0;
  if (dataset.kind() == data::Kind::kCausal && !t.has_logits()) std::printf("no sample: the model outputs no logits\n");
  if (sample) {
    const int64_t T = spec.model().seq_len();
    std::vector<int32_t> window(static_cast<size_t>(dataset.window_tokens()));
    LOOM_RETURN_IF_ERROR(dataset.ReadWindow(true, 0, window.data()));
    std::vector<int32_t> prompt(window.begin(), window.begin() + std::min<int64_t>(16, std::max<int64_t>(1, T / 2)));
    auto text = SampleText(t, spec, prompt, n);
    if (!text.ok()) return text.status();
    std::ofstream(dir + "/sample.txt") << *text;
    std::printf("sample:\n----\n%s\n----\n", text->c_str());
  }
  LOOM_RETURN_IF_ERROR(WriteModel(t, spec, dir + "/model.safetensors"));
  std::printf("run folder: %s (metrics.jsonl, metrics.prom, events.out.tfevents.*, loss.svg, %sjob.yaml, "
              "model.safetensors)\n",
              dir.c_str(), sample ? "sample.txt, " : "");
  return absl::OkStatus();
}

}  // namespace loom::train
