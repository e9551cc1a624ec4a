// "cuda:gloo" is registered and a "cuda:gloo" spec entry selects it: with a
// CUDA device the staged backend serves CUDA tensors; without one (this
// development machine, CI) the group still starts and CUDA calls fail with
// Unavailable naming cuda:gloo and the reason.
#include "collectives/process_group.h"
#include "collectives/staging/cuda_copier.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "gtest/gtest.h"

namespace loom::collectives::staging {
namespace {

TEST(CudaGlooBackend, SpecSelectsIt) {
  store::StoreServer::Options so;
  so.secret = "s";
  auto server = store::StoreServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  auto store = store::TcpStore::Connect((*server)->address(), "s");
  ASSERT_TRUE(store.ok()) << store.status();
  ProcessGroupOptions o;
  o.backend = "cpu:gloo,cuda:gloo";
  o.staging_bucket_bytes = 1 << 10;
  auto pg = ProcessGroup::Create(*store, 0, 1, o);
  ASSERT_TRUE(pg.ok()) << pg.status();
  auto cpu = (*pg)->BackendFor(Device::CPU(), OpType::kAllReduce, DType::kF32);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->name(), "gloo");
  auto cuda = (*pg)->BackendFor(Device::CUDA(0), OpType::kAllReduce, DType::kF32);
  if (CreateCudaCopier().ok()) {
    ASSERT_TRUE(cuda.ok()) << cuda.status();
    EXPECT_EQ((*cuda)->name(), "cuda:gloo");
  } else {
    EXPECT_TRUE(absl::IsUnavailable(cuda.status())) << cuda.status();
    for (const char* want : {"all_reduce", "cuda:0", "backend cuda:gloo", "CUDA"}) {
      EXPECT_NE(cuda.status().message().find(want), std::string::npos) << want << " in " << cuda.status();
    }
  }
}

}  // namespace
}  // namespace loom::collectives::staging
