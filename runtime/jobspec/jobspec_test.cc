#include "runtime/jobspec/jobspec.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/echo.h"
#include "base/status.h"
#include "gtest/gtest.h"

namespace loom::runtime::jobspec {
namespace {

std::string ErrorOf(absl::string_view yaml) {
  auto s = ParseJobSpecYaml(yaml);
  if (s.ok()) {
    ApplyDefaults(*s);
    absl::Status v = ValidateJobSpec(*s);
    return v.ok() ? "" : std::string(v.message());
  }
  return std::string(s.status().message());
}

TEST(JobSpec, ParsesNestedKeysAndDefaults) {
  auto s = ParseJobSpecYaml(R"(
name: tiny
model: {family: llama, n_layer: 2, n_head: 6, n_kv_head: 2, d_model: 96, seq_len: 37, vocab: 256}
train:
  steps: 50
  lr: 3e-4
parallel: {tp: auto, zero_stage: 3}
)");
  ASSERT_TRUE(s.ok()) << s.status();
  ApplyDefaults(*s);
  EXPECT_TRUE(ValidateJobSpec(*s).ok());
  EXPECT_EQ(s->model().n_kv_head(), 2);
  EXPECT_FLOAT_EQ(s->train().lr(), 3e-4f);
  EXPECT_TRUE(s->parallel().tp_auto());
  EXPECT_EQ(s->train().batch_size(), 8);  // default
  // Round trip through YAML.
  auto back = ParseJobSpecYaml(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << ToYaml(*s);
  EXPECT_EQ(back->SerializeAsString(), s->SerializeAsString());
}

// Every field of the spec, set by reflection to a value unlike its default
// (floats that need all nine digits, negative and 64-bit integers, strings a
// YAML writer must quote), survives ToYaml and ParseJobSpecYaml: the job.yaml
// an agent writes for its workers says what was submitted.
void FillEveryField(google::protobuf::Message& m, int* counter) {
  namespace pb = google::protobuf;
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  const char* strings[] = {"plain", "a: b # c", "'quoted' \"twice\"", "-", "yes", "1e5", " lead and trail ", "[x]"};
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const int k = ++*counter;
    if (f->is_repeated()) {
      if (f->message_type() == v1::TpRule::descriptor()) {
        for (int j = 0; j < 3; ++j) {
          auto* rule = static_cast<v1::TpRule*>(r->AddMessage(&m, f));
          rule->set_pattern(absl::StrCat(strings[(k + j) % 8], j));
          rule->set_style(j % 2 ? "rowwise" : "colwise");
        }
      }
      continue;
    }
    switch (f->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_MESSAGE: FillEveryField(*r->MutableMessage(&m, f), counter); break;
      case pb::FieldDescriptor::CPPTYPE_INT32: r->SetInt32(&m, f, k % 2 ? -k * 7919 : k * 104729); break;
      case pb::FieldDescriptor::CPPTYPE_INT64: r->SetInt64(&m, f, -(int64_t{1} << 40) - k); break;
      case pb::FieldDescriptor::CPPTYPE_UINT32: r->SetUInt32(&m, f, 4000000000u - k); break;
      case pb::FieldDescriptor::CPPTYPE_UINT64: r->SetUInt64(&m, f, (uint64_t{1} << 60) + k); break;
      case pb::FieldDescriptor::CPPTYPE_FLOAT: r->SetFloat(&m, f, 1.0f / (3.0f + k) + 1e-7f * k); break;
      case pb::FieldDescriptor::CPPTYPE_DOUBLE: r->SetDouble(&m, f, 1.0 / (7.0 + k)); break;
      case pb::FieldDescriptor::CPPTYPE_BOOL: r->SetBool(&m, f, true); break;
      case pb::FieldDescriptor::CPPTYPE_STRING: r->SetString(&m, f, strings[k % 8]); break;
      default: break;
    }
  }
}

TEST(JobSpec, EveryFieldSurvivesTheYamlRoundTrip) {
  v1::JobSpec spec;
  int counter = 0;
  FillEveryField(spec, &counter);
  spec.mutable_parallel()->set_tp_auto(false);  // `tp: auto` stands for tp_auto with tp unset
  const std::string yaml = ToYaml(spec);
  auto back = ParseJobSpecYaml(yaml);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(back->DebugString(), spec.DebugString()) << yaml;
  EXPECT_EQ(back->SerializeAsString(), spec.SerializeAsString());
}

// A quoted value is cut to 200 bytes, whichever rule quotes it.
TEST(JobSpec, ErrorsEchoAtMost200BytesOfAValue) {
  const std::string big(5000, 'q');
  const std::string key(1000, 'q');  // YAML caps implicit keys at 1024 characters
  for (const std::string& yaml :
       {"model:\n  family: " + big, "model:\n  " + key + ": 1", "model:\n  n_head: " + big,
        "parallel:\n  tp_plan:\n    " + key + ": colwise\n    " + key + ": rowwise",
        "parallel:\n  tp_plan:\n    \"a*\": " + big, "name: " + big, "data:\n  format: " + big}) {
    const std::string e = ErrorOf(yaml);
    EXPECT_FALSE(e.empty()) << yaml.substr(0, 40);
    EXPECT_NE(e.find(std::string(200, 'q')), std::string::npos) << e;
    EXPECT_EQ(e.find(std::string(201, 'q')), std::string::npos) << e.substr(0, 300);
    EXPECT_LE(e.size(), 600u) << e.substr(0, 300);
  }
  EXPECT_NE(ErrorOf("name: " + big).find("name: longer than 4096 bytes"), std::string::npos);
  // The cut never splits a UTF-8 character.
  std::string accents;
  for (int i = 0; i < 150; ++i) accents += "\xc3\xa9";  // U+00E9, two bytes each
  EXPECT_EQ(EchoValue(accents), accents.substr(0, 200) + "... (300 bytes)");
  EXPECT_EQ(EchoValue("x" + accents).substr(0, 199), ("x" + accents).substr(0, 199));
  EXPECT_EQ(EchoValue("x" + accents).find("..."), 199u);
  EXPECT_EQ(EchoValue("short"), "short");
  EXPECT_EQ(EchoValue("a\nb\x01"), "a\\x0ab\\x01");  // one line
}

TEST(JobSpec, DuplicateAndUnknownKeysGiveThePathLineAndColumn) {
  EXPECT_EQ(ErrorOf("name: a\nmodel:\n  n_head: 4\n  d_model: 64\n  n_head: 8\n"),
            "model.n_head: duplicate key (line 5, column 3); first given (line 3, column 3)");
  EXPECT_EQ(ErrorOf("train: {steps: 5}\ntrain: {steps: 6}\n"),
            "train: duplicate key (line 2, column 1); first given (line 1, column 1)");
  EXPECT_EQ(ErrorOf("parallel:\n  tp_plan:\n    \"a*\": colwise\n    \"a*\": rowwise\n"),
            "parallel.tp_plan: pattern 'a*' appears twice (line 4, column 5)");
  const std::string unknown = ErrorOf("model:\n  n_layer: 2\n  n_heads: 4\n");
  EXPECT_EQ(unknown.rfind("unknown key 'model.n_heads' (line 3, column 3) (known keys here: family,", 0), 0u)
      << unknown;
  EXPECT_EQ(ErrorOf("train:\n  steps: many\n"), "train.steps: expected an integer, got 'many' (line 2, column 10)");
  EXPECT_EQ(ErrorOf("model: {n_layer: [2]}"), "model.n_layer: expected a scalar value (line 1, column 18)");
  EXPECT_EQ(ErrorOf("name: a\nmodel:\n  n_layer: {2\n"), "malformed YAML at line 4, column 1: end of map flow not found");
}

// An absent key takes the default; an explicit 0 where 0 would stand for
// the default is an error naming the field; negative values are refused.
TEST(JobSpec, ExplicitZeroAndNegativeValuesAreErrors) {
  EXPECT_EQ(ErrorOf("train: {steps: 50}"), "");
  EXPECT_EQ(ErrorOf("train:\n  steps: 0\n"),
            "train.steps: must be in [1, 1000000000], got 0 (line 2, column 10); leave the key out for the default");
  for (const char* key : {"model: {n_layer: 0}", "model: {n_head: 0}", "model: {vocab: 0}", "model: {seq_len: 0}",
                          "model: {d_model: 0}", "model: {ffn_hidden: 0}", "model: {norm_eps: 0}",
                          "train: {batch_size: 0}", "train: {lr: 0}", "train: {lr: 0.0}", "train: {beta1: 0}",
                          "train: {eval_every: 0}", "train: {log_every: 0}",
                          "parallel: {dp: 0}", "parallel: {tp: 0}", "checkpoint: {keep: 0}",
                          "data: {val_fraction: 0}", "data: {bigram: {max_mib: 0}}"}) {
    const std::string e = ErrorOf(key);
    EXPECT_NE(e.find(", got 0 (line 1, column "), std::string::npos) << key << ": " << e;
    EXPECT_NE(e.find("leave the key out for the default"), std::string::npos) << key << ": " << e;
  }
  // 0 is a value of its own here.
  for (const char* ok : {"train: {weight_decay: 0, grad_clip: 0, warmup_steps: 0}", "checkpoint: {every: 0}",
                         "max_restarts: 0", "priority: 0", "parallel: {zero_stage: 0}"})
    EXPECT_EQ(ErrorOf(ok), "") << ok;
  EXPECT_EQ(ErrorOf("train: {sample_tokens: -5}"), "train.sample_tokens: must be in [0, 1048576] (got -5)");
  EXPECT_EQ(ErrorOf("checkpoint: {keep: -1}"), "checkpoint.keep: must be in [0, 1000000] (got -1)");
  EXPECT_EQ(ErrorOf("train: {warmup_steps: -1}"), "train.warmup_steps: must be in [0, 1000000000] (got -1)");
  EXPECT_EQ(ErrorOf("train: {eval_every: -10}"), "train.eval_every: must be in [1, 1000000000] (got -10)");
  EXPECT_EQ(ErrorOf("model: {n_layer: -2}"), "model.n_layer: must be in [1, 1024] (got -2)");
  EXPECT_EQ(ErrorOf("max_restarts: -1"), "max_restarts: must be in [0, 1000] (got -1)");
  EXPECT_EQ(ErrorOf("train: {lr: nan}"), "train.lr: must be in (0, 10] (got nan)");
  EXPECT_EQ(ErrorOf("train: {beta2: 1}"), "train.beta2: must be in (0, 0.999999] (got 1)");
}

TEST(JobSpec, RanksPerGpuDefaultsToOneAndIsRangeChecked) {
  auto s = ParseJobSpecYaml("device: cuda\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ApplyDefaults(*s);
  EXPECT_EQ(s->resources().ranks_per_gpu(), 1);
  EXPECT_EQ(s->parallel().backend(), "cpu:gloo,cuda:nccl");
  EXPECT_EQ(ErrorOf("resources: {ranks_per_gpu: 4}"), "");
  EXPECT_EQ(ErrorOf("resources: {ranks_per_gpu: 64}"), "");
  EXPECT_EQ(ErrorOf("resources: {ranks_per_gpu: 65}"), "resources.ranks_per_gpu: must be in [1, 64] (got 65)");
  EXPECT_EQ(ErrorOf("resources: {ranks_per_gpu: -1}"), "resources.ranks_per_gpu: must be in [1, 64] (got -1)");
  EXPECT_NE(ErrorOf("resources: {ranks_per_gpu: 0}").find("leave the key out for the default"), std::string::npos);
  EXPECT_NE(ErrorOf("resources: {gpus: 2}").find("resources.gpus"), std::string::npos);
}

TEST(JobSpec, SharedGpusDefaultToCudaGlooAndRefuseNccl) {
  auto s = ParseJobSpecYaml("device: cuda\nresources: {ranks_per_gpu: 2}\nparallel: {dp: 2}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ApplyDefaults(*s);
  EXPECT_EQ(s->parallel().backend(), "cpu:gloo,cuda:gloo");
  EXPECT_TRUE(ValidateJobSpec(*s).ok()) << ValidateJobSpec(*s);
  // Written backends are kept as written.
  for (const char* b : {"cuda:gloo", "cpu:gloo,cuda:gloo", "cpu:ucx,cuda:gloo"}) {
    auto w = ParseJobSpecYaml(absl::StrCat("device: cuda\nresources: {ranks_per_gpu: 2}\nparallel: {backend: \"",
                                           b, "\"}\n"));
    ASSERT_TRUE(w.ok()) << w.status();
    ApplyDefaults(*w);
    EXPECT_EQ(w->parallel().backend(), b);
    EXPECT_TRUE(ValidateJobSpec(*w).ok()) << b << ": " << ValidateJobSpec(*w);
  }
  // NCCL with two ranks on one GPU: refused, naming the field, under every
  // layout that runs on CUDA.
  for (const char* layout : {"", "dp: 2, ", "tp: 2, ", "dp: 2, tp: 2, ", "dp: 2, zero_stage: 3, "}) {
    for (const char* b : {"cpu:gloo,cuda:nccl", "cuda:nccl", "nccl"}) {
      const std::string e = ErrorOf(absl::StrCat("device: cuda\nresources: {ranks_per_gpu: 2}\nparallel: {", layout,
                                                 "backend: \"", b, "\"}\n"));
      EXPECT_EQ(e.rfind("parallel.backend: NCCL takes one rank per GPU, but resources.ranks_per_gpu = 2", 0), 0u)
          << layout << b << ": " << e;
    }
    EXPECT_EQ(ErrorOf(absl::StrCat("device: cuda\nparallel: {", layout, "backend: \"cpu:gloo,cuda:nccl\"}\n")), "")
        << layout;
  }
  // CUDA tensors need a CUDA backend: a spec that sends them to a CPU
  // backend is refused on device: cuda (any layout) and fine on the CPU.
  for (const char* b : {"gloo", "cpu:gloo", "cpu:ucx", "cuda:ucx", "cpu:gloo,cuda:tcp"}) {
    for (const char* layout : {"", "dp: 2, "}) {
      const std::string e = ErrorOf(absl::StrCat("device: cuda\nparallel: {", layout, "backend: \"", b, "\"}\n"));
      EXPECT_EQ(e.rfind(absl::StrCat("parallel.backend: device: cuda needs a backend for CUDA tensors, cuda:nccl or "
                                     "cuda:gloo (\"cpu:gloo,cuda:nccl\"); this spec sends them to "),
                        0),
                0u)
          << b << ": " << e;
    }
    EXPECT_EQ(ErrorOf(absl::StrCat("parallel: {dp: 2, backend: \"", b, "\"}\n")), "") << b;
  }
  EXPECT_EQ(ErrorOf("device: cuda\nparallel: {backend: nccl}\n"), "");
  // One rank per GPU, or CPU ranks: NCCL is fine as written.
  EXPECT_EQ(ErrorOf("device: cuda\nparallel: {backend: \"cuda:nccl\"}\n"), "");
  EXPECT_EQ(ErrorOf("resources: {ranks_per_gpu: 2}\nparallel: {backend: \"cpu:gloo,cuda:nccl\"}\n"), "");
  // A malformed backend names the field.
  EXPECT_EQ(ErrorOf("parallel: {backend: \"gpu:nccl\"}").rfind("parallel.backend: backend spec 'gpu:nccl'", 0), 0u)
      << ErrorOf("parallel: {backend: \"gpu:nccl\"}");
}

TEST(JobSpec, SizesHaveUpperBoundsAndProductsDoNotOverflow) {
  EXPECT_EQ(ErrorOf("model: {n_layer: 100000}"), "model.n_layer: must be in [1, 1024] (got 100000)");
  EXPECT_EQ(ErrorOf("model: {n_head: 4096, d_model: 4096}"), "model.n_head: must be in [1, 1024] (got 4096)");
  EXPECT_EQ(ErrorOf("model: {vocab: 100000000}"), "model.vocab: must be in [1, 16777216] (got 100000000)");
  EXPECT_EQ(ErrorOf("model: {seq_len: 2000000}"), "model.seq_len: must be in [1, 1048576] (got 2000000)");
  EXPECT_EQ(ErrorOf("train: {steps: 2000000000}"), "train.steps: must be in [1, 1000000000] (got 2000000000)");
  EXPECT_EQ(ErrorOf("train: {batch_size: 2000000}"), "train.batch_size: must be in [1, 1048576] (got 2000000)");
  EXPECT_EQ(ErrorOf("parallel: {tp: 2048}"), "parallel.tp: must be in [1, 1024] (got 2048)");
  EXPECT_EQ(ErrorOf("resources: {threads_per_rank: 4096}"),
            "resources.threads_per_rank: must be in [0, 1024] (got 4096)");
  EXPECT_EQ(ErrorOf("resources: {threads_per_rank: -1}"), "resources.threads_per_rank: must be in [0, 1024] (got -1)");
  EXPECT_EQ(ErrorOf("resources: {threads_per_rank: 0}"), "");
  EXPECT_EQ(ErrorOf("resources: {threads_per_rank: 3}"), "");
  EXPECT_EQ(ErrorOf("train: {lr: 1e30}"), "train.lr: must be in (0, 10] (got 1e+30)");
  EXPECT_EQ(ErrorOf("model: {n_layer: 99999999999}").rfind("model.n_layer: expected an integer", 0), 0u);
  // The default ffn_hidden (8/3 or 4 x d_model) of an out-of-range d_model
  // must not overflow before the range check names d_model.
  EXPECT_EQ(ErrorOf("model: {family: llama, d_model: 1073741824}"),
            "model.d_model: must be in [1, 65536] (got 1073741824)");
  EXPECT_EQ(ErrorOf("model: {family: gpt, d_model: -2147483648}"),
            "model.d_model: must be in [1, 65536] (got -2147483648)");
  // dp x tp = 65536 x 2 does not fit an int32 world size... and is over the bound.
  EXPECT_EQ(ErrorOf("model: {n_head: 2}\ntrain: {batch_size: 65536}\nparallel: {dp: 65536, tp: 2}"),
            "parallel.dp: dp x tp must be at most 65536 ranks (got dp=65536, tp=2)");
  EXPECT_EQ(ErrorOf("model: {n_head: 2}\ntrain: {batch_size: 65536}\nparallel: {dp: 65536, tp: 1}"), "");
  // Each dimension within its bound, the product beyond any machine: the
  // count is exact in int64 (2^24 * 2^16 + 1024 * 5 * 2^32 + ...).
  EXPECT_EQ(ErrorOf("model: {n_layer: 1024, n_head: 64, d_model: 65536, vocab: 16777216, ffn_hidden: 262144}")
                .rfind("model: the model may have at most 1000000000000 parameters (got ", 0),
            0u);
}

// What the built-in tensor-parallel plan splits is checked before launch.
TEST(JobSpec, TpMustDivideWhatItSplits) {
  EXPECT_EQ(ErrorOf("model: {vocab: 257}\nparallel: {tp: 2}"),
            "parallel.tp: must divide model.vocab = 257 (vocab-parallel) (got 2)");
  EXPECT_EQ(ErrorOf("model: {ffn_hidden: 1001}\nparallel: {tp: 2}"),
            "parallel.tp: must divide model.ffn_hidden = 1001 (got 2)");
  EXPECT_EQ(ErrorOf("model: {seq_len: 255}\nparallel: {tp: 2, sequence_parallel: true}"),
            "parallel.tp: must divide model.seq_len = 255 (sequence parallel) (got 2)");
  EXPECT_EQ(ErrorOf("model: {vocab: 257, ffn_hidden: 1001, seq_len: 255}\nparallel: {tp: 1}"), "");
}

TEST(JobSpec, ErrorsNameTheKeyAndValue) {
  EXPECT_NE(ErrorOf("model: {n_heads: 4}").find("unknown key 'model.n_heads'"), std::string::npos);
  EXPECT_NE(ErrorOf("model: {n_head: four}").find("model.n_head: expected an integer, got 'four'"),
            std::string::npos);
  EXPECT_NE(ErrorOf("model: {d_model: 100, n_head: 3}").find("model.d_model"), std::string::npos);
  EXPECT_NE(ErrorOf("model: {d_model: 100, n_head: 3}").find("100"), std::string::npos);
  EXPECT_NE(ErrorOf("model: [1, 2").find("malformed YAML at line"), std::string::npos);
  EXPECT_NE(ErrorOf("data: {path: /nonexistent/corpus.txt}").find("data.path"), std::string::npos);
  EXPECT_NE(ErrorOf("init_from: /nonexistent/model.safetensors").find("init_from: no such file (got /nonexistent"),
            std::string::npos);
  EXPECT_NE(ErrorOf("parallel: {tp: 3}").find("parallel.tp"), std::string::npos);
  EXPECT_NE(ErrorOf("train: {precision: fp8}").find("train.precision"), std::string::npos);
  EXPECT_NE(ErrorOf("42").find("expected a mapping"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("empty"), std::string::npos);
}

// train.grad_accum_steps: absent is 1; it splits train.batch_size (the batch
// of one update) into equal micro-batches.
TEST(JobSpec, GradAccumStepsHasARangeAndDividesTheBatch) {
  auto s = ParseJobSpecYaml("train: {batch_size: 8}");
  ASSERT_TRUE(s.ok()) << s.status();
  ApplyDefaults(*s);
  EXPECT_EQ(s->train().grad_accum_steps(), 1);
  EXPECT_EQ(ErrorOf("train: {batch_size: 8, grad_accum_steps: 4}"), "");
  EXPECT_EQ(ErrorOf("train: {batch_size: 8, grad_accum_steps: 8}"), "");
  const std::string zero = ErrorOf("train: {grad_accum_steps: 0}");
  EXPECT_EQ(zero.rfind("train.grad_accum_steps: must be in [1, 1024], got 0", 0), 0u) << zero;
  EXPECT_EQ(ErrorOf("train: {grad_accum_steps: -2}"), "train.grad_accum_steps: must be in [1, 1024] (got -2)");
  EXPECT_EQ(ErrorOf("train: {batch_size: 4096, grad_accum_steps: 2048}"),
            "train.grad_accum_steps: must be in [1, 1024] (got 2048)");
  EXPECT_EQ(ErrorOf("train: {batch_size: 8, grad_accum_steps: 3}"),
            "train.grad_accum_steps: must divide train.batch_size = 8 (the batch of one update, split into "
            "micro-batches) (got 3)");
  EXPECT_EQ(ErrorOf("train: {batch_size: 8, grad_accum_steps: 8}\nparallel: {dp: 2}"),
            "train.grad_accum_steps: the micro-batch train.batch_size / grad_accum_steps = 1 must divide by "
            "parallel.dp = 2 (got 8)");
  // Parallel layouts accumulate too (parallel/trainer.h).
  EXPECT_EQ(ErrorOf("train: {batch_size: 8, grad_accum_steps: 2}\nparallel: {dp: 2, tp: 2}"), "");
  EXPECT_EQ(ErrorOf("train: {batch_size: 8, grad_accum_steps: 2}\nparallel: {dp: 2, zero_stage: 3}"), "");
  EXPECT_EQ(ErrorOf("train: {batch_size: 8, grad_accum_steps: 2}\ndevice: cuda").rfind(
                "train.grad_accum_steps: accumulation runs on device: cpu", 0),
            0u);
}

// The recipe fields: the schedule, sample_tokens (unset = 200, 0 = none) and
// bf16, which needs device: cuda.
TEST(JobSpec, RecipeFieldsHaveDefaultsAndNamedErrors) {
  auto s = ParseJobSpecYaml("train: {steps: 100, lr_schedule: cosine, min_lr: 1e-5, warmup_steps: 10}");
  ASSERT_TRUE(s.ok()) << s.status();
  ApplyDefaults(*s);
  EXPECT_TRUE(ValidateJobSpec(*s).ok()) << ValidateJobSpec(*s);
  EXPECT_EQ(s->train().sample_tokens(), 200);
  auto none = ParseJobSpecYaml("train: {sample_tokens: 0}");
  ASSERT_TRUE(none.ok()) << none.status();
  ApplyDefaults(*none);
  EXPECT_TRUE(none->train().has_sample_tokens());
  EXPECT_EQ(none->train().sample_tokens(), 0);
  auto back = ParseJobSpecYaml(ToYaml(*none));  // job.yaml keeps the 0
  ASSERT_TRUE(back.ok()) << back.status();
  ApplyDefaults(*back);
  EXPECT_EQ(back->train().sample_tokens(), 0) << ToYaml(*none);

  EXPECT_EQ(ErrorOf("train: {lr_schedule: step}").rfind("train.lr_schedule: expected constant, cosine", 0), 0u);
  EXPECT_EQ(ErrorOf("train: {lr_schedule: cosine, lr: 1e-3, min_lr: 2e-3}").rfind("train.min_lr: must be in", 0), 0u);
  EXPECT_EQ(ErrorOf("train: {lr_schedule: wsd, steps: 10}").rfind("train.decay_steps: wsd needs", 0), 0u);
  EXPECT_EQ(ErrorOf("train: {lr_schedule: cosine, steps: 10, warmup_steps: 10}").rfind("train.warmup_steps:", 0), 0u);
  EXPECT_EQ(ErrorOf("train: {sample_tokens: -1}").rfind("train.sample_tokens: must be in [0, ", 0), 0u);
  EXPECT_EQ(ErrorOf("train: {sample_tokens: 0}"), "") << "0 is no sample, not the default in disguise";
  EXPECT_EQ(ErrorOf("train: {precision: bf16}"),
            "train.precision: bf16 runs on device: cuda only; device: cpu trains in f32 (set train.precision: f32) "
            "(got bf16)");
  EXPECT_EQ(ErrorOf("train: {precision: bf16}\ndevice: cuda"), "");
  EXPECT_EQ(ErrorOf("model: {dropout: 0.1}"), "");
  EXPECT_EQ(ErrorOf("train: {activation_checkpointing: blocks}"), "");
  EXPECT_EQ(ErrorOf("train: {activation_checkpointing: selective}"), "");
  EXPECT_EQ(ErrorOf("train: {activation_checkpointing: layers}"),
            "train.activation_checkpointing: expected none, blocks or selective (got layers)");
  EXPECT_EQ(ErrorOf("model: {dropout: 1}"), "model.dropout: must be in [0, 1) (got 1)");
  EXPECT_EQ(ErrorOf("model: {dropout: -0.5}"), "model.dropout: must be in [0, 1) (got -0.5)");
  EXPECT_EQ(ErrorOf("model: {dropout: 0.1}\ndevice: cuda").rfind("model.dropout: device: cuda", 0), 0u);
}

// train.deterministic: a bool (default false), kept by job.yaml, accepted on
// both devices; on cuda a step's ids must fit the sorted embedding backward.
TEST(JobSpec, DeterministicIsABoolCheckedAgainstTheBatch) {
  auto s = ParseJobSpecYaml("train: {deterministic: true}\ndevice: cuda");
  ASSERT_TRUE(s.ok()) << s.status();
  ApplyDefaults(*s);
  EXPECT_TRUE(s->train().deterministic());
  EXPECT_TRUE(ValidateJobSpec(*s).ok()) << ValidateJobSpec(*s);
  auto back = ParseJobSpecYaml(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->train().deterministic()) << ToYaml(*s);
  auto off = ParseJobSpecYaml("train: {steps: 3}");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->train().deterministic()) << "default off";
  EXPECT_EQ(ErrorOf("train: {deterministic: true}"), "") << "device: cpu: accepted, nothing changes";
  EXPECT_NE(ErrorOf("train: {deterministic: maybe}").find("train.deterministic"), std::string::npos)
      << ErrorOf("train: {deterministic: maybe}");
  const std::string big = "model: {seq_len: 4096}\ntrain: {batch_size: 524288, deterministic: true}\n";
  EXPECT_EQ(ErrorOf(big + "device: cuda"),
            "train.deterministic: the sorted embedding backward takes fewer than 2^31 ids per step; "
            "train.batch_size x model.seq_len = 2147483648 (got true)");
  EXPECT_EQ(ErrorOf("model: {seq_len: 4096}\ntrain: {batch_size: 524287, deterministic: true}\ndevice: cuda"), "");
}

// train.memory: standard (the default, also when absent) or lean, which
// needs one CUDA rank in bf16; job.yaml keeps it; each refusal names the
// field. train.offload_optimizer_state likewise, on device: cuda.
TEST(JobSpec, MemoryIsStandardOrLeanOnOneCudaRank) {
  const std::string cuda = "device: cuda\n";
  EXPECT_EQ(ErrorOf("train: {memory: standard}"), "");
  EXPECT_EQ(ErrorOf("train: {memory: lean, precision: bf16}\n" + cuda), "");
  auto s = ParseJobSpecYaml("train: {memory: lean, precision: bf16}\n" + cuda);
  ASSERT_TRUE(s.ok()) << s.status();
  auto back = ParseJobSpecYaml(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->train().memory(), "lean") << ToYaml(*s);
  EXPECT_EQ(ErrorOf("train: {memory: tiny}"), "train.memory: expected standard or lean (got tiny)");
  EXPECT_EQ(ErrorOf("train: {memory: lean}"),
            "train.memory: lean stores the training state on a GPU (device: cuda); device: cpu (got lean)");
  EXPECT_EQ(ErrorOf("train: {memory: lean}\n" + cuda),
            "train.memory: lean keeps bf16 gradients and states: set train.precision: bf16 (got lean)");
  EXPECT_EQ(ErrorOf("train: {memory: lean, precision: bf16, batch_size: 8}\nparallel: {dp: 2}\n" + cuda),
            "train.memory: lean runs one rank for now (parallel.dp x parallel.tp = 2) (got lean)");
  // train.offload_optimizer_state: a bool, device: cuda.
  EXPECT_EQ(ErrorOf("train: {offload_optimizer_state: true}\n" + cuda), "");
  EXPECT_EQ(ErrorOf("train: {offload_optimizer_state: true, memory: lean, precision: bf16}\n" + cuda), "");
  EXPECT_EQ(ErrorOf("train: {offload_optimizer_state: true}"),
            "train.offload_optimizer_state: moves the optimizer state off a GPU (device: cuda); device: cpu (got true)");
  auto off = ParseJobSpecYaml("train: {offload_optimizer_state: true}\n" + cuda);
  ASSERT_TRUE(off.ok()) << off.status();
  auto off_back = ParseJobSpecYaml(ToYaml(*off));
  ASSERT_TRUE(off_back.ok()) << off_back.status();
  EXPECT_TRUE(off_back->train().offload_optimizer_state()) << ToYaml(*off);
}

// train.residual_precision: bf16 (the default under precision bf16) or f32;
// a bf16 stream needs bf16 precision; job.yaml keeps it.
TEST(JobSpec, ResidualPrecisionIsF32OrBf16) {
  const std::string cuda = "device: cuda\n";
  EXPECT_EQ(ErrorOf("train: {precision: bf16, residual_precision: f32}\n" + cuda), "");
  EXPECT_EQ(ErrorOf("train: {precision: bf16, residual_precision: bf16}\n" + cuda), "");
  EXPECT_EQ(ErrorOf("train: {residual_precision: f32}"), "");
  EXPECT_EQ(ErrorOf("train: {precision: bf16, residual_precision: fp8}\n" + cuda),
            "train.residual_precision: expected f32 or bf16 (got fp8)");
  EXPECT_EQ(ErrorOf("train: {residual_precision: bf16}"),
            "train.residual_precision: a bf16 stream needs train.precision: bf16 (got bf16)");
  auto s = ParseJobSpecYaml("train: {precision: bf16, residual_precision: f32}\n" + cuda);
  ASSERT_TRUE(s.ok()) << s.status();
  auto back = ParseJobSpecYaml(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->train().residual_precision(), "f32") << ToYaml(*s);
}

// train.grad_precision: f32 (the default under memory: standard) or bf16;
// bf16 needs one CUDA rank in bf16; lean takes no f32; job.yaml keeps it;
// each refusal names the field.
TEST(JobSpec, GradPrecisionIsF32OrBf16OnOneCudaRank) {
  const std::string cuda = "device: cuda\n";
  EXPECT_EQ(ErrorOf("train: {precision: bf16, grad_precision: bf16}\n" + cuda), "");
  EXPECT_EQ(ErrorOf("train: {precision: bf16, grad_precision: f32}\n" + cuda), "");
  EXPECT_EQ(ErrorOf("train: {grad_precision: f32}"), "");
  EXPECT_EQ(ErrorOf("train: {precision: bf16, memory: lean, grad_precision: bf16}\n" + cuda), "");
  EXPECT_EQ(ErrorOf("train: {precision: bf16, grad_precision: fp8}\n" + cuda),
            "train.grad_precision: expected f32 or bf16 (got fp8)");
  EXPECT_EQ(ErrorOf("train: {precision: bf16, memory: lean, grad_precision: f32}\n" + cuda),
            "train.grad_precision: train.memory: lean stores the gradients bf16; drop the field or set bf16 (got f32)");
  EXPECT_EQ(ErrorOf("train: {grad_precision: bf16}"),
            "train.grad_precision: bf16 gradients live on a GPU (device: cuda); device: cpu (got bf16)");
  EXPECT_EQ(ErrorOf("train: {grad_precision: bf16}\n" + cuda),
            "train.grad_precision: bf16 gradients need train.precision: bf16 (got bf16)");
  EXPECT_EQ(ErrorOf("train: {grad_precision: bf16, precision: bf16, batch_size: 8}\nparallel: {tp: 2}\n" + cuda),
            "train.grad_precision: bf16 gradients run one rank for now (parallel.dp x parallel.tp = 2) (got bf16)");
  auto s = ParseJobSpecYaml("train: {precision: bf16, grad_precision: bf16}\n" + cuda);
  ASSERT_TRUE(s.ok()) << s.status();
  auto back = ParseJobSpecYaml(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->train().grad_precision(), "bf16") << ToYaml(*s);
}

// data.tokenizer is loaded and checked against the model when the spec is
// validated (runtime/data/tokenizer.h).
TEST(JobSpec, TokenizerIsCheckedAgainstTheModel) {
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/vocab.json") << "{\"a\": 0}";
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\na a\n";
  EXPECT_EQ(ErrorOf("data: {tokenizer: {kind: bytes}}\n"), "");
  EXPECT_EQ(ErrorOf("data: {tokenizer: {kind: wordpiece}}\n"),
            "data.tokenizer.kind: expected bytes, sentencepiece or gpt2 (got wordpiece)");
  EXPECT_EQ(ErrorOf("data: {format: tokens, tokenizer: {model: /no/such.model}}\n"),
            "data.tokenizer.model: no such file (got /no/such.model)");
  EXPECT_EQ(ErrorOf("model: {vocab: 200}\ndata: {format: tokens, tokenizer: {kind: bytes}}\n"),
            "model.vocab: 200 is smaller than the 256 ids of data.tokenizer (bytes: 256 ids (id = byte value), no "
            "end-of-text id)");
  const std::string gpt2 = "data: {format: tokens, tokenizer: {vocab: " + dir + "/vocab.json, merges: " + dir +
                           "/merges.txt}}\n";
  EXPECT_NE(ErrorOf(gpt2).find("data.tokenizer.vocab: " + dir + "/vocab.json: no token for byte 0x00"),
            std::string::npos)
      << ErrorOf(gpt2);
  auto s = ParseJobSpecYaml("data: {tokenizer: {kind: bytes}}\n");
  ASSERT_TRUE(s.ok());
  auto back = ParseJobSpecYaml(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data().tokenizer().kind(), "bytes");
}

// parallel.tp_plan: a mapping of name patterns to styles, kept in order,
// for imported models only (runtime/jobspec validates its form; the graph
// checks it against the model: parallel/tp_plan_test.cc).
TEST(JobSpec, TpPlanIsAnOrderedMappingForImportedModels) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string model = std::string(tmp != nullptr ? tmp : "/tmp") + "/tp_plan_model.onnx";
  std::ofstream(model) << "not parsed by the job-spec check";
  const std::string onnx = "model: {onnx: " + model + ", seq_len: 8, vocab: 64}\ndata: {format: tokens}\n";
  auto s = ParseJobSpecYaml(onnx + R"(parallel:
  dp: 2
  tp: 2
  tp_plan: {"h.*.qkv.weight": colwise, "h.*.proj.weight": rowwise, 'wte.weight': vocab, "*": replicate}
)");
  ASSERT_TRUE(s.ok()) << s.status();
  ApplyDefaults(*s);
  EXPECT_TRUE(ValidateJobSpec(*s).ok()) << ValidateJobSpec(*s);
  ASSERT_EQ(s->parallel().tp_plan_size(), 4);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"h.*.qkv.weight", "colwise"}, {"h.*.proj.weight", "rowwise"}, {"wte.weight", "vocab"}, {"*", "replicate"}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(s->parallel().tp_plan(i).pattern(), want[i].first);
    EXPECT_EQ(s->parallel().tp_plan(i).style(), want[i].second);
  }
  auto back = ParseJobSpecYaml(ToYaml(*s));
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << ToYaml(*s);
  EXPECT_EQ(back->SerializeAsString(), s->SerializeAsString()) << ToYaml(*s);
  // ONNX models take dp, tp and ZeRO now.
  EXPECT_EQ(ErrorOf(onnx + "parallel: {dp: 2, zero_stage: 3}"), "");
  EXPECT_EQ(ErrorOf(onnx + "parallel: {tp: auto, dp: 4}"), "");
  EXPECT_EQ(ErrorOf(onnx + "parallel: {tp: 2, tp_plan: [a, b]}"),
            "parallel.tp_plan: expected a mapping of parameter-name patterns to styles, e.g. "
            "{\"h.*.attn.qkv.weight\": colwise}, or a list of {pattern: P, style: S} (line 3, column 29)");
  EXPECT_EQ(ErrorOf(onnx + "parallel: {tp: 2, tp_plan: [{pattern: a, style: colwise, x: 1}]}"),
            "parallel.tp_plan: expected a mapping of parameter-name patterns to styles, e.g. "
            "{\"h.*.attn.qkv.weight\": colwise}, or a list of {pattern: P, style: S} (line 3, column 29)");
  EXPECT_EQ(ErrorOf(onnx + "parallel: {tp: 2, tp_plan: 7}"),
            "parallel.tp_plan: expected a mapping of parameter-name patterns to styles, e.g. "
            "{\"h.*.attn.qkv.weight\": colwise}, or a list of {pattern: P, style: S} (line 3, column 28)");
  EXPECT_EQ(ErrorOf(onnx + "parallel: {tp: 2, tp_plan: [{pattern: a, style: colwise}, {pattern: a, style: vocab}]}")
                .rfind("parallel.tp_plan: pattern 'a' appears twice", 0),
            0u);
  // The list form (a Kubernetes TrainingJob's, whose JSON mappings lose their
  // order) gives the same rules in the same order.
  auto listed = ParseJobSpecYaml(onnx + R"(parallel:
  dp: 2
  tp: 2
  tp_plan:
    - {pattern: "h.*.qkv.weight", style: colwise}
    - {style: rowwise, pattern: "h.*.proj.weight"}
    - {pattern: wte.weight, style: vocab}
    - {pattern: "*", style: replicate}
)");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ApplyDefaults(*listed);
  EXPECT_EQ(listed->SerializeAsString(), s->SerializeAsString()) << ToYaml(*listed);
  EXPECT_EQ(ErrorOf(onnx + "parallel: {tp: 2, tp_plan: {wte: colwize}}"),
            "parallel.tp_plan[\"wte\"]: expected colwise, rowwise, vocab or replicate (got colwize)");
  EXPECT_EQ(ErrorOf(onnx + "parallel: {tp: 2}"),
            "parallel.tp_plan: tp = 2 needs a plan for an ONNX model (parameter-name patterns and their styles), "
            "or tp: auto; `loom plan JOB.yaml` proposes one (got none)");
  EXPECT_EQ(ErrorOf(onnx + "parallel: {tp: 2, sequence_parallel: true, tp_plan: {wte: vocab}}"),
            "parallel.sequence_parallel: is not built for imported (ONNX) models (got true)");
  EXPECT_EQ(ErrorOf("parallel: {tp: 2, tp_plan: {wte: vocab}}"),
            "parallel.tp_plan: applies to imported models (model.onnx); gpt uses its built-in tensor-parallel "
            "plan (got 1 rules)");
}

TEST(JobSpec, DataFieldsHaveDefaultsAndNamedErrors) {
  auto s = ParseJobSpecYaml("data: {kind: mlm, mlm: {mask_token: 3}}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  ApplyDefaults(*s);
  EXPECT_TRUE(ValidateJobSpec(*s).ok()) << ValidateJobSpec(*s);
  EXPECT_EQ(s->data().format(), "auto");
  EXPECT_EQ(s->data().order(), "shuffle");
  EXPECT_FLOAT_EQ(s->data().mlm().rate(), 0.15f);
  EXPECT_EQ(s->data().mlm().ignore_index(), -100);
  auto back = ParseJobSpecYaml(ToYaml(*s));  // presence of mask_token 0..N survives the round trip
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), s->SerializeAsString());
  const std::string dir = ::testing::TempDir();
  std::ofstream(dir + "/shard_a.bin") << "x";
  struct Case {
    std::string yaml, needle;
  };
  for (const Case& c : std::vector<Case>{
           {"data: {format: parquet}", "data.format"},
           {"data: {kind: images}", "data.kind"},
           {"data: {order: random}", "data.order"},
           {"data: {tokens_dtype: u8}", "data.tokens_dtype"},
           {"data: {path: '" + dir + "/nothing_*.bin'}", "data.path"},
           {"data: {val: '" + dir + "/nothing_*.bin', val_fraction: 0}", "data.val"},
           {"data: {val: '" + dir + "/shard_*.bin', val_fraction: 0.2}", "not both"},
           {"data: {kind: mlm}", "data.mlm.mask_token: is required"},
           {"data: {kind: mlm, mlm: {mask_token: 256}}", "data.mlm.mask_token"},
           {"data: {kind: mlm, mlm: {mask_token: 1, rate: 1.5}}", "data.mlm.rate"},
           {"data: {kind: mlm, mlm: {mask_token: 1, ignore_index: -1}}", "data.mlm.ignore_index"},
           {"data: {kind: mlm, mlm: {mask_token: 1, random_fraction: 0.7, keep_fraction: 0.5}}", "keep_fraction"},
           {"data: {mlm: {mask_token: 1}}", "data.mlm: applies to data.kind: mlm"},
           {"data: {kind: pairs, path: '" + dir + "/shard_a.bin'}", "data.labels: is required"},
           {"data: {labels: '" + dir + "/shard_a.bin'}", "data.labels: applies to data.kind: pairs"},
           {"data: {inputs: {x: input_ids}}", "data.inputs.x"},
           {"data: {kind: pairs, format: llmc, path: '" + dir + "/shard_a.bin', labels: '" + dir + "/shard_a.bin'}",
            "data.format"},
       }) {
    const std::string e = ErrorOf(c.yaml);
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.yaml << " -> '" << e << "'";
  }
  EXPECT_EQ(ErrorOf("data: {path: '" + dir + "/shard_*.bin'}"), "");  // a glob with a match
  EXPECT_EQ(ErrorOf("data: {val: '" + dir + "/shard_*.bin'}"), "");    // val without val_fraction
  const std::string f = dir + "/shard_a.bin";
  EXPECT_EQ(ErrorOf("data: {kind: pairs, path: '" + f + "', labels: '" + f + "'}"), "");
  EXPECT_EQ(ErrorOf("data: {kind: pairs, path: '" + f + "', labels: '" + f + "', val: '" + f + "', val_labels: '" + f +
                    "'}"),
            "");
  EXPECT_NE(ErrorOf("data: {kind: pairs, path: '" + f + "', labels: '" + f + "', val: '" + f + "'}").find("data.val_labels"),
            std::string::npos);
}

TEST(JobSpec, LoadNamesTheFile) {
  std::string path = ::testing::TempDir() + "/bad.yaml";
  std::ofstream(path) << "model: {vocab: -1}\n";
  auto s = LoadJobSpec(path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find(path), std::string::npos);
  EXPECT_NE(std::string(s.status().message()).find("model.vocab"), std::string::npos);
  EXPECT_EQ(LoadJobSpec("/nonexistent.yaml").status().code(), absl::StatusCode::kNotFound);
}

// Grouped-query attention is a llama setting: on a gpt model an n_kv_head
// other than n_head is rejected here, naming the field, not by the model builder.
TEST(JobSpec, GptRejectsGroupedQueryHeads) {
  EXPECT_EQ(ErrorOf("model: {family: gpt, n_head: 4, n_kv_head: 2, d_model: 64}"),
            "model.n_kv_head: the gpt family has no grouped-query attention (leave it out or set it to "
            "model.n_head = 4) (got 2)");
  EXPECT_EQ(ErrorOf("model: {family: gpt, n_head: 4, n_kv_head: 4, d_model: 64}"), "");
  EXPECT_EQ(ErrorOf("model: {family: llama, n_head: 4, n_kv_head: 2, d_model: 64}"), "");
}

// The parallel section is checked by the layout rules (parallel/parallel_check.h)
// when a job spec is validated, before any process starts.
TEST(JobSpec, ParallelSectionUsesTheLayoutRules) {
  const std::string model = "model: {family: llama, n_head: 8, n_kv_head: 2, d_model: 64}\n";
  EXPECT_EQ(ErrorOf(model + "parallel: {tp: 4}"), "parallel.tp: must divide model.n_kv_head = 2 (got 4)");
  EXPECT_EQ(ErrorOf(model + "parallel: {tp: 3}"), "parallel.tp: must divide model.n_head = 8 (got 3)");
  EXPECT_EQ(ErrorOf(model + "parallel: {dp: 3}\ntrain: {batch_size: 8}"),
            "train.batch_size: must be divisible by parallel.dp = 3 (got 8)");
  EXPECT_EQ(ErrorOf(model + "parallel: {dp: 2, sequence_parallel: true}"),
            "parallel.sequence_parallel: needs parallel.tp > 1 (got tp=1)");
  EXPECT_EQ(ErrorOf(model + "parallel: {zero_stage: 5}"), "parallel.zero_stage: expected 0, 1, 2 or 3 (got 5)");
  EXPECT_EQ(ErrorOf(model + "parallel: {tp: auto, zero_stage: 5}"),
            "parallel.zero_stage: expected 0, 1, 2 or 3 (got 5)");
  EXPECT_EQ(ErrorOf(model + "parallel: {tp: auto, sequence_parallel: true}"), "");
  EXPECT_EQ(ErrorOf(model + "parallel: {dp: 2, tp: 2, zero_stage: 3}"), "");
}

}  // namespace
}  // namespace loom::runtime::jobspec
