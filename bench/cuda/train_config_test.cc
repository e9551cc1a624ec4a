// The training benchmark's presets, flags and FLOP count (train_config.h), and
// its PyTorch side (train_torch.py, run with Debian's torch on the CPU):
// the same presets, and models with Loom's parameter names and shapes.
#include "bench/cuda/train_config.h"

#include <unistd.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include <nlohmann/json.hpp>
#include "tests/parity/tensor_dir.h"

namespace loom::bench::cuda {
namespace {

absl::StatusOr<TrainFlags> Parse(std::vector<std::string> args) {
  std::vector<const char*> argv = {"train_bench"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return ParseTrainFlags(static_cast<int>(argv.size()), argv.data());
}

// The parameter counts documented in train_config.h and docs/perf.md.
TEST(TrainConfig, PresetParameterCountsMatchTheDocumentedOnes) {
  const std::map<std::string, int64_t> documented = {{"gpt2-124m", 124475904},
                                                     {"gpt2-350m", 354871296},
                                                     {"llama-124m", 124668672},
                                                     {"llama-350m", 336118784},
                                                     {"llama-1b", 1100048384}};
  ASSERT_EQ(TrainPresets().size(), documented.size());
  for (const TrainPreset& p : TrainPresets()) {
    absl::StatusOr<TrainFlags> f = Parse({"--data=/d", "--preset=" + p.name});
    ASSERT_TRUE(f.ok()) << p.name << ": " << f.status();
    auto params = compiler::models::Parameters(f->spec);
    ASSERT_TRUE(params.ok()) << p.name;
    ASSERT_TRUE(documented.count(p.name)) << p.name;
    EXPECT_EQ(compiler::models::NumParameters(*params), documented.at(p.name)) << p.name;
    EXPECT_EQ(f->batch * f->spec.seq_len(), 16384) << p.name;
  }
}

TEST(TrainConfig, FlagsOverrideThePresetWhereverItStands) {
  absl::StatusOr<TrainFlags> f =
      Parse({"--n_layer=2", "--data=/d", "--preset=llama-1b", "--batch=3", "--steps=7", "--ffn=64"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->spec.family(), "llama");
  EXPECT_EQ(f->spec.n_layer(), 2);
  EXPECT_EQ(f->spec.n_head(), 32);
  EXPECT_EQ(f->spec.n_kv_head(), 4);
  EXPECT_EQ(f->spec.ffn_hidden(), 64);
  EXPECT_EQ(f->batch, 3);
  EXPECT_EQ(f->steps, 7);
  EXPECT_EQ(f->preset, "custom");  // a preset with flags over it
  absl::StatusOr<TrainFlags> plain = Parse({"--data=/d", "--preset=llama-350m", "--steps=3"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->preset, "llama-350m");
}

TEST(TrainConfig, BadFlagsAreInvalidArgumentNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--preset=gpt2-7b"}, "--preset"},
      {{"--n_layer=0"}, "--n_layer"},
      {{"--n_head=x"}, "--n_head"},
      {{"--steps=0"}, "--steps"},
      {{"--batch=-1"}, "--batch"},
      {{"--family=bert"}, "--family"},
      {{"--loss-tol=-1"}, "--loss-tol"},
      {{"--d_model=100"}, "--d_model"},                           // 100 % 12 heads
      {{"--preset=llama-124m", "--n_kv_head=5"}, "--n_kv_head"},  // 5 does not divide 12
      {{"--n_kv_head=4"}, "--n_kv_head"},                         // gpt has no GQA
      {{"--bogus=1"}, "--bogus"},
      {{"--attention=slow"}, "--attention"},
      {{"--memory=small"}, "--memory"},
      {{"--grads=f16"}, "--grads"},
      {{"--embedding-backward=fast"}, "--embedding-backward"},
      {{"--arena-offset-gib=-1"}, "--arena-offset-gib"},
      {{"--arena-guard-bytes=x"}, "--arena-guard-bytes"},
  };
  for (const auto& [args, flag] : cases) {
    std::vector<std::string> with_data = args;
    with_data.push_back("--data=/d");
    absl::StatusOr<TrainFlags> f = Parse(with_data);
    ASSERT_FALSE(f.ok()) << args[0];
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << args[0];
    EXPECT_NE(std::string(f.status().message()).find(flag), std::string::npos) << args[0] << ": " << f.status();
  }
  absl::StatusOr<TrainFlags> no_data = Parse({});
  ASSERT_FALSE(no_data.ok());
  EXPECT_NE(std::string(no_data.status().message()).find("--data"), std::string::npos);
  // --text instead of --data (not both), without a PyTorch side; --memory.
  absl::StatusOr<TrainFlags> text = Parse({"--text=/t.txt", "--memory=lean", "--offload-optimizer-state"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->text, "/t.txt");
  EXPECT_TRUE(text->lean);
  EXPECT_TRUE(text->offload);
  EXPECT_FALSE(Parse({"--text=/t.txt"})->lean) << "standard by default";
  EXPECT_FALSE(Parse({"--text=/t.txt"})->offload) << "on the device by default";
  EXPECT_TRUE(Parse({"--text=/t.txt", "--grads=bf16"})->bf16_grads);
  EXPECT_FALSE(Parse({"--text=/t.txt", "--grads=bf16", "--grads=f32"})->bf16_grads);
  EXPECT_FALSE(Parse({"--text=/t.txt"})->bf16_grads) << "f32 gradients by default";
  EXPECT_TRUE(Parse({"--text=/t.txt", "--embedding-backward=sorted"})->sorted_embedding);
  EXPECT_FALSE(Parse({"--text=/t.txt"})->sorted_embedding) << "atomics by default";
  // The placement checks' flags.
  absl::StatusOr<TrainFlags> placed =
      Parse({"--data=/d", "--arena-offset-gib=17", "--poison-arena", "--arena-guard-bytes=4096"});
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->arena_offset_gib, 17);
  EXPECT_EQ(placed->arena_guard_bytes, 4096);
  EXPECT_TRUE(placed->poison_arena);
  EXPECT_EQ(Parse({"--data=/d"})->arena_offset_gib, 0);
  EXPECT_FALSE(Parse({"--data=/d"})->poison_arena);
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--text=/t.txt", "--data=/d"}, {"--text=/t.txt", "--torch=a.json"}}) {
    absl::StatusOr<TrainFlags> f = Parse(bad);
    ASSERT_FALSE(f.ok()) << bad[1];
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// 6 x (GEMM parameters) + 12 L C T, by hand for two small shapes.
TEST(TrainConfig, FlopsPerTokenCountsGemmParametersAndAttention) {
  absl::StatusOr<TrainFlags> g = Parse({"--data=/d", "--n_layer=2", "--n_head=2", "--d_model=8", "--seq_len=4",
                                        "--vocab=10", "--ffn=16"});
  ASSERT_TRUE(g.ok()) << g.status();
  auto gp = compiler::models::Parameters(g->spec);
  ASSERT_TRUE(gp.ok());
  // wte 10x8 (the head too); per layer c_attn 8x24, c_proj 8x8, c_fc 8x16, mlp c_proj 16x8; wpe left out.
  const double g_mm = 80 + 2 * (192 + 64 + 128 + 128);
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(g->spec, *gp), 6 * g_mm + 12.0 * 2 * 8 * 4);
  absl::StatusOr<TrainFlags> l = Parse({"--data=/d", "--family=llama", "--n_layer=2", "--n_head=4",
                                        "--n_kv_head=2", "--d_model=8", "--seq_len=4", "--vocab=10", "--ffn=12"});
  ASSERT_TRUE(l.ok()) << l.status();
  auto lp = compiler::models::Parameters(l->spec);
  ASSERT_TRUE(lp.ok());
  // output 8x10 (tok_embeddings left out); per layer wq 8x8, wk and wv 8x4 (2 kv heads of 2), wo 8x8,
  // w1 and w3 8x12, w2 12x8.
  const double l_mm = 80 + 2 * (64 + 32 + 32 + 64 + 96 + 96 + 96);
  EXPECT_DOUBLE_EQ(TrainFlopsPerToken(l->spec, *lp), 6 * l_mm + 12.0 * 2 * 8 * 4);
}


// train_torch.py under Debian's torch (CPU): `python3 bench/cuda/train_torch.py ARGS`, its exit code and
// its output (stdout and stderr).
constexpr char kPython[] = "/usr/bin/python3";

std::string Script() {
  for (const char* p : {"bench/cuda/train_torch.py", "loom/bench/cuda/train_torch.py"})
    if (access(p, R_OK) == 0) return p;
  return "bench/cuda/train_torch.py";
}

std::string RefScript() {
  for (const char* p : {"tests/parity/gpt_torch.py", "loom/tests/parity/gpt_torch.py"})
    if (access(p, R_OK) == 0) return p;
  return "tests/parity/gpt_torch.py";
}

std::string TmpDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return absl::StrCat(t != nullptr ? t : "/tmp", "/", name);
}

int RunTorch(const std::string& args, std::string* output) {
  const std::string log = TmpDir("train_torch.log");
  // timeout: a wedged interpreter fails the case instead of hanging the test.
  const std::string cmd = absl::StrCat("timeout 120 ", kPython, " ", Script(), " ", args, " >", log, " 2>&1");
  int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  *output = ss.str();
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(TrainTorch, PresetsAreTrainConfigs) {
  std::string out;
  ASSERT_EQ(RunTorch("--print-presets", &out), 0) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  ASSERT_EQ(j.size(), TrainPresets().size());
  for (const TrainPreset& p : TrainPresets()) {
    ASSERT_TRUE(j.contains(p.name)) << p.name;
    const nlohmann::json& t = j[p.name];
    EXPECT_EQ(t["family"], p.family) << p.name;
    const std::vector<std::pair<const char*, int>> fields = {
        {"n_layer", p.n_layer}, {"n_head", p.n_head}, {"n_kv_head", p.n_kv_head}, {"d_model", p.d_model},
        {"ffn", p.ffn},         {"seq_len", p.seq_len}, {"vocab", p.vocab},     {"batch", p.batch}};
    for (const auto& [k, v] : fields) EXPECT_EQ(t[k].get<int>(), v) << p.name << " " << k;
  }
}

// For each family, a tiny config: the weights --init writes and the eager
// model's parameters have Loom's names and shapes, its parameter and FLOP
// counts are Loom's, it trains (finite losses, one per step), and
// config.json is what train_bench checks.
TEST(TrainTorch, ModelsHaveLoomsParametersAndTrainEagerOnTheCpu) {
  const std::vector<std::string> cases = {
      "--family gpt --n_layer 2 --n_head 2 --d_model 16 --ffn 40 --seq_len 8 --vocab 32 --batch 2",
      "--family llama --n_layer 2 --n_head 4 --n_kv_head 2 --d_model 16 --ffn 24 --seq_len 8 --vocab 32 --batch 2"};
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string dir = TmpDir(absl::StrCat("model", i));
    std::string out;
    ASSERT_EQ(RunTorch(absl::StrCat("--init ", dir, " --steps 2 --warmup 1 ", cases[i]), &out), 0) << out;
    std::vector<std::string> flags = {"--data=" + dir};
    std::istringstream words(cases[i]);
    for (std::string k, v; words >> k >> v;) flags.push_back(k + "=" + v);
    absl::StatusOr<TrainFlags> f = Parse(flags);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_TRUE(CheckDataConfig(*f).ok()) << CheckDataConfig(*f);
    auto params = compiler::models::Parameters(f->spec);
    ASSERT_TRUE(params.ok());
    auto weights = tests::parity::LoadTensorDir(dir + "/weights");
    ASSERT_TRUE(weights.ok()) << weights.status();
    EXPECT_EQ(weights->size(), params->size()) << cases[i];
    for (const auto& p : *params) {
      auto it = weights->find(p.name);
      ASSERT_NE(it, weights->end()) << p.name;
      EXPECT_EQ(it->second.shape(), p.shape) << p.name;
    }

    const std::string json = dir + "/eager.json";
    ASSERT_EQ(RunTorch(absl::StrCat("--data ", dir, " --device cpu --mode eager --steps 2 --warmup 1 --out ", json),
                       &out), 0) << out;
    std::ifstream in(json);
    nlohmann::json r = nlohmann::json::parse(in, nullptr, false);
    ASSERT_FALSE(r.is_discarded()) << out;
    const nlohmann::json& shapes = r["param_shapes"];
    EXPECT_EQ(shapes.size(), params->size());
    for (const auto& p : *params) {
      ASSERT_TRUE(shapes.contains(p.name)) << p.name;
      std::vector<int64_t> want(p.shape.begin(), p.shape.end());
      EXPECT_EQ(shapes[p.name].get<std::vector<int64_t>>(), want) << p.name;
    }
    EXPECT_EQ(r["params"].get<int64_t>(), compiler::models::NumParameters(*params));
    EXPECT_DOUBLE_EQ(r["flops_per_token"].get<double>(), TrainFlopsPerToken(f->spec, *params));
    std::vector<double> losses = r["losses"].get<std::vector<double>>();
    ASSERT_EQ(losses.size(), 3u);
    for (double l : losses) EXPECT_TRUE(std::isfinite(l) && l > 0) << l;

    // The same training as the parity reference's (tests/parity/gpt_torch.py, whose model the parity
    // tests hold Loom to): same model, optimizer and clipping, so the same losses up to f32 rounding
    // (they agree exactly on one machine; 1e-6 leaves room for another thread count's sums). Weight
    // decay is below that resolution here (lr 3e-4 x 0.1 moves a 0.02 weight by 6e-7 a step).
    nlohmann::json cfg = {{"family", f->spec.family()}, {"n_layer", f->spec.n_layer()},
                          {"n_head", f->spec.n_head()}, {"n_kv_head", f->spec.n_kv_head()},
                          {"d_model", f->spec.d_model()}, {"ffn_hidden", f->spec.ffn_hidden()},
                          {"seq_len", f->spec.seq_len()}, {"vocab", f->spec.vocab()}, {"lr", 3e-4},
                          {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1},
                          {"grad_clip", 1.0}};
    std::ofstream(dir + "/ref.json") << cfg.dump();
    const std::string ref_cmd = absl::StrCat("timeout 120 ", kPython, " ", RefScript(), " --config ", dir,
                                             "/ref.json --weights ", dir, "/weights --batches ", dir,
                                             "/batches --out ", dir, "/ref --steps 3 >", dir, "/ref.log 2>&1");
    ASSERT_EQ(std::system(ref_cmd.c_str()), 0) << ref_cmd;
    auto ref = tests::parity::LoadTensorDir(dir + "/ref");
    ASSERT_TRUE(ref.ok()) << ref.status();
    const Tensor& ref_losses = ref->at("losses");
    ASSERT_EQ(ref_losses.numel(), 3);
    for (int s = 0; s < 3; ++s)
      EXPECT_NEAR(losses[s], ref_losses.data<double>()[s], 1e-6 * std::fabs(ref_losses.data<double>()[s]))
          << cases[i] << " step " << s + 1;

    // Activation checkpointing (--activation-checkpointing blocks) recomputes
    // each block's forward in the backward: the same arithmetic, so the same
    // losses up to f32 rounding.
    const std::string ckpt_json = dir + "/ckpt.json";
    ASSERT_EQ(RunTorch(absl::StrCat("--data ", dir, " --device cpu --mode eager --steps 2 --warmup 1 "
                                    "--activation-checkpointing blocks --out ", ckpt_json),
                       &out), 0) << out;
    std::ifstream ckpt_in(ckpt_json);
    nlohmann::json ck = nlohmann::json::parse(ckpt_in, nullptr, false);
    ASSERT_FALSE(ck.is_discarded()) << out;
    EXPECT_EQ(ck["impl"].get<std::string>(), "torch_eager_ckpt");
    const std::vector<double> ckpt_losses = ck["losses"].get<std::vector<double>>();
    ASSERT_EQ(ckpt_losses.size(), losses.size());
    for (size_t s = 0; s < losses.size(); ++s)
      EXPECT_NEAR(ckpt_losses[s], losses[s], 1e-6 * std::fabs(losses[s])) << cases[i] << " step " << s + 1;

    // The data of another model is refused, naming the field.
    TrainFlags other = *f;
    other.spec.set_n_layer(3);
    absl::Status st = CheckDataConfig(other);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(std::string(st.message()).find("n_layer"), std::string::npos) << st;
  }
}

TEST(TrainTorch, BadFlagsExit2NamingTheFlag) {
  const std::string dir = TmpDir("bad");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--init " + dir + " --preset gpt2-7b", "--preset"},
      {"--init " + dir + " --n_layer 0", "--n_layer"},
      {"--init " + dir + " --n_head x", "--n_head"},
      {"--init " + dir + " --n_kv_head 5 --preset llama-124m", "--n_kv_head"},
      {"--init " + dir + " --d_model 100", "--d_model"},
      {"--data " + dir + "/nothing --device cpu", "--data"},
      {"--init " + dir + " --steps 0", "--steps"},
      {"--init " + dir + " --mode fast", "--mode"},
      {"--init " + dir + " --bogus 1", "--bogus"},
  };
  for (const auto& [args, flag] : cases) {
    std::string out;
    EXPECT_EQ(RunTorch(args, &out), 2) << args << "\n" << out;
    EXPECT_NE(out.find(flag), std::string::npos) << args << "\n" << out;
  }
}

// train_torch.py --init --text: the batches both sides train on are byte
// windows of the file (y is x one byte on), not random tokens; a missing
// file or a vocabulary under 256 exits 2 naming --text.
TEST(TrainTorch, InitTextWritesWindowsOfTheFile) {
  const std::string path = TmpDir("torch_text.txt");
  std::string text;
  for (int i = 0; i < 3000; ++i) text.push_back(static_cast<char>((i * 11 + i / 7) % 253));
  std::ofstream(path, std::ios::binary) << text;
  const std::string dir = TmpDir("torch_text");
  const std::string shape =
      "--family llama --n_layer 1 --n_head 2 --n_kv_head 2 --d_model 16 --ffn 24 --seq_len 16 --batch 3";
  std::string out;
  ASSERT_EQ(RunTorch(absl::StrCat("--init ", dir, " --steps 2 --warmup 1 --vocab 300 --text ", path, " ", shape), &out),
            0)
      << out;
  auto batches = tests::parity::LoadTensorDir(dir + "/batches");
  ASSERT_TRUE(batches.ok()) << batches.status();
  auto byte = [](const Tensor& t, int64_t i) { return static_cast<char>(static_cast<int>(t.GetDouble(i))); };
  for (int step = 0; step < 3; ++step) {
    const Tensor& x = batches->at(absl::StrCat("x", step));
    const Tensor& y = batches->at(absl::StrCat("y", step));
    ASSERT_EQ(x.shape(), Shape({3, 16}));
    for (int64_t r = 0; r < 3; ++r) {
      std::string window;
      for (int64_t j = 0; j < 16; ++j) window.push_back(byte(x, r * 16 + j));
      window.push_back(byte(y, r * 16 + 15));
      EXPECT_NE(text.find(window), std::string::npos) << "step " << step << " row " << r;
      for (int64_t j = 0; j + 1 < 16; ++j) EXPECT_EQ(y.GetDouble(r * 16 + j), x.GetDouble(r * 16 + j + 1));
    }
  }
  for (const std::string& args : {absl::StrCat("--init ", dir, "2 --vocab 300 --text ", path, ".missing ", shape),
                                  absl::StrCat("--init ", dir, "3 --vocab 200 --text ", path, " ", shape)}) {
    EXPECT_EQ(RunTorch(args, &out), 2) << args << "\n" << out;
    EXPECT_NE(out.find("--text"), std::string::npos) << out;
  }
}

// --text's batches: y is x shifted by one byte of the file, every window a
// run of the file's bytes; a step's batch is the same every time and steps
// differ; a short file or a vocabulary under 256 is refused by flag.
TEST(TrainConfig, TextBatchesAreWindowsOfTheFile) {
  const std::string path = TmpDir("text.txt");
  std::string text;
  for (int i = 0; i < 5000; ++i) text.push_back(static_cast<char>((i * 7 + i / 13) % 251));
  std::ofstream(path, std::ios::binary) << text;
  auto t = TextBatches::Open(path, 64, 4, 32000);
  ASSERT_TRUE(t.ok()) << t.status();
  auto [x, y] = t->Batch(3, DType::kI32, DType::kI64);
  EXPECT_EQ(x.shape(), Shape({4, 64}));
  EXPECT_EQ(y.dtype(), DType::kI64);
  for (int64_t r = 0; r < 4; ++r) {
    const std::string window(1, static_cast<char>(x.GetDouble(r * 64)));
    size_t off = std::string::npos;
    for (size_t o = text.find(window); o != std::string::npos; o = text.find(window, o + 1)) {
      bool match = o + 65 <= text.size();
      for (int64_t j = 0; match && j < 64; ++j)
        match = static_cast<unsigned char>(text[o + j]) == x.GetDouble(r * 64 + j) &&
                static_cast<unsigned char>(text[o + j + 1]) == y.GetDouble(r * 64 + j);
      if (match) { off = o; break; }
    }
    EXPECT_NE(off, std::string::npos) << "row " << r << " is not a window of the file";
  }
  auto [x2, y2] = t->Batch(3, DType::kI32, DType::kI64);
  EXPECT_EQ(x2.ToVector(), x.ToVector());
  EXPECT_NE(t->Batch(4, DType::kI32, DType::kI64).first.ToVector(), x.ToVector());
  EXPECT_EQ(TextBatches::Open(path, 4999, 1, 32000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(TextBatches::Open(path, 64, 4, 100).status().message()).find("--vocab"), std::string::npos);
  EXPECT_EQ(TextBatches::Open(path + ".missing", 64, 4, 32000).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace loom::bench::cuda
