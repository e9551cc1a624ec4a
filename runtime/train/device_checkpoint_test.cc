// Checkpoints of a device: cuda trainer, on any machine: the CUDA executor is
// replaced by parallel/testing/host_cuda_executor.h (the same interface over
// host memory, with a stand-in step), so what is checked is the host side of
// a GPU checkpoint: Trainer::State() reads every parameter and AdamW moment
// back from the executor before a save, and Checkpointer::Restore hands the
// loaded tensors to the executor (Trainer::StateChanged). The checkpoint
// itself is the CPU's format: a "cuda" checkpoint restores into a CPU trainer
// and a CPU checkpoint into a "cuda" trainer, tensor for tensor bitwise.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/rng.h"
#include "base/tensor.h"
#include "gtest/gtest.h"
#include "parallel/testing/host_cuda_executor.h"
#include "parallel/testing/small_spec.h"
#include "parallel/trainer.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/sampler.h"
#include "runtime/train/checkpointer.h"

namespace loom::runtime::train {
namespace {

using loom::parallel::testing::RandomTokens;

using parallel::testing::HostCudaExecutor;

v1::JobSpec Spec(const std::string& device) {
  v1::JobSpec spec = parallel::testing::SmallSpec({}, 2, 1e-2f);
  spec.set_device(device);
  return spec;
}

struct Session {
  std::unique_ptr<parallel::Trainer> trainer;
  HostCudaExecutor* dev = nullptr;  // device: cuda only
  std::unique_ptr<Checkpointer> ckpt;
};

Session Make(const std::string& device) {
  Session r;
  const v1::JobSpec spec = Spec(device);
  parallel::TrainerOptions o;
  if (device == "cuda") o.make_cuda_executor = HostCudaExecutor::Factory(&r.dev);
  auto model = parallel::FamilyModel(spec);
  EXPECT_TRUE(model.ok()) << model.status();
  auto t = parallel::Trainer::Create(spec, std::move(*model), std::move(o));
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return r;
  r.trainer = std::move(*t);
  auto c = Checkpointer::Create(spec, *r.trainer, nullptr);
  EXPECT_TRUE(c.ok()) << c.status();
  if (c.ok()) r.ckpt = std::move(*c);
  return r;
}

std::string Dir(const std::string& name) {
  std::string d = absl::StrCat(::testing::TempDir(), "/", name);
  std::filesystem::remove_all(d);
  return d;
}

// Every parameter and moment a checkpoint holds, by name: on "cuda" what the
// executor stores, on the CPU the trainer's own tensors.
std::map<std::string, Tensor> Held(const Session& r) {
  std::map<std::string, Tensor> out;
  auto state = r.trainer->State();
  EXPECT_TRUE(state.ok()) << state.status();
  if (!state.ok()) return out;
  for (const auto& st : *state) out[st.name] = r.dev ? r.dev->Value(st.name) : st.local.Clone();
  return out;
}

void ExpectBitwiseEqual(const std::map<std::string, Tensor>& want, const std::map<std::string, Tensor>& got,
                        const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no " << name;
    const Tensor& g = it->second;
    ASSERT_TRUE(g.defined()) << what << ": " << name << " was never set";
    ASSERT_EQ(g.dtype(), DType::kF32) << what << ": " << name;
    ASSERT_EQ(g.shape(), w.shape()) << what << ": " << name;
    for (int64_t e = 0; e < w.numel(); ++e)
      ASSERT_EQ(w.data<float>()[e], g.data<float>()[e]) << what << ": " << name << "[" << e << "]";
  }
}

absl::Status Steps(Session& r, int n) {
  for (int i = 0; i < n; ++i) {
    const int64_t s = r.trainer->step();
    auto loss = r.trainer->Step(RandomTokens(2, 8, 32, 10 + s), RandomTokens(2, 8, 32, 50 + s));
    if (!loss.ok()) return loss.status();
  }
  return absl::OkStatus();
}

TEST(DeviceCheckpoint, CudaStateSavesAndRestoresThroughTheHost) {
  const std::string dir = Dir("cuda_ckpt");
  Session a = Make("cuda");
  ASSERT_NE(a.dev, nullptr);
  ASSERT_TRUE(Steps(a, 3).ok());
  const std::map<std::string, Tensor> at3 = Held(a);
  // The state read back for the save is what the executor's steps left, not
  // the initial upload: the stand-in step halves and shifts every element.
  ASSERT_GT(at3.size(), 3u);
  auto data = data::Sampler::Create(100, 7);
  ASSERT_TRUE(data.ok());
  data->Advance(6);
  ASSERT_TRUE(a.ckpt->Save(dir, data->state(), 3).ok());
  {
    auto state = a.trainer->State();
    ASSERT_TRUE(state.ok());
    for (const auto& st : *state) {  // the host tensors the save wrote
      const Tensor& d = at3.at(st.name);
      for (int64_t e = 0; e < d.numel(); ++e) ASSERT_EQ(d.data<float>()[e], st.local.data<float>()[e]) << st.name;
    }
  }

  Session b = Make("cuda");
  ASSERT_NE(b.dev, nullptr);
  const int uploads_before = b.dev->uploads();
  auto sampler = data::Sampler::Create(100, 7);
  ASSERT_TRUE(sampler.ok());
  std::string log;
  auto step = b.ckpt->Restore(dir, &*sampler, &log);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 3);
  EXPECT_EQ(b.trainer->step(), 3);
  EXPECT_EQ(sampler->state(), data->state());
  EXPECT_EQ(b.dev->uploads() - uploads_before, static_cast<int>(at3.size()))
      << "every parameter and moment goes to the device once";
  ExpectBitwiseEqual(at3, Held(b), "restored on cuda");

  // Both continue identically: the step after the resume sees the same state.
  ASSERT_TRUE(Steps(a, 2).ok());
  ASSERT_TRUE(Steps(b, 2).ok());
  ExpectBitwiseEqual(Held(a), Held(b), "two steps after the resume");
}

TEST(DeviceCheckpoint, CheckpointsMoveBetweenCudaAndCpu) {
  const std::string from_cuda = Dir("from_cuda"), from_cpu = Dir("from_cpu");
  auto sampler = data::Sampler::Create(100, 7);
  ASSERT_TRUE(sampler.ok());
  std::string log;

  Session gpu = Make("cuda");
  ASSERT_TRUE(Steps(gpu, 2).ok());
  ASSERT_TRUE(gpu.ckpt->Save(from_cuda, sampler->state(), 3).ok());
  Session cpu = Make("cpu");
  ASSERT_EQ(cpu.dev, nullptr);
  auto step = cpu.ckpt->Restore(from_cuda, &*sampler, &log);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 2);
  ExpectBitwiseEqual(Held(gpu), Held(cpu), "a cuda checkpoint on the cpu");

  // The CPU trains on (real AdamW) and saves; a cuda trainer takes it up.
  ASSERT_TRUE(Steps(cpu, 2).ok());
  ASSERT_TRUE(cpu.ckpt->Save(from_cpu, sampler->state(), 3).ok());
  Session gpu2 = Make("cuda");
  step = gpu2.ckpt->Restore(from_cpu, &*sampler, &log);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 4);
  ExpectBitwiseEqual(Held(cpu), Held(gpu2), "a cpu checkpoint on cuda");

  // The two checkpoints list the same tensors with the same dtypes and
  // shapes: nothing in them says which device wrote them.
  auto a = checkpoint::LoadLatest(from_cuda, checkpoint::Verify::kFull);
  auto b = checkpoint::LoadLatest(from_cpu, checkpoint::Verify::kFull);
  ASSERT_TRUE(a.ok() && b.ok());
  auto ra = checkpoint::CheckpointReader::Open(a->ckpt);
  auto rb = checkpoint::CheckpointReader::Open(b->ckpt);
  ASSERT_TRUE(ra.ok() && rb.ok());
  ASSERT_EQ(ra->manifest().tensors.size(), rb->manifest().tensors.size());
  for (size_t i = 0; i < ra->manifest().tensors.size(); ++i) {
    const auto& x = ra->manifest().tensors[i];
    const auto& y = rb->manifest().tensors[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.dtype, y.dtype) << x.name;
    EXPECT_EQ(x.shape, y.shape) << x.name;
    EXPECT_EQ(x.spec, y.spec) << x.name;
  }
}

}  // namespace
}  // namespace loom::runtime::train
