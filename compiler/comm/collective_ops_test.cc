#include <thread>

#include "collectives/process_group.h"
#include "collectives/store/store_server.h"
#include "collectives/store/tcp_store.h"
#include "compiler/comm/communicator.h"
#include "compiler/compile.h"
#include "compiler/executor.h"
#include "compiler/ir/text.h"
#include "gtest/gtest.h"

namespace loom::compiler::comm {
namespace {

constexpr const char* kGraph = R"(graph @coll(%x: f32[2, 3] param) {
  %2 = all_reduce(%x) {group="tp", reduce="sum"} : f32[2, 3]
  %3 = all_gather(%x) {axis=1, group="tp", world=WORLD} : f32[2, GATHERED]
  %4 = reduce_scatter(%3) {axis=1, group="tp", reduce="sum", world=WORLD} : f32[2, 3]
  return %2, %3, %4
}
)";

std::string GraphText(int world) {
  std::string s = kGraph;
  auto rep = [&](const std::string& from, const std::string& to) {
    for (size_t p; (p = s.find(from)) != std::string::npos;) s.replace(p, from.size(), to);
  };
  rep("WORLD", std::to_string(world));
  rep("GATHERED", std::to_string(3 * world));
  return s;
}

TEST(CollectiveOps, OneRankWithoutCommunicatorIsIdentity) {
  auto g = ir::ParseGraph(GraphText(1));
  ASSERT_TRUE(g.ok()) << g.status();
  auto exec = Executor::Create(*g);
  ASSERT_TRUE(exec.ok()) << exec.status();
  Tensor x = Tensor::FromVector({2, 3}, {1, 2, 3, 4, 5, 6});
  auto out = exec->Run({x});
  ASSERT_TRUE(out.ok()) << out.status();
  for (const Tensor& o : *out) EXPECT_EQ(o.ToVector(), x.ToVector());
}

TEST(CollectiveOps, LargerWorldWithoutCommunicatorFailsNamingTheGroup) {
  auto g = ir::ParseGraph(GraphText(2));
  ASSERT_TRUE(g.ok()) << g.status();
  auto exec = Executor::Create(*g);
  ASSERT_FALSE(exec.ok());
  EXPECT_NE(std::string(exec.status().message()).find("group 'tp'"), std::string::npos) << exec.status();
}

TEST(CollectiveOps, TwoRanksOverTcpMatchTheDefinitions) {
  collectives::store::StoreServer::Options so;
  so.secret = "s";
  auto server = collectives::store::StoreServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::vector<Tensor>> results(2);
  std::vector<Tensor> grads(2);
  std::vector<absl::Status> status(2);
  auto rank_main = [&](int rank) {
    auto fail = [&](absl::Status s) { status[rank] = s; };
    auto store = collectives::store::TcpStore::Connect((*server)->address(), "s");
    if (!store.ok()) return fail(store.status());
    collectives::ProcessGroupOptions po;
    po.backend = "tcp";
    auto pg = collectives::ProcessGroup::Create(*store, rank, 2, po);
    if (!pg.ok()) return fail(pg.status());
    auto comm = MakeProcessGroupCommunicator(pg->get(), 20000);
    auto g = ir::ParseGraph(GraphText(2));
    if (!g.ok()) return fail(g.status());
    LoweringOptions lo;
    lo.communicators["tp"] = comm.get();
    auto exec = Executor::Create(*g, lo);
    if (!exec.ok()) return fail(exec.status());
    Tensor x = Tensor::FromVector({2, 3}, {1. + rank, 2, 3, 4, 5, 6. * (rank + 1)});
    auto out = exec->Run({x});
    if (!out.ok()) return fail(out.status());
    for (const Tensor& t : *out) results[rank].push_back(t.Clone());
    // Autodiff through the collectives: loss = sum(all_gather(x)).
    auto fg = ir::ParseGraph(R"(graph @g(%x: f32[2, 3] param) {
  %1 = all_gather(%x) {axis=1, group="tp", world=2} : f32[2, 6]
  %2 = sum(%1) : f32[]
  return %2
}
)");
    if (!fg.ok()) return fail(fg.status());
    CompileOptions co;
    co.autodiff.add_op = "add";
    co.lowering = lo;
    auto c = Compile(*fg, co);
    if (!c.ok()) return fail(c.status());
    Executor je(std::move(c->program));
    auto jo = je.Run({x});
    if (!jo.ok()) return fail(jo.status());
    grads[rank] = (*jo)[1].Clone();
  };
  std::thread t0(rank_main, 0), t1(rank_main, 1);
  t0.join();
  t1.join();
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  // all_reduce: elementwise sum of the two ranks' x.
  std::vector<double> sum = {3, 4, 6, 8, 10, 18};
  // all_gather along axis 1: [x0 | x1] row by row.
  std::vector<double> gathered = {1, 2, 3, 2, 2, 3, 4, 5, 6, 4, 5, 12};
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r][0].ToVector(), sum) << "rank " << r;
    EXPECT_EQ(results[r][1].ToVector(), gathered) << "rank " << r;
    // reduce_scatter of the gathered tensor: rank r keeps block r of (2 * gathered).
    std::vector<double> block;
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) block.push_back(2 * gathered[i * 6 + r * 3 + j]);
    EXPECT_EQ(results[r][2].ToVector(), block) << "rank " << r;
    // d sum(all_gather(x)) / dx = reduce_scatter(ones) = world = 2 everywhere.
    EXPECT_EQ(grads[r].ToVector(), std::vector<double>(6, 2.0)) << "rank " << r;
  }
}

}  // namespace
}  // namespace loom::compiler::comm
